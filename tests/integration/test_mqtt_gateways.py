#!/usr/bin/env python3
"""MQTT payloads of the common home-automation gateways through a real mosquitto
(docs/MQTT.md#payloads): Zigbee2MQTT device topics (flat objects with nested members,
booleans, nulls and strings), Tasmota's tele/<device>/SENSOR (nested objects of
numbers beside strings) and Home Assistant's statestream (bare numbers whose metric is
a topic level, and bare texts that are the state). Numbers are stored under the keys
joined with '.', booleans as 1/0, a top-level "state" is the device state, other
strings are the device's attributes (one over max_tag_value_bytes is counted as not
stored); what cannot be stored at all (an array, an object of such strings only) reaches the dead-letter topic with the reason. The device rule
applies to these payloads too."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, path_with  # noqa: E402
from test_mqtt import Broker, metric, mqtt_server, rows, wait_connected, wait_for  # noqa: E402
from test_mqtt5 import sub_read, sub_session  # noqa: E402

suite = Suite("test_mqtt_gateways")
DL = "bucketdb-dead/gateways"

ZIGBEE_SENSOR = {"battery": 100, "humidity": 58.28, "linkquality": 116, "temperature": 21.37,
                 "voltage": 3005, "update": {"state": "idle", "installed_version": 16842752},
                 "update_available": False, "power_on_behavior": None}
ZIGBEE_PLUG = {"state": "ON", "linkquality": 96, "power": 12.5, "energy": 3.21,
               "child_lock": "UNLOCK"}
TASMOTA = {"Time": "2024-01-15T14:00:00",
           "AM2301": {"Temperature": 21.4, "Humidity": 47.3, "DewPoint": 9.6},
           "ENERGY": {"TotalStartTime": "2023-12-01T10:00:00", "Total": 12.345,
                      "Yesterday": 0.5, "Today": 0.2, "Power": 45, "Factor": 0.9,
                      "Voltage": 231, "Current": 0.21},
           "TempUnit": "C"}


def metrics_of(s, device):
    """{metric: value} of a device's stored rows (times are the arrival times)."""
    return {m: v for _, m, v in rows(s, "default", device)}


def latest_attrs(s, device):
    r = s.request("GET", path_with("/api/v1/state/latest", {"device": device}), None,
                  {"Authorization": "Token " + s.token})
    if r.status != 200:
        return None
    return {k: v["value"] for k, v in r.json()["attributes"].items()}


def latest_state(s, device):
    r = s.request("GET", path_with("/api/v1/state/latest", {"device": device}), None,
                  {"Authorization": "Token " + s.token})
    eq(r.status, 200, "state of %s (%r)" % (device, r.body[:300]))
    return r.json()["state"]


@suite.test
def zigbee2mqtt_and_tasmota_objects():
    with Broker() as b:
        sub_session(b, "bdbtest-gw-dl", DL, "mqttv5")
        args = ["--mqtt-topics", "zigbee2mqtt/+,tele/+/SENSOR",
                "--mqtt-topic-scheme", "+/{device}/#",
                "--mqtt-dead-letter-topic", DL]
        with mqtt_server(b, "bdbtest-gw", args=args) as s:
            wait_connected(s, b)
            check(b.publish("zigbee2mqtt/living_room_sensor", json.dumps(ZIGBEE_SENSOR)))
            check(b.publish("zigbee2mqtt/desk_plug", json.dumps(ZIGBEE_PLUG)))
            check(b.publish("tele/tasmota_5A1B2C/SENSOR", json.dumps(TASMOTA)))
            want_sensor = {"battery": 100, "humidity": 58.28, "linkquality": 116,
                           "temperature": 21.37, "voltage": 3005,
                           "update.installed_version": 16842752, "update_available": 0}
            wait_for("the Zigbee sensor",
                     lambda: metrics_of(s, "living_room_sensor") == want_sensor, [s.log()])
            wait_for("the plug", lambda: metrics_of(s, "desk_plug") ==
                     {"linkquality": 96, "power": 12.5, "energy": 3.21}, [s.log()])
            eq(latest_state(s, "desk_plug"), "ON", "a top-level state is the device state")
            want_tasmota = {"AM2301.Temperature": 21.4, "AM2301.Humidity": 47.3,
                            "AM2301.DewPoint": 9.6, "ENERGY.Total": 12.345,
                            "ENERGY.Yesterday": 0.5, "ENERGY.Today": 0.2, "ENERGY.Power": 45,
                            "ENERGY.Factor": 0.9, "ENERGY.Voltage": 231,
                            "ENERGY.Current": 0.21}
            wait_for("the Tasmota sensor",
                     lambda: metrics_of(s, "tasmota_5A1B2C") == want_tasmota, [s.log()])
            # other strings are the devices' attributes, under their joined keys
            eq(latest_attrs(s, "living_room_sensor"), {"update.state": "idle"})
            eq(latest_attrs(s, "desk_plug"), {"child_lock": "UNLOCK"})
            eq(latest_attrs(s, "tasmota_5A1B2C"),
               {"Time": "2024-01-15T14:00:00", "ENERGY.TotalStartTime": "2023-12-01T10:00:00",
                "TempUnit": "C"})
            eq(metric(s, "bucketdb_mqtt_string_fields_not_stored_total"), 0)
            # counted after the write returns: the data can be seen a moment before
            wait_for("three messages counted", lambda: metric(
                s, 'bucketdb_mqtt_messages_total{result="accepted"}') == 3, [s.log()])

            # what cannot be stored goes to the dead-letter topic with the reason
            check(b.publish("zigbee2mqtt/remote", '{"action": "single", "scenes": [1, 2]}'))
            out = sub_read(b, "bdbtest-gw-dl", DL, "mqttv5", 1, "%P")
            contains(out, "'scenes' is an array: arrays cannot be stored")
            contains(out, "topic:zigbee2mqtt/remote")
            # a string over max_tag_value_bytes is not stored: alone, nothing is left
            check(b.publish("zigbee2mqtt/remote", json.dumps({"action": "x" * 1025})))
            out = sub_read(b, "bdbtest-gw-dl", DL, "mqttv5", 1, "%P")
            contains(out, "nothing to store: no number, boolean or state (not stored: "
                          "string 'action')")
            check(b.publish("zigbee2mqtt/remote2", '{"action": "single"}'))
            wait_for("an object of strings only", lambda: latest_attrs(s, "remote2") ==
                     {"action": "single"}, [s.log()])
            deep = {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": {"i": 1}}}}}}}}}
            check(b.publish("zigbee2mqtt/deep", json.dumps(deep)))
            out = sub_read(b, "bdbtest-gw-dl", DL, "mqttv5", 1, "%P")
            contains(out, "object 'a.b.c.d.e.f.g.h' is nested deeper than 8 levels")
            eq(rows(s, "default", "remote"), [], "nothing of a refused object is stored")
            # a report of /api/v1/write/json still is one (it has "metrics")
            check(b.publish("zigbee2mqtt/reporter",
                            '{"time": 1705327200000, "metrics": {"temp": 20}}'))
            wait_for("the report", lambda: rows(s, "default", "reporter") ==
                     [(1705327200000, "temp", 20)], [s.log()])


# Publishes each (topic, payload) of argv[3] (JSON) at QoS 1 with Debian's paho-mqtt
# (python3-paho-mqtt) to 127.0.0.1:argv[1], MQTT 3.1.1 or 5 (argv[2]); exits 0 once the
# broker acknowledged every one.
PAHO = r"""
import json, sys
import paho.mqtt.client as mqtt
port, proto, msgs = int(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3])
c = mqtt.Client(client_id="bdbtest-paho-" + proto,
                protocol=mqtt.MQTTv5 if proto == "5" else mqtt.MQTTv311)
c.connect("127.0.0.1", port, keepalive=30)
c.loop_start()
infos = [c.publish(t, p, qos=1) for t, p in msgs]
for i in infos:
    i.wait_for_publish(timeout=30)
    if not i.is_published():
        sys.exit("not acknowledged: %r" % (i,))
c.disconnect()
c.loop_stop()
"""


def paho_publish(b, proto, msgs):
    if not os.path.exists("/usr/bin/python3"):
        raise AssertionError("/usr/bin/python3 missing (setup.sh --test installs it)")
    p = subprocess.run(["/usr/bin/python3", "-c", PAHO, str(b.port), proto, json.dumps(msgs)],
                       capture_output=True, timeout=90)
    eq(p.returncode, 0, "paho (python3-paho-mqtt, setup.sh --test installs it): %s"
       % p.stderr.decode()[-2000:])


@suite.test
def paho_publishes_the_gateway_payloads():
    """The gateways' payloads as a client library sends them: Debian's paho-mqtt, over
    MQTT 3.1.1 and 5, through mosquitto, at QoS 1."""
    with Broker() as b:
        args = ["--mqtt-topics", "zigbee2mqtt/+,tele/+/SENSOR",
                "--mqtt-topic-scheme", "+/{device}/#"]
        with mqtt_server(b, "bdbtest-gw-paho", args=args) as s:
            wait_connected(s, b)
            paho_publish(b, "311", [["zigbee2mqtt/kitchen_sensor", json.dumps(ZIGBEE_SENSOR)],
                                    ["zigbee2mqtt/tv_plug", json.dumps(ZIGBEE_PLUG)]])
            paho_publish(b, "5", [["tele/tasmota_77AA00/SENSOR", json.dumps(TASMOTA)]])
            wait_for("the Zigbee sensor", lambda: metrics_of(s, "kitchen_sensor") == {
                "battery": 100, "humidity": 58.28, "linkquality": 116, "temperature": 21.37,
                "voltage": 3005, "update.installed_version": 16842752, "update_available": 0},
                [s.log()])
            wait_for("the plug", lambda: metrics_of(s, "tv_plug") ==
                     {"linkquality": 96, "power": 12.5, "energy": 3.21}, [s.log()])
            eq(latest_state(s, "tv_plug"), "ON")
            wait_for("the Tasmota sensor", lambda: metrics_of(s, "tasmota_77AA00").get(
                "ENERGY.Total") == 12.345, [s.log()])
            eq(len(metrics_of(s, "tasmota_77AA00")), 10)
            eq(latest_attrs(s, "kitchen_sensor"), {"update.state": "idle"})


@suite.test
def home_assistant_statestream_values():
    with Broker() as b:
        args = ["--mqtt-topics", "homeassistant/+/+/state,plain/+/+",
                "--mqtt-topic-scheme", "+/+/{device}/#",
                "--mqtt-formats", "homeassistant/+/+/state=value:2"]
        with mqtt_server(b, "bdbtest-ha", args=args) as s:
            wait_connected(s, b)
            # statestream: homeassistant/<domain>/<entity>/state, the state as text; the
            # entity is the device, the domain (level 2) names the metric
            check(b.publish("homeassistant/sensor/living_temp/state", "21.5"))
            check(b.publish("homeassistant/binary_sensor/front_door/state", "on"))
            check(b.publish("homeassistant/switch/coffee/state", "true"))
            wait_for("the sensor", lambda: metrics_of(s, "living_temp") == {"sensor": 21.5},
                     [s.log()])
            wait_for("the switch", lambda: metrics_of(s, "coffee") == {"switch": 1},
                     [s.log()])
            wait_for("the door's state", lambda: latest_state(s, "front_door") == "on",
                     [s.log()])
            eq(rows(s, "default", "front_door"), [], "a text is the state, not a sample")
            # auto recognises a bare number; without a level its metric is "value"
            check(b.publish("plain/x/boiler", " 65.25\n"))
            wait_for("the bare number", lambda: metrics_of(s, "boiler") == {"value": 65.25},
                     [s.log()])
            # a message is counted after its write returns, so a reader may see its
            # data a moment before the counter (CI saw 3 of 4 once)
            wait_for("four messages counted", lambda: metric(
                s, 'bucketdb_mqtt_messages_total{result="accepted"}') == 4, [s.log()])
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 0)


@suite.test
def device_rule_applies_to_mqtt_payloads():
    """The device rule names devices from a payload's tags exactly as on HTTP; the
    topic's device applies only when the tags name none (every gateway object)."""
    with Broker() as b:
        args = ["--mqtt-topics", "zigbee2mqtt/+,telegraf/+",
                "--mqtt-topic-scheme", "+/{device}/#",
                "--device-rule", "host+device,host"]
        with mqtt_server(b, "bdbtest-rule", args=args) as s:
            wait_connected(s, b)
            check(b.publish("zigbee2mqtt/lamp", '{"brightness": 200}'))
            wait_for("lamp", lambda: metrics_of(s, "lamp") == {"brightness": 200}, [s.log()])
            # line protocol and JSON over MQTT: the names /write and /api/v1/write/json give
            check(b.publish("telegraf/gw1",
                            "disk,host=h1,device=sda1 used=5 1705327200000000000\n"
                            "cpu,host=h1,site=x load=2 1705327200000000000"))
            check(b.publish("telegraf/gw1", '{"time": 1705327200000, "tags": {"host": "h2"},'
                                            ' "metrics": {"m": 1}}'))
            check(b.publish("telegraf/gw1", "mem used=3 1705327200000000000"))
            wait_for("h1/sda1", lambda: rows(s, "default", "h1/sda1") ==
                     [(1705327200000, "disk.used", 5)], [s.log()])
            wait_for("h1", lambda: rows(s, "default", "h1") ==
                     [(1705327200000, "cpu.load", 2)], [s.log()])
            wait_for("h2", lambda: rows(s, "default", "h2") == [(1705327200000, "m", 1)],
                     [s.log()])
            wait_for("gw1", lambda: rows(s, "default", "gw1") ==
                     [(1705327200000, "mem.used", 3)], [s.log()])
        with Server(args=["--device-rule", "host+device,host"]) as h:  # the same over HTTP
            h.write("disk,host=h1,device=sda1 used=5 1705327200000000000\n"
                    "cpu,host=h1,site=x load=2 1705327200000000000\n")
            h.write_json({"time": 1705327200000, "tags": {"host": "h2"}, "metrics": {"m": 1}})
            eq(sorted(d["device"] for d in h.devices()["devices"]), ["h1", "h1/sda1", "h2"])


if __name__ == "__main__":
    suite.main()
