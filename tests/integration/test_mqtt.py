#!/usr/bin/env python3
"""The MQTT gateway against Debian's mosquitto broker (docs/MQTT.md): JSON and line
protocol round trips through the broker, a malformed payload counted and dropped
without blocking later messages, and kill -9 of bucketdb while a publisher sends
numbered QoS 1 messages: every message the broker acknowledged to the publisher is
stored after the restart (duplicates are harmless: a sample is identified by tenant,
device, metric and time); messages queued while bucketdb is down survive a broker
restart; and, against a scripted broker, PUBACK only after the sample is readable,
DUP redelivery, an oversized message, reconnection after a malformed packet.

The broker runs on 127.0.0.1 on a free port with a temporary configuration:
persistence true in a temp directory, max_queued_messages 0 (no limit on the messages
queued for an offline or busy persistent session, so the broker drops nothing it
accepted), max_queued_bytes 0 (no byte limit), max_inflight_messages 20 (default).
Without mosquitto and mosquitto_pub every test FAILS with the reason."""

import getpass
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, TestFailure, check, contains, eq, tmpdir  # noqa: E402

suite = Suite("test_mqtt")
BASE = 1700000000000  # 2023-11-14T22:13:20Z
WAIT = float(os.environ.get("BDB_MQTT_WAIT", "90"))  # bound of every wait below
SPAN = {"from": 0, "to": 4102444800000}
BURST = 200  # messages published in one burst just before the kill


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Broker:
    """mosquitto on 127.0.0.1 with persistence in a temp directory."""

    def __init__(self, extra=""):
        for tool in ("mosquitto", "mosquitto_pub"):
            if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
                raise TestFailure("%s is not installed: the MQTT tests need Debian's mosquitto "
                                  "and mosquitto-clients (scripts/setup.sh --test installs them)"
                                  % tool)
        self.bin = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        self.dir = tmpdir("bdbmqtt-")
        self.port = free_port()
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        with open(self.conf, "w") as f:
            f.write("listener %d 127.0.0.1\n" % self.port)
            f.write("allow_anonymous true\n")
            f.write("persistence true\n")
            f.write("persistence_location %s/\n" % self.dir)
            f.write("max_queued_messages 0\n")
            f.write("max_queued_bytes 0\n")
            f.write("max_inflight_messages 20\n")
            f.write("log_dest stderr\n")
            f.write("user %s\n" % getpass.getuser())
            f.write(extra)  # e.g. a TLS listener; its settings follow its listener line
        self.proc = None

    def start(self):
        # The port was free when picked; another process may bind it before mosquitto
        # does. On the first start only (clients keep the port across a restart) the
        # broker then moves to a fresh port.
        for attempt in range(5):
            path = os.path.join(self.dir, "broker.log")
            offset = os.path.getsize(path) if os.path.exists(path) else 0
            self.log = open(path, "ab")
            self.proc = subprocess.Popen([self.bin, "-c", self.conf], stdout=self.log,
                                         stderr=self.log, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                # "running" is logged once every listener is open: a connection before
                # it could reach whichever process holds the port
                with open(path, "rb") as f:
                    f.seek(offset)
                    running = b" running" in f.read()
                try:
                    if running:
                        socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                        self.started = True
                        return self
                except OSError:
                    pass
                time.sleep(0.05)
            else:
                raise TestFailure("mosquitto did not listen on %d" % self.port)
            self.log.close()
            with open(path, "rb") as f:
                f.seek(offset)
                tail = f.read().decode("utf-8", "replace")
            if "Address already in use" not in tail or getattr(self, "started", False):
                break
            with open(self.conf) as f:
                conf = f.read()
            old = "listener %d 127.0.0.1\n" % self.port
            self.port = free_port()
            with open(self.conf, "w") as f:
                f.write(conf.replace(old, "listener %d 127.0.0.1\n" % self.port, 1))
        raise TestFailure("mosquitto exited with %d:\n%s" % (self.proc.returncode,
                                                            self.logtext()))

    def stop(self):
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
            self.proc = None
            self.log.close()

    def logtext(self):
        try:
            with open(os.path.join(self.dir, "broker.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def publish(self, topic, payload, qos=1, client="bdbtest-pub"):
        """mosquitto_pub; True when the broker acknowledged (exit 0)."""
        r = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(self.port), "-q",
                            str(qos), "-i", client, "-t", topic, "-m", payload],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
        return r.returncode == 0

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def mqtt_server(broker, client_id, data=None, args=()):
    """A server consuming from broker (MQTT 5 unless args say otherwise)."""
    return Server(data=data, args=["--mqtt-broker", "127.0.0.1:%d" % broker.port,
                                   "--mqtt-client-id", client_id] + list(args))


def metric(s, name):
    """Value of one sample line of /metrics (0 when absent)."""
    m = re.search(r"^%s (\d+)$" % re.escape(name), s.metrics_text(), re.M)
    return int(m.group(1)) if m else 0


def wait_for(what, fn, logs=()):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.1)
    raise TestFailure("timed out waiting for %s\n%s" % (what, "\n".join(logs)))


def settled_metric(s, name, want, msg=""):
    """A counter the gateway bumps just after what the test can see (rows readable, a
    dead letter delivered, whose broker PUBACK comes later): waits (bounded) for it to
    reach want, then checks it is exactly want."""
    wait_for("%s = %r" % (name, want), lambda: metric(s, name) >= want, [s.log()])
    eq(metric(s, name), want, msg)


def wait_connected(s, broker):
    wait_for("the gateway to connect", lambda: metric(s, "bucketdb_mqtt_connected") == 1,
             [s.log(), broker.logtext()])


def rows(s, tenant, device, **kw):
    # the admin token reads every tenant, registered ones included
    r = s.request("GET", "/api/v1/query", None, {"Authorization": "Token " + s.token},
                  params=dict(SPAN, tenant=tenant, device=device, **kw))
    if r.status == 404:
        return []  # the device does not exist (yet)
    eq(r.status, 200, "query status (%r)" % r.body[:300])
    return [tuple(v) for v in r.json()["values"]]


@suite.test
def round_trip_json_and_line_protocol():
    with Broker() as b:
        with mqtt_server(b, "bdbtest-rt") as s:
            wait_connected(s, b)
            # a single report without a device: the topic's device wins
            check(b.publish("bucketdb/acme/dev1/telemetry",
                            '{"time": %d, "metrics": {"temp": 21.5}}' % BASE))
            # the batch schema of /api/v1/write/json, one report names its own device
            check(b.publish("bucketdb/acme/dev1/telemetry",
                            '{"reports": [{"time": %d, "metrics": {"temp": 22}},'
                            ' {"device": "dev9", "time": %d, "metrics": {"rpm": 900}}]}'
                            % (BASE + 1000, BASE)))
            # line protocol without a device tag (ns precision, as Telegraf sends it)
            check(b.publish("bucketdb/acme/dev2/telemetry",
                            "env temp=19.25,hum=40i %d\nenv temp=19.5 %d"
                            % (BASE * 10**6, (BASE + 1000) * 10**6)))
            # line protocol naming its device keeps it
            check(b.publish("bucketdb/beta/ignored/telemetry",
                            "env,device=lpdev temp=5 %d" % (BASE * 10**6)))
            want1 = [(BASE, "temp", 21.5), (BASE + 1000, "temp", 22)]
            wait_for("dev1", lambda: rows(s, "acme", "dev1") == want1, [s.log()])
            wait_for("dev9", lambda: rows(s, "acme", "dev9") == [(BASE, "rpm", 900)], [s.log()])
            want2 = [(BASE, "env.hum", 40), (BASE, "env.temp", 19.25),
                     (BASE + 1000, "env.temp", 19.5)]
            wait_for("dev2", lambda: sorted(rows(s, "acme", "dev2")) == sorted(want2),
                     [s.log()])
            wait_for("lpdev", lambda: rows(s, "beta", "lpdev") == [(BASE, "env.temp", 5)],
                     [s.log()])
            eq(rows(s, "beta", "ignored"), [], "the payload's device wins in LP")
            eq(rows(s, "default", "dev1"), [], "the topic's tenant, not the default")
            # counted just after the write: wait for the count, then check it is exact
            acc = 'bucketdb_mqtt_messages_total{result="accepted"}'
            wait_for("4 accepted", lambda: metric(s, acc) >= 4, [s.log()])
            eq(metric(s, acc), 4)
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 0)


@suite.test
def malformed_payloads_are_counted_and_do_not_block():
    with Broker() as b:
        with mqtt_server(b, "bdbtest-bad") as s:
            wait_connected(s, b)
            bad = [("bucketdb/acme/m1/telemetry", '{"time": 1, "metrics": '),  # cut JSON
                   ("bucketdb/acme/m1/telemetry", "not line protocol at all"),
                   # a string over max_tag_value_bytes: not an attribute, nothing left
                   ("bucketdb/acme/m1/telemetry", '{"time": %d, "metrics": {"x": "%s"}}'
                    % (BASE, "s" * 1025)),
                   ("bucketdb/bad tenant!/m1/telemetry", "env v=1 %d" % (BASE * 10**6))]
            for topic, payload in bad:
                check(b.publish(topic, payload), "broker refused %r" % payload)
            check(b.publish("bucketdb/acme/m1/telemetry",
                            '{"time": %d, "metrics": {"ok": 1}}' % BASE))
            wait_for("the good message after the bad ones",
                     lambda: rows(s, "acme", "m1") == [(BASE, "ok", 1)], [s.log()])
            acc = 'bucketdb_mqtt_messages_total{result="accepted"}'
            wait_for("1 accepted", lambda: metric(s, acc) >= 1, [s.log()])
            eq(metric(s, acc), 1)
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), len(bad))
            log = s.log()
            contains(log, "bucketdb/acme/m1/telemetry", "the log names the topic")
            contains(log, "dropped message on", "the log says what happened")
            contains(log, "malformed json payload", "and why")
            # the bad messages were acknowledged, not answered by a disconnect
            eq(metric(s, "bucketdb_mqtt_connected"), 1)
            eq(metric(s, "bucketdb_mqtt_connects_total"), 1)


@suite.test
def kill9_midstream_loses_nothing_the_broker_acknowledged():
    n = int(os.environ.get("BDB_MQTT_N", "300"))
    topic = "bucketdb/acme/kdev/telemetry"
    with Broker() as b:
        s = mqtt_server(b, "bdbtest-kill")
        s.start()
        wait_connected(s, b)
        acked, refused = [], []
        for i in range(n):
            if i == n // 3:
                # A stream over one connection (mosquitto_pub -l: one message per line;
                # exit 0 once the broker acknowledged them all); bucketdb is killed
                # while the stream is flowing, so messages are in flight to it.
                burst = list(range(n, n + BURST))
                pub = subprocess.Popen(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(b.port),
                                        "-q", "1", "-i", "bdbtest-burst", "-t", topic, "-l"],
                                       stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
                for k, j in enumerate(burst):
                    if k == BURST // 2:
                        s.kill()  # SIGKILL mid-stream: no clean shutdown
                    pub.stdin.write(b"seq v=%d %d\n" % (j, (BASE + j * 1000) * 10**6))
                    if k % 20 == 19:
                        pub.stdin.flush()
                        time.sleep(0.005)  # pacing only; nothing asserts on time
                pub.stdin.close()
                rc = pub.wait(timeout=WAIT)
                (acked if rc == 0 else refused).extend(burst)
            if i == 2 * n // 3:
                s.start()  # same data directory, same client id: the session resumes
            ok = b.publish(topic, "seq v=%d %d" % (i, (BASE + i * 1000) * 10**6),
                           client="bdbtest-seq")
            (acked if ok else refused).append(i)
        want = {(BASE + i * 1000, "seq.v", float(i)) for i in acked}

        def stored():
            return {(t, m, float(v)) for t, m, v in rows(s, "acme", "kdev")}

        wait_for("every acknowledged message (%d)" % len(acked),
                 lambda: want <= stored(), [s.all_logs()[-3000:], b.logtext()])
        missing = sorted(want - stored())
        print("  publisher: %d sent, %d acknowledged by the broker, %d refused by the "
              "broker (broker-side); bucketdb: %d of the acknowledged missing"
              % (n + BURST, len(acked), len(refused), len(missing)))
        print("  after the restart: %d message(s) redelivered by the broker (DUP)"
              % metric(s, "bucketdb_mqtt_redeliveries_total"))
        eq(missing, [], "acknowledged messages lost by bucketdb")
        eq(refused, [], "messages the broker did not acknowledge (broker-side)")
        s.stop()


@suite.test
def broker_restart_keeps_the_queued_messages():
    """Messages queued for bucketdb's persistent session while bucketdb is down
    survive a broker restart (persistence true) and are stored when it returns."""
    n = 60
    topic = "bucketdb/acme/rdev/telemetry"
    with Broker() as b:
        s = mqtt_server(b, "bdbtest-restart")
        s.start()
        wait_connected(s, b)  # creates the session and its subscription
        s.stop()
        acked = [i for i in range(n)
                 if b.publish(topic, "q v=%d %d" % (i, (BASE + i) * 10**6), client="bdbtest-q")]
        b.stop()  # SIGTERM: mosquitto writes its persistence file
        b.start()
        s.start()
        want = {(BASE + i, "q.v", float(i)) for i in acked}

        def stored():
            return {(t, m, float(v)) for t, m, v in rows(s, "acme", "rdev")}

        wait_for("the messages queued across the broker restart",
                 lambda: want <= stored(), [s.all_logs()[-3000:], b.logtext()])
        eq(len(acked), n, "messages the broker did not acknowledge (broker-side)")
        s.stop()


@suite.test
def tenant_write_rate_pauses_consumption_and_loses_nothing():
    """A registered tenant over its write rate: the gateway stops acknowledging and
    waits (the broker holds the messages); every message is stored in the end. A
    message larger than the tenant's burst can never pass: counted and dropped."""
    with Broker() as b:
        with mqtt_server(b, "bdbtest-quota") as s:
            r = s.request("POST", "/api/v1/admin/tenants",
                          json.dumps({"name": "rq", "quotas": {"writes_per_second": 2,
                                                               "burst": 3}}),
                          {"Authorization": "Token " + s.token,
                           "Content-Type": "application/json"})
            eq(r.status, 201, "create tenant (%r)" % r.body[:300])
            wait_connected(s, b)
            topic = "bucketdb/rq/qdev/telemetry"
            check(b.publish(topic, '{"time": %d, "metrics": {"a": 1, "b": 2, "c": 3, "d": 4}}'
                            % BASE))  # 4 samples > burst 3
            n = 8
            for i in range(n):
                check(b.publish(topic, "q v=%d %d" % (i, (BASE + 1 + i) * 10**6)))
            want = [(BASE + 1 + i, "q.v", i) for i in range(n)]
            wait_for("all %d messages of the rate-limited tenant" % n,
                     lambda: rows(s, "rq", "qdev") == want, [s.log()])
            check(metric(s, "bucketdb_mqtt_quota_pauses_total") > 0, "the consumer paused")
            eq(metric(s, 'bucketdb_mqtt_messages_total{result="over_burst"}'), 1)
            settled_metric(s, 'bucketdb_mqtt_messages_total{result="accepted"}', n)
            contains(s.log(), "consumption paused")


# ------------------------------------------------------------ a scripted broker


def read_packet(conn):
    """One MQTT packet: (type, flags, body)."""
    def exact(n):
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise TestFailure("connection closed by bucketdb")
            out += chunk
        return out
    first = exact(1)[0]
    mult, rem = 1, 0
    for _ in range(4):
        b = exact(1)[0]
        rem += (b & 0x7f) * mult
        mult *= 128
        if not b & 0x80:
            break
    return first >> 4, first & 0x0f, exact(rem)


def remlen(n):
    out = b""
    while True:
        b = n % 128
        n //= 128
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def publish_packet(topic, payload, pid, dup=False):
    t = topic.encode()
    body = len(t).to_bytes(2, "big") + t + pid.to_bytes(2, "big") + payload
    return bytes([0x32 | (0x08 if dup else 0)]) + remlen(len(body)) + body


def expect_puback(conn, pid):
    while True:
        ptype, _, body = read_packet(conn)
        if ptype == 12:  # PINGREQ
            conn.sendall(b"\xd0\x00")
            continue
        eq(ptype, 4, "packet type (PUBACK)")
        eq(int.from_bytes(body, "big"), pid, "PUBACK packet id")
        return


def accept_session(lsock, client_id):
    conn, _ = lsock.accept()
    conn.settimeout(WAIT)
    ptype, _, body = read_packet(conn)
    eq(ptype, 1, "first packet is CONNECT")
    eq(body[:7], b"\x00\x04MQTT\x04", "protocol name and level 3.1.1")
    eq(body[7] & 0x02, 0, "clean session 0 (persistent session)")
    n = int.from_bytes(body[10:12], "big")
    eq(body[12:12 + n].decode(), client_id, "client id")
    conn.sendall(b"\x20\x02\x00\x00")  # CONNACK accepted
    ptype, flags, body = read_packet(conn)
    eq((ptype, flags), (8, 2), "SUBSCRIBE")
    pid = body[:2]
    n = int.from_bytes(body[2:4], "big")
    eq(body[4:4 + n], b"bucketdb/+/+/telemetry", "default filter")
    eq(body[4 + n], 1, "requested QoS 1")
    conn.sendall(b"\x90\x03" + pid + b"\x01")  # SUBACK granted QoS 1
    return conn


@suite.test
def puback_only_after_durable_with_a_scripted_broker():
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(4)
    lsock.settimeout(WAIT)
    port = lsock.getsockname()[1]
    s = Server(args=["--mqtt-broker", "127.0.0.1:%d" % port, "--mqtt-client-id", "scripted",
                     "--max-body-bytes", "4096", "--mqtt-version", "3.1.1"])
    try:
        s.start()
        conn = accept_session(lsock, "scripted")
        topic = "bucketdb/acme/sd/telemetry"
        conn.sendall(publish_packet(topic, b'{"time": %d, "metrics": {"v": 1}}' % BASE, 5))
        expect_puback(conn, 5)
        # the PUBACK came after the write: the sample is readable now, no waiting
        eq(rows(s, "acme", "sd"), [(BASE, "v", 1)], "stored before the PUBACK")
        # a redelivery (DUP) is acknowledged again and stores nothing new
        conn.sendall(publish_packet(topic, b'{"time": %d, "metrics": {"v": 1}}' % BASE, 5,
                                    dup=True))
        expect_puback(conn, 5)
        eq(rows(s, "acme", "sd"), [(BASE, "v", 1)], "a duplicate is harmless")
        # a message larger than the limit is acknowledged and dropped, the next one stored
        conn.sendall(publish_packet(topic, b"x" * 200000, 6))
        expect_puback(conn, 6)
        conn.sendall(publish_packet(topic, b"m v=2 %d" % ((BASE + 1) * 10**6), 7))
        expect_puback(conn, 7)
        eq(rows(s, "acme", "sd"), [(BASE, "v", 1), (BASE + 1, "m.v", 2)])
        eq(metric(s, 'bucketdb_mqtt_messages_total{result="malformed"}'), 1)
        eq(metric(s, "bucketdb_mqtt_redeliveries_total"), 1)
        # a malformed packet (five remaining-length bytes): bucketdb drops the
        # connection and comes back with the same persistent session
        conn.sendall(b"\x32\xff\xff\xff\xff\x01")
        conn2 = accept_session(lsock, "scripted")
        conn2.sendall(publish_packet(topic, b"m v=3 %d" % ((BASE + 2) * 10**6), 8))
        expect_puback(conn2, 8)
        eq(len(rows(s, "acme", "sd")), 3)
        conn.close()
        s.stop()
        conn2.close()
    finally:
        lsock.close()


if __name__ == "__main__":
    suite.main()
