#!/usr/bin/env python3
"""The MQTT gateway's MQTT 5 features and protections against Debian's mosquitto
(docs/MQTT.md): two servers sharing one subscription ($share) receive disjoint sets
whose union is everything the publisher got acknowledged; MQTT 5 packets, session
expiry and reason codes against a scripted broker; the dead-letter topic (MQTT 5
user properties and the 3.1.1 JSON envelope); per-topic payload formats and topic
schemes; a saturated server pauses the consumer and stores everything later; a
broker restarted mid-stream loses nothing it acknowledged; two brokers at once; TLS
with a test CA made by openssl.

Acknowledgements are counted per message by a small QoS 1 publisher written here
(publisher sequence numbers), so broker-side refusals (messages the broker never
acknowledged) are reported apart from bucketdb's losses (acknowledged, not stored).
Brokers run as in test_mqtt.py: persistence on, max_queued_messages 0."""

import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bdbtest  # noqa: E402
from bdbtest import Server, Suite, TestFailure, check, contains, eq, tmpdir  # noqa: E402
from test_mqtt import (BASE, WAIT, Broker, free_port, metric, mqtt_server,  # noqa: E402
                       read_packet, remlen, rows, settled_metric, wait_connected, wait_for)

suite = Suite("test_mqtt5")
SHARE = "$share/bdb/bucketdb/+/+/telemetry"


def mstr(b):
    return len(b).to_bytes(2, "big") + b


class Publisher:
    """A QoS 1 MQTT 3.1.1 publisher that records which sequence numbers the broker
    acknowledged (PUBACK), with up to `window` messages in flight."""

    def __init__(self, port, client_id, window=20, pace=0.0, hold_at=None):
        self.port, self.client_id, self.window, self.pace = port, client_id, window, pace
        self.acked, self.unacked = [], []
        self.sock = None
        # hold_at: after that many messages the publisher waits (bounded) for release,
        # so a test can act while it is certain the stream is still flowing
        self.hold_at, self.release, self.sent = hold_at, threading.Event(), 0

    def connect(self, deadline):
        while time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                body = mstr(b"MQTT") + b"\x04\x02\x00\x3c" + mstr(self.client_id.encode())
                sock.sendall(b"\x10" + remlen(len(body)) + body)
                sock.settimeout(WAIT)
                ptype, _, body = read_packet(sock)
                if ptype == 2 and body[1] == 0:
                    self.sock = sock
                    return True
                sock.close()
            except (OSError, TestFailure):
                pass
            time.sleep(0.1)
        return False

    def send(self, msgs, reconnect=True):
        """msgs: [(seq, topic, payload)]; returns when each was acknowledged or given
        up (the connection failed with it in flight: counted unacked)."""
        deadline = time.monotonic() + WAIT
        todo = list(msgs)
        pid = 0
        while todo and time.monotonic() < deadline:
            if not self.sock and not self.connect(deadline):
                break
            inflight = {}
            try:
                while todo or inflight:
                    while todo and len(inflight) < self.window:
                        if self.sent == self.hold_at:
                            self.release.wait(WAIT)
                        seq, topic, payload = todo.pop(0)
                        self.sent += 1
                        pid = pid % 65535 + 1
                        t = topic.encode()
                        body = mstr(t) + pid.to_bytes(2, "big") + payload
                        inflight[pid] = seq
                        self.sock.sendall(b"\x32" + remlen(len(body)) + body)
                        if self.pace:
                            time.sleep(self.pace)  # pacing only; nothing asserts on time
                    ptype, _, body = read_packet(self.sock)
                    if ptype == 4:
                        self.acked.append(inflight.pop(int.from_bytes(body[:2], "big")))
            except (OSError, TestFailure):
                self.unacked.extend(inflight.values())  # in flight when it failed
                self.sock.close()
                self.sock = None
                if not reconnect:
                    break
        self.unacked.extend(seq for seq, _, _ in todo)
        return self

    def close(self):
        if self.sock:
            self.sock.sendall(b"\xe0\x00")
            self.sock.close()
            self.sock = None


def start_fails(args):
    """Runs `serve` with args, which must refuse to start: returns its stderr."""
    d = tmpdir("bdbbad-")
    try:
        r = subprocess.run([bdbtest.BIN, "serve", "--data", os.path.join(d, "data"), "--listen",
                            "127.0.0.1:0"] + args, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=20)
    except subprocess.TimeoutExpired:
        raise TestFailure("serve %r started (it should have refused)" % args)
    check(r.returncode != 0, "serve %r exited 0" % args)
    return r.stderr.decode("utf-8", "replace")


def seq_msgs(topic, seqs):
    return [(i, topic, b"seq v=%d %d" % (i, (BASE + i * 1000) * 10**6)) for i in seqs]


def stored_seqs(s, tenant, device):
    return {int(v) for _, m, v in rows(s, tenant, device) if m == "seq.v"}


@suite.test
def shared_subscription_splits_the_stream_between_two_servers():
    n = int(os.environ.get("BDB_MQTT_N", "400"))
    topic = "bucketdb/acme/shared/telemetry"
    with Broker() as b:
        s1 = mqtt_server(b, "bdbtest-share-1", args=["--mqtt-topics", SHARE])
        s2 = mqtt_server(b, "bdbtest-share-2", args=["--mqtt-topics", SHARE])
        with s1, s2:
            wait_connected(s1, b)
            wait_connected(s2, b)
            pub = Publisher(b.port, "bdbtest-share-pub").send(seq_msgs(topic, range(n)))
            pub.close()
            acked = set(pub.acked)

            def union():
                return stored_seqs(s1, "acme", "shared") | stored_seqs(s2, "acme", "shared")

            wait_for("every acknowledged message on one of the two servers",
                     lambda: acked <= union(), [s1.log(), s2.log(), b.logtext()])
            a, c = stored_seqs(s1, "acme", "shared"), stored_seqs(s2, "acme", "shared")
            print("  publisher: %d sent, %d acknowledged by the broker, %d not (broker-side);"
                  " server 1 stored %d, server 2 stored %d, both %d, missing %d"
                  % (n, len(acked), len(pub.unacked), len(a), len(c), len(a & c),
                     len(acked - (a | c))))
            eq(sorted(acked - (a | c)), [], "acknowledged messages lost by bucketdb")
            eq(sorted(a & c), [], "messages both servers stored (not disjoint)")
            check(a and c, "both servers received part of the stream")
            eq(len(pub.unacked), 0, "messages the broker did not acknowledge (broker-side)")


@suite.test
def shared_subscription_needs_mqtt5():
    contains(start_fails(["--mqtt-broker", "127.0.0.1:1", "--mqtt-topics", SHARE,
                          "--mqtt-version", "3.1.1"]), "needs mqtt_version = 5")


# ------------------------------------------------------------ a scripted MQTT 5 broker


def accept_v5(lsock, client_id, connack_props=b""):
    conn, _ = lsock.accept()
    conn.settimeout(WAIT)
    ptype, _, body = read_packet(conn)
    eq(ptype, 1, "first packet is CONNECT")
    eq(body[:7], b"\x00\x04MQTT\x05", "protocol name and level 5")
    eq(body[7] & 0x02, 0, "clean start 0 (the session persists)")
    plen = body[10]
    props = body[11:11 + plen]
    contains(props, b"\x11\xff\xff\xff\xff", "session expiry interval: never")
    contains(props, b"\x21\x00\x20", "receive maximum 32")
    off = 11 + plen
    n = int.from_bytes(body[off:off + 2], "big")
    eq(body[off + 2:off + 2 + n].decode(), client_id, "client id")
    conn.sendall(b"\x20" + remlen(2 + 1 + len(connack_props)) + b"\x00\x00"
                 + remlen(len(connack_props)) + connack_props)
    ptype, flags, body = read_packet(conn)
    eq((ptype, flags), (8, 2), "SUBSCRIBE")
    pid = body[:2]
    eq(body[2], 0, "SUBSCRIBE property length 0")
    n = int.from_bytes(body[3:5], "big")
    eq(body[5:5 + n], b"bucketdb/+/+/telemetry", "default filter")
    eq(body[5 + n], 1, "subscription options: QoS 1, no local 0")
    conn.sendall(b"\x90\x04" + pid + b"\x00\x01")  # SUBACK, no properties, granted QoS 1
    return conn


def publish_v5(topic, payload, pid, props=b""):
    t = topic.encode()
    body = mstr(t) + pid.to_bytes(2, "big") + remlen(len(props)) + props + payload
    return b"\x32" + remlen(len(body)) + body


def next_ack(conn):
    while True:
        ptype, _, body = read_packet(conn)
        if ptype == 12:  # PINGREQ
            conn.sendall(b"\xd0\x00")
            continue
        eq(ptype, 4, "packet type (PUBACK)")
        return body


@suite.test
def mqtt5_packets_and_reason_codes_with_a_scripted_broker():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    lsock.settimeout(WAIT)
    port = lsock.getsockname()[1]
    s = Server(args=["--mqtt-broker", "127.0.0.1:%d" % port, "--mqtt-client-id", "scripted5"])
    try:
        s.start()
        # the broker's CONNACK carries a receive maximum and a reason string
        conn = accept_v5(lsock, "scripted5", b"\x21\x00\x0a\x1f" + mstr(b"welcome"))
        topic = "bucketdb/acme/s5/telemetry"
        # a PUBLISH with properties (payload format, content type, a user property)
        props = b"\x01\x01\x03" + mstr(b"application/json") + b"\x26" + mstr(b"k") + mstr(b"v")
        conn.sendall(publish_v5(topic, b'{"time": %d, "metrics": {"v": 1}}' % BASE, 5, props))
        eq(next_ack(conn), b"\x00\x05", "PUBACK success (no reason code)")
        eq(rows(s, "acme", "s5"), [(BASE, "v", 1)], "stored before the PUBACK")
        # malformed payload: acknowledged with reason 0x99 payload format invalid
        conn.sendall(publish_v5(topic, b'{"metrics": ', 6))
        eq(next_ack(conn), b"\x00\x06\x99", "PUBACK reason: payload format invalid")
        # a topic outside the scheme: 0x90 topic name invalid
        conn.sendall(publish_v5("bucketdb/acme", b"m v=1", 7))
        eq(next_ack(conn), b"\x00\x07\x90", "PUBACK reason: topic name invalid")
        eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 2)
        # a topic alias (we announced a maximum of 0): protocol error, reconnect, and
        # the message is not acknowledged, so the broker would re-send it
        conn.sendall(publish_v5(topic, b"m v=2 %d" % ((BASE + 1) * 10**6), 8, b"\x23\x00\x01"))
        conn2 = accept_v5(lsock, "scripted5")
        conn2.sendall(publish_v5(topic, b"m v=2 %d" % ((BASE + 1) * 10**6), 8))
        eq(next_ack(conn2), b"\x00\x08")
        eq(rows(s, "acme", "s5"), [(BASE, "v", 1), (BASE + 1, "m.v", 2)])
        # a DISCONNECT with a reason from the broker is logged and we come back
        conn2.sendall(b"\xe0" + remlen(1 + 1 + 3 + 3) + b"\x8b" + remlen(6) + b"\x1f"
                      + mstr(b"bye"))
        conn3 = accept_v5(lsock, "scripted5")
        contains(s.log(), "server shutting down: bye")
        conn.close()
        conn2.close()
        s.stop()
        conn3.close()
    finally:
        lsock.close()


# ------------------------------------------------------------ dead letters


def sub_session(b, client, topic, version):
    """Creates a persistent subscription (so nothing published later is missed)."""
    r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(b.port), "-V", version,
                        "-c", "-i", client, "-q", "1", "-t", topic, "-E"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
    eq(r.returncode, 0, "mosquitto_sub -E (%r)" % r.stdout[-300:])


def sub_read(b, client, topic, version, count, fmt):
    r = subprocess.run(["mosquitto_sub", "-h", "127.0.0.1", "-p", str(b.port), "-V", version,
                        "-c", "-i", client, "-q", "1", "-t", topic, "-C", str(count),
                        "-W", str(int(WAIT)), "-F", fmt],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT + 10)
    return r.stdout.decode("utf-8", "replace")


@suite.test
def dead_letter_topic_receives_rejected_messages():
    dl = "bucketdb-dead/letters"
    with Broker() as b:
        # One persistent subscriber per read: a mosquitto_sub -C 1 may leave its last
        # message unacknowledged, and a second read in the same session would get it again.
        sub_session(b, "bdbtest-dl-sub", dl, "mqttv5")
        sub_session(b, "bdbtest-dl-sub3", dl, "mqttv5")
        with mqtt_server(b, "bdbtest-dl5", args=["--mqtt-dead-letter-topic", dl]) as s:
            wait_connected(s, b)
            check(b.publish("bucketdb/acme/dl1/telemetry", '{"time": 1, "metrics": '))
            check(b.publish("bucketdb/acme/dl1/telemetry",
                            '{"time": %d, "metrics": {"ok": 1}}' % BASE))
            wait_for("the good message", lambda: rows(s, "acme", "dl1") == [(BASE, "ok", 1)],
                     [s.log()])
            out = sub_read(b, "bdbtest-dl-sub", dl, "mqttv5", 1, "%t|%P|%p")
            contains(out, dl + "|", "the dead letter arrived (%r)" % out)
            contains(out, "reason:malformed json payload", "reason as a user property")
            contains(out, "topic:bucketdb/acme/dl1/telemetry", "original topic as a property")
            contains(out, '|{"time": 1, "metrics": ', "the original payload")
            settled_metric(s, "bucketdb_mqtt_dead_letters_total", 1)
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 1)
            contains(s.log(), "dead-lettered message on 'bucketdb/acme/dl1/telemetry'")
        # MQTT 3.1.1 has no properties: a JSON envelope
        with mqtt_server(b, "bdbtest-dl3", args=["--mqtt-dead-letter-topic", dl,
                                                 "--mqtt-version", "3.1.1"]) as s:
            wait_connected(s, b)
            check(b.publish("bucketdb/acme/dl2/telemetry", "not line protocol"))
            out = sub_read(b, "bdbtest-dl-sub3", dl, "mqttv5", 2, "%p")
            contains(out, '"topic":"bucketdb/acme/dl2/telemetry"', "envelope (%r)" % out)
            contains(out, '"reason":"malformed line-protocol payload')
            contains(out, '"payload_base64":"bm90IGxpbmUgcHJvdG9jb2w="')
            settled_metric(s, "bucketdb_mqtt_dead_letters_total", 1)
    # a dead-letter topic the subscription matches would loop: refused at start
    contains(start_fails(["--mqtt-broker", "127.0.0.1:1", "--mqtt-dead-letter-topic",
                          "bucketdb/x/y/telemetry"]), "would come back forever")


# ------------------------------------------------------------ formats and schemes


@suite.test
def dead_letter_keeps_the_whole_topic():
    # The topic goes whole into the dead letter: UTF-8 letters kept (they were '?'),
    # and past 511 bytes (it was cut there); here the 600-byte device level is over
    # max_key_bytes, which is why it is rejected. Its own broker and subscriber: a
    # mosquitto_sub -C N may leave its last message unacknowledged, to come again.
    dl = "bucketdb-dead/letters"
    utf = "bucketdb/acme/K\u00f6ln-\u6771\u4eac/telemetry"
    long_topic = "bucketdb/acme/" + "x" * 600 + "/telemetry"
    with Broker() as b:
        sub_session(b, "bdbtest-dlt-sub", dl, "mqttv5")
        with mqtt_server(b, "bdbtest-dlt", args=["--mqtt-dead-letter-topic", dl]) as s:
            wait_connected(s, b)
            check(b.publish(utf, "{"))
            check(b.publish(long_topic, '{"time": %d, "metrics": {"v": 1}}' % BASE))
            out = sub_read(b, "bdbtest-dlt-sub", dl, "mqttv5", 2, "%P")
            contains(out, "topic:" + utf, "UTF-8 topic kept (%r)" % out)
            contains(out, "topic:" + long_topic, "long topic whole (%r)" % out[:300])
            contains(out, "reason:device level is longer than 256 bytes")
            settled_metric(s, "bucketdb_mqtt_dead_letters_total", 2)


@suite.test
def device_level_as_long_as_max_key_bytes():
    # MQTT device names were cut off at 1,023 bytes (a stack buffer) whatever
    # max_key_bytes allowed; line protocol and JSON took them
    dev = "L" * 1100
    with Broker() as b:
        with mqtt_server(b, "bdbtest-longdev", args=["--max-key-bytes", "2000"]) as s:
            wait_connected(s, b)
            check(b.publish("bucketdb/acme/%s/telemetry" % dev,
                            '{"time": %d, "metrics": {"v": 1}}' % BASE))
            wait_for("the 1,100-byte device", lambda: rows(s, "acme", dev) == [(BASE, "v", 1)],
                     [s.log()])


@suite.test
def per_topic_formats_and_topic_scheme():
    with Broker() as b:
        args = ["--mqtt-topics", "fleet/#,bucketdb/+/+/telemetry",
                "--mqtt-formats", "fleet/+/+/raw=lp, bucketdb/+/+/telemetry=json"]
        with mqtt_server(b, "bdbtest-fmt", args=args) as s:
            wait_connected(s, b)
            # '{' would make "auto" read JSON; the pattern says line protocol
            check(b.publish("fleet/acme/f1/raw", "{cab} v=1 %d" % (BASE * 10**6)))
            # line protocol on a JSON topic is malformed
            check(b.publish("bucketdb/acme/f2/telemetry", "env v=2 %d" % (BASE * 10**6)))
            # a fleet topic without a pattern: auto
            check(b.publish("fleet/acme/f3/other", '{"time": %d, "metrics": {"a": 3}}' % BASE))
            wait_for("f1 and f3", lambda: rows(s, "acme", "f1") == [(BASE, "{cab}.v", 1)]
                     and rows(s, "acme", "f3") == [(BASE, "a", 3)], [s.log()])
            wait_for("the malformed count",
                     lambda: metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}') == 1,
                     [s.log()])
            eq(rows(s, "acme", "f2"), [])
            contains(s.log(), "malformed json payload: invalid JSON")
        # device first, tenant last, a literal first level
        args = ["--mqtt-topics", "site/#", "--mqtt-topic-scheme", "site/{device}/+/{tenant}"]
        with mqtt_server(b, "bdbtest-scheme", args=args) as s:
            wait_connected(s, b)
            check(b.publish("site/pump-1/temp/beta", "m v=7 %d" % (BASE * 10**6)))
            check(b.publish("site/pump-1/temp", "m v=8 %d" % (BASE * 10**6)))  # too short
            wait_for("pump-1 of beta", lambda: rows(s, "beta", "pump-1") == [(BASE, "m.v", 7)],
                     [s.log()])
            wait_for("the short topic counted",
                     lambda: metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}') == 1,
                     [s.log()])
            contains(s.log(), "topic has 3 levels, the topic scheme needs 4")


# ------------------------------------------------------------ saturation


@suite.test
def saturated_server_pauses_the_consumer_and_loses_nothing():
    """One write slot server-wide (max_inflight_writes 1), held by a slow HTTP upload:
    the gateway may not take it, so it pauses (the broker holds the stream); when the
    upload ends every message is stored and none was dropped."""
    n = 30
    topic = "bucketdb/acme/bp/telemetry"
    with Broker() as b:
        with mqtt_server(b, "bdbtest-bp", args=["--max-inflight-writes", "1"]) as s:
            wait_connected(s, b)
            hold = socket.create_connection(("127.0.0.1", s.port), timeout=WAIT)
            hold.sendall(b"POST /write?db=holder HTTP/1.1\r\nHost: x\r\nContent-Length: 100000"
                         b"\r\nContent-Type: text/plain\r\n\r\nenv v=1")
            try:
                wait_for("the upload to hold the write slot",
                         lambda: metric(s, "bucketdb_inflight_write_requests") == 1, [s.log()])
                pub = Publisher(b.port, "bdbtest-bp-pub").send(seq_msgs(topic, range(n)))
                pub.close()
                wait_for("the consumer to pause",
                         lambda: metric(s, "bucketdb_mqtt_backpressure_pauses_total") > 0,
                         [s.log()])
                time.sleep(0.5)  # it stays paused: nothing gets through meanwhile
                eq(stored_seqs(s, "acme", "bp"), set(), "stored while the slot was held")
            finally:
                hold.close()  # the upload ends (incomplete): the slot is free again
            wait_for("every message after the pause",
                     lambda: stored_seqs(s, "acme", "bp") == set(pub.acked), [s.log()])
            eq(len(pub.acked), n, "acknowledged by the broker")
            settled_metric(s, 'bucketdb_mqtt_messages_total{result="accepted"}', n)
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 0)
            contains(s.log(), "server saturated (inflight_writes); consumption from")


@suite.test
def device_quota_rejects_over_mqtt():
    """A registered tenant with max_devices 1: a message from a second device is
    rejected (counted device_quota, PUBACKed, not retried), the first device's go on."""
    with Broker() as b:
        with mqtt_server(b, "bdbtest-devq") as s:
            r = s.request("POST", "/api/v1/admin/tenants",
                          json.dumps({"name": "dq", "quotas": {"max_devices": 1}}),
                          {"Authorization": "Token " + s.token,
                           "Content-Type": "application/json"})
            eq(r.status, 201, "create tenant (%r)" % r.body[:300])
            wait_connected(s, b)
            check(b.publish("bucketdb/dq/d1/telemetry", "m v=1 %d" % (BASE * 10**6)))
            check(b.publish("bucketdb/dq/d2/telemetry", "m v=2 %d" % (BASE * 10**6)))
            check(b.publish("bucketdb/dq/d1/telemetry", "m v=3 %d" % ((BASE + 1) * 10**6)))
            wait_for("d1's two messages",
                     lambda: rows(s, "dq", "d1") == [(BASE, "m.v", 1), (BASE + 1, "m.v", 3)],
                     [s.log()])
            eq(rows(s, "dq", "d2"), [], "the second device was not created")
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="device_quota"}'), 1)
            contains(s.log(), "may have at most 1 devices")


# ------------------------------------------------------------ broker restart


@suite.test
def broker_restart_midstream_loses_nothing_acknowledged():
    """mosquitto is stopped (SIGTERM: it writes its persistence file) and started
    again while a publisher streams and bucketdb consumes; every message the broker
    acknowledged to the publisher is stored in the end. The publisher reconnects and
    goes on; what was in flight to the broker when it stopped is broker-side."""
    n = int(os.environ.get("BDB_MQTT_N", "600"))
    topic = "bucketdb/acme/brs/telemetry"
    with Broker() as b:
        with mqtt_server(b, "bdbtest-brs") as s:
            wait_connected(s, b)
            # Half the stream, then the publisher holds until the broker is stopping:
            # the stop lands mid-stream however slowly bucketdb consumes.
            pub = Publisher(b.port, "bdbtest-brs-pub", window=10, pace=0.003, hold_at=n // 2)
            t = threading.Thread(target=pub.send, args=(seq_msgs(topic, range(n)),))
            t.start()
            wait_for("part of the stream stored", lambda: len(stored_seqs(s, "acme", "brs"))
                     > n // 10, [s.log()])
            check(t.is_alive(), "the publisher is still streaming when the broker stops")
            pub.release.set()
            b.stop()
            b.start()
            t.join(WAIT)
            check(not t.is_alive(), "publisher finished")
            pub.close()
            acked = set(pub.acked)
            wait_for("every acknowledged message (%d)" % len(acked),
                     lambda: acked <= stored_seqs(s, "acme", "brs"), [s.log(), b.logtext()])
            print("  publisher: %d sent, %d acknowledged by the broker, %d in flight or refused "
                  "when the broker stopped (broker-side); bucketdb: 0 of the acknowledged "
                  "missing; %d redelivered (DUP)"
                  % (n, len(acked), len(pub.unacked),
                     metric(s, "bucketdb_mqtt_redeliveries_total")))
            check(len(acked) >= n - 2 * pub.window, "most of the stream was acknowledged")
            check(metric(s, "bucketdb_mqtt_connects_total") >= 2, "bucketdb reconnected")


# ------------------------------------------------------------ several brokers, TLS


@suite.test
def two_brokers_one_server():
    with Broker() as b1, Broker() as b2:
        s = Server(args=["--mqtt-broker", "127.0.0.1:%d, mqtt://127.0.0.1:%d" % (b1.port, b2.port),
                         "--mqtt-client-id", "bdbtest-two"])
        with s:
            wait_for("both brokers", lambda: metric(s, "bucketdb_mqtt_connected") == 2, [s.log()])
            check(b1.publish("bucketdb/acme/two/telemetry", "m v=1 %d" % (BASE * 10**6)))
            check(b2.publish("bucketdb/acme/two/telemetry", "m v=2 %d" % ((BASE + 1) * 10**6)))
            wait_for("one message from each broker",
                     lambda: rows(s, "acme", "two") == [(BASE, "m.v", 1), (BASE + 1, "m.v", 2)],
                     [s.log()])
            contains(s.metrics_text(), 'bucketdb_mqtt_broker_connected{broker="127.0.0.1:%d"} 1'
                     % b1.port)


def openssl(*args):
    r = subprocess.run(["openssl"] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=WAIT)
    eq(r.returncode, 0, "openssl %s: %r" % (args[0], r.stdout[-500:]))


def make_ca(d, name):
    """A CA and a server certificate for 127.0.0.1 (IP SAN) signed by it."""
    ca, cakey = os.path.join(d, name + "-ca.pem"), os.path.join(d, name + "-ca.key")
    crt, key = os.path.join(d, name + "-srv.pem"), os.path.join(d, name + "-srv.key")
    csr, ext = os.path.join(d, name + ".csr"), os.path.join(d, name + ".ext")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", cakey, "-out", ca, "-days", "2",
            "-subj", "/CN=bdbtest %s CA" % name)
    openssl("req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=127.0.0.1")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cakey, "-CAcreateserial",
            "-out", crt, "-days", "2", "-extfile", ext)
    # a client certificate from the same CA
    ccrt, ckey = os.path.join(d, name + "-cli.pem"), os.path.join(d, name + "-cli.key")
    openssl("req", *ec, "-keyout", ckey, "-out", csr, "-subj", "/CN=bucketdb")
    openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cakey, "-CAcreateserial",
            "-out", ccrt, "-days", "2")
    return ca, crt, key, ccrt, ckey


@suite.test
def tls_broker_with_a_test_ca():
    d = tmpdir("bdbtls-")
    ca, crt, key, ccrt, ckey = make_ca(d, "good")
    other_ca, _, _, other_ccrt, other_ckey = make_ca(d, "other")
    tls_port, mtls_port = free_port(), free_port()
    extra = ("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n"
             % (tls_port, ca, crt, key))
    # a second listener that wants a client certificate signed by the same CA
    extra += ("listener %d 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\n"
              "require_certificate true\n" % (mtls_port, ca, crt, key))
    with Broker(extra=extra) as b:
        url = "mqtts://127.0.0.1:%d" % tls_port
        with Server(args=["--mqtt-broker", url, "--mqtt-ca-file", ca,
                          "--mqtt-client-id", "bdbtest-tls"]) as s:
            wait_connected(s, b)
            r = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(tls_port),
                                "--cafile", ca, "-q", "1", "-t", "bucketdb/acme/tls/telemetry",
                                "-m", "m v=5 %d" % (BASE * 10**6)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
            eq(r.returncode, 0, "mosquitto_pub over TLS (%r)" % r.stdout)
            wait_for("the message over TLS", lambda: rows(s, "acme", "tls") == [(BASE, "m.v", 5)],
                     [s.log(), b.logtext()])
            contains(s.log(), "(TLS)")
        # a server that trusts another CA refuses the broker's certificate
        with Server(args=["--mqtt-broker", url, "--mqtt-ca-file", other_ca,
                          "--mqtt-client-id", "bdbtest-tls-bad"]) as s:
            wait_for("a refused handshake",
                     lambda: metric(s, "bucketdb_mqtt_connect_failures_total") > 0, [s.log()])
            eq(metric(s, "bucketdb_mqtt_connected"), 0)
            contains(s.log(), "certificate not accepted")
        # client certificates: the right one connects, none or a foreign one does not
        murl = "mqtts://127.0.0.1:%d" % mtls_port
        with Server(args=["--mqtt-broker", murl, "--mqtt-ca-file", ca, "--mqtt-cert-file", ccrt,
                          "--mqtt-key-file", ckey, "--mqtt-client-id", "bdbtest-mtls"]) as s:
            wait_connected(s, b)
        for cert in ([], ["--mqtt-cert-file", other_ccrt, "--mqtt-key-file", other_ckey]):
            with Server(args=["--mqtt-broker", murl, "--mqtt-ca-file", ca,
                              "--mqtt-client-id", "bdbtest-mtls-bad"] + cert) as s:
                wait_for("a refused client (%r)" % cert,
                         lambda: metric(s, "bucketdb_mqtt_connect_failures_total") > 0,
                         [s.log()])
                eq(metric(s, "bucketdb_mqtt_connected"), 0)
    # an unreadable CA file stops the start
    contains(start_fails(["--mqtt-broker", "mqtts://127.0.0.1:1", "--mqtt-ca-file",
                          os.path.join(d, "missing.pem")]), "mqtt_ca_file")


if __name__ == "__main__":
    suite.main()
