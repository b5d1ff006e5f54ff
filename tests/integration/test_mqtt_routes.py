#!/usr/bin/env python3
"""Several MQTT routes in one server (docs/MQTT.md#routes): each `mqtt_route` line is a
subscription with its own topic scheme, payload format, fixed tenant and QoS, so
Zigbee2MQTT (zigbee2mqtt/<device>), Tasmota (tele/<device>/SENSOR, here through a
shared subscription) and Home Assistant statestream
(homeassistant/<domain>/<entity>/state) are taken at once through a real mosquitto.
With MQTT 5 a message finds its route by the subscription identifier the broker
returns; with MQTT 3.1.1 by matching its topic against the filters in order. What a
route cannot store reaches the dead-letter topic with the reason; invalid route lines
stop the start with a message naming the key and the line."""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, path_with, run_bin, tmpdir  # noqa: E402
from test_mqtt import (WAIT, Broker, metric, mqtt_server, read_packet, remlen, rows,  # noqa: E402
                       wait_connected, wait_for)
from test_mqtt5 import mstr, next_ack, publish_v5, start_fails, sub_read, sub_session  # noqa: E402
from test_mqtt_gateways import TASMOTA, ZIGBEE_PLUG, ZIGBEE_SENSOR  # noqa: E402

suite = Suite("test_mqtt_routes")
DL = "bucketdb-dead/routes"

# One route per gateway; the file form (a config file with repeated keys) is what
# docs/MQTT.md shows.
ROUTES = """\
mqtt_route = zigbee2mqtt/+ scheme=zigbee2mqtt/{device} payload=object tenant=home
mqtt_route = $share/bdb/tele/+/SENSOR scheme=tele/{device}/SENSOR payload=object tenant=home
# the entity is the device, the domain (level 2) names the metric
mqtt_route = homeassistant/+/+/state scheme=+/+/{device}/state payload=value:2 tenant=ha qos=1
"""


def metrics_of(s, tenant, device):
    return {m: v for _, m, v in rows(s, tenant, device)}


def latest_state(s, tenant, device):
    r = s.request("GET", path_with("/api/v1/state/latest", {"device": device, "tenant": tenant}),
                  None, {"Authorization": "Token " + s.token})
    eq(r.status, 200, "state of %s (%r)" % (device, r.body[:300]))
    return r.json()["state"]


def config_file(text):
    path = os.path.join(tmpdir("bdbroutes-"), "bucketdb.conf")
    with open(path, "w") as f:
        f.write(text)
    return path


@suite.test
def three_gateways_at_once_mqtt5():
    with Broker() as b:
        sub_session(b, "bdbtest-routes-dl", DL, "mqttv5")
        args = ["--config", config_file(ROUTES), "--mqtt-dead-letter-topic", DL]
        with mqtt_server(b, "bdbtest-routes", args=args) as s:
            wait_connected(s, b)
            contains(s.log(), "route 2: $share/bdb/tele/+/SENSOR scheme=")
            check(b.publish("zigbee2mqtt/living_room_sensor", json.dumps(ZIGBEE_SENSOR)))
            check(b.publish("zigbee2mqtt/desk_plug", json.dumps(ZIGBEE_PLUG)))
            check(b.publish("tele/tasmota_5A1B2C/SENSOR", json.dumps(TASMOTA)))
            check(b.publish("homeassistant/sensor/living_temp/state", "21.5"))
            check(b.publish("homeassistant/binary_sensor/front_door/state", "on"))
            check(b.publish("homeassistant/switch/coffee/state", "true"))
            want_sensor = {"battery": 100, "humidity": 58.28, "linkquality": 116,
                           "temperature": 21.37, "voltage": 3005,
                           "update.installed_version": 16842752, "update_available": 0}
            wait_for("the Zigbee sensor",
                     lambda: metrics_of(s, "home", "living_room_sensor") == want_sensor,
                     [s.log()])
            wait_for("the plug", lambda: metrics_of(s, "home", "desk_plug") ==
                     {"linkquality": 96, "power": 12.5, "energy": 3.21}, [s.log()])
            eq(latest_state(s, "home", "desk_plug"), "ON")
            wait_for("the Tasmota sensor", lambda: metrics_of(s, "home", "tasmota_5A1B2C").get(
                "AM2301.Temperature") == 21.4, [s.log()])
            eq(len(metrics_of(s, "home", "tasmota_5A1B2C")), 10, "Tasmota's numbers")
            wait_for("the HA sensor", lambda: metrics_of(s, "ha", "living_temp") ==
                     {"sensor": 21.5}, [s.log()])
            wait_for("the HA switch", lambda: metrics_of(s, "ha", "coffee") == {"switch": 1},
                     [s.log()])
            wait_for("the door's state", lambda: latest_state(s, "ha", "front_door") == "on",
                     [s.log()])
            eq(rows(s, "default", "living_temp"), [], "a fixed tenant, not default_tenant")
            # counted after the write returns: the data can be seen a moment before
            wait_for("six messages counted", lambda: metric(
                s, 'bucketdb_mqtt_messages_total{result="accepted"}') == 6, [s.log()])

            # each route's format decides what is refused: an object route takes no
            # bare number, the value route takes no JSON array
            check(b.publish("zigbee2mqtt/remote", '{"action": "single", "scenes": [1, 2]}'))
            out = sub_read(b, "bdbtest-routes-dl", DL, "mqttv5", 1, "%P")
            contains(out, "'scenes' is an array: arrays cannot be stored")
            contains(out, "topic:zigbee2mqtt/remote")
            check(b.publish("tele/tasmota_5A1B2C/SENSOR", "42"))
            out = sub_read(b, "bdbtest-routes-dl", DL, "mqttv5", 1, "%P")
            contains(out, "malformed object payload")
            contains(out, "topic:tele/tasmota_5A1B2C/SENSOR")
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 2)
            # counted when the broker acknowledged the dead letter, maybe after delivering it
            wait_for("2 dead letters counted",
                     lambda: metric(s, "bucketdb_mqtt_dead_letters_total") == 2, [s.log()])
            eq(rows(s, "home", "remote"), [])


@suite.test
def shared_route_splits_between_two_servers():
    """The same routes on two servers: the $share route's messages are split between
    them (each once), the other routes' messages reach both."""
    with Broker() as b:
        cfg = config_file(ROUTES)
        with mqtt_server(b, "bdbtest-routes-s1", args=["--config", cfg]) as s1, \
                mqtt_server(b, "bdbtest-routes-s2", args=["--config", cfg]) as s2:
            wait_connected(s1, b)
            wait_connected(s2, b)
            n = 20
            for i in range(n):
                check(b.publish("tele/t%d/SENSOR" % i, '{"AM2301": {"Temperature": %d}}' % i))
            check(b.publish("zigbee2mqtt/lamp", '{"brightness": 5}'))
            for s in (s1, s2):
                wait_for("the lamp", lambda: metrics_of(s, "home", "lamp") == {"brightness": 5},
                         [s.log()])

            def stored(s):
                return {i for i in range(n) if rows(s, "home", "t%d" % i)}
            wait_for("every shared message on one server",
                     lambda: len(stored(s1) | stored(s2)) == n, [s1.log(), s2.log()])
            one, two = stored(s1), stored(s2)
            eq(one & two, set(), "no message on both servers")
            check(one and two, "both servers took a share (%d, %d)" % (len(one), len(two)))


@suite.test
def subscription_identifier_picks_the_route():
    """Overlapping filters: mosquitto 2.0 delivers one copy per matching subscription,
    each with that subscription's identifier, so each copy takes its own route (by
    topic alone both would take the first)."""
    with Broker() as b:
        args = ["--mqtt-route", "ov/# scheme=ov/{device}/# payload=value tenant=a",
                "--mqtt-route", "ov/+/x scheme=ov/{device}/x payload=value:3 tenant=b"]
        with mqtt_server(b, "bdbtest-routes-id", args=args) as s:
            wait_connected(s, b)
            check(b.publish("ov/d1/x", "5"))
            wait_for("route 2's copy", lambda: [m for _, m, _ in rows(s, "b", "d1")] == ["x"],
                     [s.log()])
            wait_for("route 1's copy", lambda: [m for _, m, _ in rows(s, "a", "d1")] ==
                     ["value"], [s.log()])


def accept_routes(lsock, connack_props, want_ids):
    """A scripted MQTT 5 broker's side of a connection: CONNACK with connack_props,
    then one SUBSCRIBE per route, checked, each answered with QoS 1 granted."""
    conn, _ = lsock.accept()
    conn.settimeout(WAIT)
    eq(read_packet(conn)[0], 1, "CONNECT")
    conn.sendall(b"\x20" + remlen(3 + len(connack_props)) + b"\x00\x00"
                 + remlen(len(connack_props)) + connack_props)
    for i, (flt, qos) in enumerate([(b"r1/+", 1), (b"r1/#", 0)]):
        ptype, flags, body = read_packet(conn)
        eq((ptype, flags), (8, 2), "SUBSCRIBE of route %d" % (i + 1))
        eq(body[:2], (i + 1).to_bytes(2, "big"), "packet id = route number")
        props = b"\x0b" + bytes([i + 1]) if want_ids else b""
        eq(body[2:3 + len(props)], bytes([len(props)]) + props, "subscription identifier")
        eq(body[3 + len(props):], mstr(flt) + bytes([qos]), "filter and QoS")
        conn.sendall(b"\x90\x04" + body[:2] + b"\x00" + bytes([qos]))  # SUBACK granted
    return conn


@suite.test
def subscription_identifiers_with_a_scripted_broker():
    """Where two routes' filters match, the identifier the broker sends decides;
    without one, or with one whose filter does not match (a subscription left in the
    session by an earlier configuration), the first matching filter does; a broker
    without identifiers gets SUBSCRIBEs without them."""
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    lsock.settimeout(WAIT)
    port = lsock.getsockname()[1]
    s = Server(args=["--mqtt-broker", "127.0.0.1:%d" % port, "--mqtt-client-id", "scripted-r",
                     "--mqtt-route", "r1/+ scheme=+/{device} payload=value:1 tenant=one",
                     "--mqtt-route", "r1/# scheme=+/{device}/# payload=value tenant=two qos=0"])
    try:
        s.start()
        conn = accept_routes(lsock, b"", True)
        conn.sendall(publish_v5("r1/d1", b"7", 5, b"\x0b\x02"))  # route 2's identifier
        eq(next_ack(conn), b"\x00\x05")
        eq([(m, v) for _, m, v in rows(s, "two", "d1")], [("value", 7)],
           "route 2 took it by its identifier")
        conn.sendall(publish_v5("r1/d1", b"8", 6))  # no identifier: by topic, route 1
        eq(next_ack(conn), b"\x00\x06")
        eq([(m, v) for _, m, v in rows(s, "one", "d1")], [("r1", 8)])
        conn.sendall(publish_v5("r1/x/d2", b"4", 9, b"\x0b\x01"))  # r1/+ does not match
        eq(next_ack(conn), b"\x00\x09")
        eq([(m, v) for _, m, v in rows(s, "two", "x")], [("value", 4)])
        conn.sendall(publish_v5("zz/d1", b"9", 7, b"\x0b\x01"))  # no route's filter
        eq(next_ack(conn), b"\x00\x07\x90", "PUBACK reason: topic name invalid")
        contains(s.log(), "topic matches no mqtt_route filter")
        # a broker that has no subscription identifiers (CONNACK 0x29 = 0)
        conn.sendall(b"\xe0\x02\x8b\x00")  # DISCONNECT: server shutting down
        conn2 = accept_routes(lsock, b"\x29\x00", False)
        contains(s.log(), "has no subscription identifiers")
        conn2.sendall(publish_v5("r1/y/d3", b"3", 8))
        eq(next_ack(conn2), b"\x00\x08")
        eq([(m, v) for _, m, v in rows(s, "two", "y")], [("value", 3)])
        conn.close()
        s.stop()
        conn2.close()
    finally:
        s.kill()
        lsock.close()


@suite.test
def routes_by_topic_with_mqtt311():
    """No subscription identifiers in 3.1.1: the first route whose filter matches the
    topic is the message's. Routes come from repeated flags here."""
    with Broker() as b:
        args = ["--mqtt-version", "3.1.1",
                "--mqtt-route", "zigbee2mqtt/+ scheme=+/{device} payload=object tenant=home",
                "--mqtt-route", "homeassistant/+/+/state scheme=+/+/{device}/+ payload=value:2",
                "--mqtt-route", "fleet/+/+ scheme=fleet/{tenant}/{device} qos=0"]
        with mqtt_server(b, "bdbtest-routes311", args=args) as s:
            wait_connected(s, b)
            check(b.publish("zigbee2mqtt/lamp", '{"brightness": 200, "state": "ON"}'))
            check(b.publish("homeassistant/sensor/outdoor/state", "-3.5"))
            check(b.publish("fleet/acme/pump-7", "rpm v=900 1705327200000000000"))
            wait_for("lamp", lambda: metrics_of(s, "home", "lamp") == {"brightness": 200},
                     [s.log()])
            wait_for("outdoor", lambda: metrics_of(s, "default", "outdoor") ==
                     {"sensor": -3.5}, [s.log()])
            wait_for("pump-7", lambda: rows(s, "acme", "pump-7") ==
                     [(1705327200000, "rpm.v", 900)], [s.log()])


@suite.test
def invalid_routes_stop_the_start():
    broker = ["--mqtt-broker", "127.0.0.1:1"]
    cases = [
        (["--mqtt-route", "a/+ scheme=a/{device} payload=xml"],
         "mqtt_route 1 ('a/+ scheme=a/{device} payload=xml'): payload=xml is not json"),
        (["--mqtt-route", "a/+ scheme=a/{device}", "--mqtt-route", "b/+ qos=2"],
         "mqtt_route 2 ('b/+ qos=2'): qos=2: must be 0 or 1"),
        (["--mqtt-route", "a/+ scheme=a/+"], "mqtt_route 1 ('a/+ scheme=a/+'): scheme 'a/+': "
                                             "{device} is missing"),
        (["--mqtt-route", "a/+ scheme=a/{device} colour=red"], "unknown option 'colour'"),
        (["--mqtt-route", "a/+ tenant=acme"], "tenant=acme and the scheme's {tenant} level"),
        (["--mqtt-route", "a/+ scheme=a/{device} tenant=no/slash"],
         "tenant=no/slash is not a valid name"),
        (["--mqtt-version", "3.1.1", "--mqtt-route", "$share/g/a/+ scheme=a/{device}"],
         "a shared subscription needs mqtt_version = 5"),
        (["--mqtt-topics", "x/+", "--mqtt-route", "a/+ scheme=a/{device}"],
         "leave mqtt_topics, mqtt_topic_scheme and mqtt_formats unset"),
        (["--mqtt-route", "a/+/b#"], "'a/+/b#' is not a valid topic filter"),
    ]
    for args, want in cases:
        contains(start_fails(broker + args), want, "serve %r" % args)
    # a dead-letter topic that a route's filter matches would loop
    err = start_fails(broker + ["--mqtt-route", "dead/+ scheme=dead/{device}",
                                "--mqtt-dead-letter-topic", "dead/letters"])
    contains(err, "matches the subscription 'dead/+'")


@suite.test
def single_setting_form_unchanged():
    """Without mqtt_route the old keys are the one route (as before routes existed)."""
    with Broker() as b:
        args = ["--mqtt-topics", "zigbee2mqtt/+", "--mqtt-topic-scheme", "+/{device}",
                "--mqtt-formats", "zigbee2mqtt/+=object"]
        with mqtt_server(b, "bdbtest-routes-one", args=args) as s:
            wait_connected(s, b)
            check(b.publish("zigbee2mqtt/lamp", '{"brightness": 7}'))
            wait_for("lamp", lambda: metrics_of(s, "default", "lamp") == {"brightness": 7},
                     [s.log()])


@suite.test
def print_config_keeps_every_route():
    rc, out, err = run_bin(["serve", "--print-config", "--config", config_file(ROUTES)])
    eq(rc, 0, "print-config (%r)" % err)
    lines = [ln for ln in out.splitlines() if ln.startswith("mqtt_route = ")]
    eq(lines, [ln for ln in ROUTES.splitlines() if ln.startswith("mqtt_route")])


if __name__ == "__main__":
    suite.main()
