#!/usr/bin/env python3
"""ack=quorum against a real Apache Cassandra 2.1.0 node (issue 20, item 3): a write
is answered 204 only once Cassandra confirmed its rows, so losing the bucketdb node
together with its data directory loses nothing acknowledged; ack=wal (the default)
acknowledges from the WAL, and the same loss takes what no flush has sent yet.

ONE node is started for the whole file (cassnode.py); one test stops and restarts it.
- quorum_survives_node_and_disk: ten devices flushed once, then three requests (20
  devices, 4 metrics, a device and millisecond written twice in one request, the
  later value kept) acknowledged with no flush; the telemetry rows hold every sample
  at once; bucketdb killed -9 and its data directory deleted: every acknowledged
  sample is still in Cassandra, each with its value, and a node started on an empty
  directory answers each device's every sample (the registry learned the new devices
  and metrics before the acknowledgements); /metrics counted them;
- wal_loses_unflushed_with_the_disk: the same writes with ack=wal: no row before a
  flush (what a lost disk takes), every row after it;
- hot_device_survives_node_and_disk: a device made hot (4 sub-buckets) inside its
  current partition, then the node lost with its disk (ack=quorum before a flush,
  ack=wal after one): a node on an empty directory answers every sample of it;
- quorum_refused_while_down: the node stopped: the write answers 503 with Retry-After
  and is not acknowledged (the refusal counted); the node back: writes answer 204
  again, and the refused write, logged in the WAL, reaches Cassandra with the flush
  (a retry would have written the same values);
- bad_ack_value: ack=maybe refuses the start, naming the values.

If Java or the Cassandra package is missing every test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_ack.py"""

import calendar
import datetime
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_ack", embedded_only="starts its own Cassandra node")
HOUR = 3600000
T0 = (int(time.time() * 1000) // HOUR - 2) * HOUR  # recent: inside every retention
DEVICES, METRICS = 20, ("t", "h", "p", "v")


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


NODE = cassnode.Node("bucketdb-ack-", "bucketdb-ack-it",
                     cassnode.answers)


def node():
    return cassnode.running(NODE, TestFailure)


def server(ks, ack=None, extra=()):
    uri = "cassandra://%s:%d/%s?consistency=ONE&offline_start=true&timeout_ms=2000" % (
        cassnode.ADDR, node().port, ks)
    if ack:
        uri += "&ack=" + ack
    # the test decides when a flush runs
    return Server(args=["--storage", uri, "--flush-interval-ms", "1h"] + list(extra))


def requests():
    """Three bodies and the samples they store: {(device, metric, ts): value}."""
    bodies, want = [], {}
    for r in range(3):
        lines = []
        for d in range(DEVICES):
            ts = T0 + r * 10000 + d * 7
            vals = {m: round(r * 100 + d + i / 10.0, 2) for i, m in enumerate(METRICS)}
            lines.append("env,device=d%02d %s %d" % (
                d, ",".join("%s=%s" % kv for kv in vals.items()), ts))
            for m, v in vals.items():
                want[("d%02d" % d, "env." + m, ts)] = v
        if r == 1:  # d00 at the same ms again in the same request: the later one wins
            ts = T0 + 10000
            lines.append("env,device=d00 t=-5.5 %d" % ts)
            want[("d00", "env.t", ts)] = -5.5
        bodies.append(lines)
    return bodies, want


def iso_ms(text):
    """Unix ms of `bucketdb cql`'s RFC 3339 timestamp (UTC, 'Z')."""
    body = text.rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in body else "%Y-%m-%dT%H:%M:%S"
    dt = datetime.datetime.strptime(body, fmt)
    return calendar.timegm(dt.timetuple()) * 1000 + dt.microsecond // 1000


def rows(ks):
    """Every telemetry row of the keyspace: {(device, metric, ts): value}."""
    p = cql("SELECT device_id, metric_name, event_time, metric_value FROM %s.telemetry" % ks)
    eq(p.returncode, 0, p.stderr)
    out = {}
    for line in p.stdout.strip().splitlines()[1:]:
        d, m, t, v = line.split("\t")
        out[(d, m, iso_ms(t))] = float(v)
    return out


def metric(s, name):
    for line in s.metrics_text().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise TestFailure("no %s in /metrics" % name)


@suite.test
def quorum_survives_node_and_disk():
    ks = cassnode.keyspace("bdb_ack_q")
    bodies, want = requests()
    # d00..d09 reported once before and were flushed: the registry knows them with
    # one metric; the acknowledged requests bring three more metrics and ten devices
    early = {("d%02d" % d, "env.t", T0 - 60000): float(d) for d in range(10)}
    s = server(ks, "quorum").start()
    try:
        s.write(["env,device=d%02d t=%d %d" % (d, d, T0 - 60000) for d in range(10)],
                precision="ms")
        s.flush()
        flushes = metric(s, "bucketdb_cassandra_flushes_total")
        for b in bodies:
            s.write(b, precision="ms")  # 204 each, or the helper fails
        eq(metric(s, "bucketdb_cassandra_ack_writes_total"), 4.0, "acknowledged writes")
        eq(metric(s, "bucketdb_cassandra_ack_refusals_total"), 0.0, "refused writes")
        check(metric(s, "bucketdb_cassandra_ack_rows_total") >= len(want), "rows sent")
        eq(metric(s, "bucketdb_cassandra_flushes_total"), flushes, "no flush since")
        eq(rows(ks), {**want, **early}, "rows in Cassandra after the acknowledgements")
    finally:
        s.kill()  # SIGKILL: nothing more is sent
    shutil.rmtree(s.data)  # the node's disk is gone with it
    eq(rows(ks), {**want, **early}, "rows in Cassandra after the node and its disk were lost")
    # A node on an empty directory answers every acknowledged sample: the registry
    # learned the new devices and metrics, and the partitions, before the 204s. The
    # killed node's writer lease expires first (30 s after its last renewal).
    time.sleep(32)
    n = server(ks).start()
    try:
        for d in range(DEVICES):
            dn = "d%02d" % d
            got = n.values(device=dn, **{"from": T0 - HOUR, "to": T0 + HOUR})
            exp = sorted((ts, m, v) for (dev, m, ts), v in {**want, **early}.items()
                         if dev == dn)
            eq(sorted(got), exp, "device %s on a node with an empty directory" % dn)
    finally:
        n.stop()


@suite.test
def wal_loses_unflushed_with_the_disk():
    ks = cassnode.keyspace("bdb_ack_w")
    bodies, want = requests()
    s = server(ks).start()
    try:
        for b in bodies:
            s.write(b, precision="ms")
        eq(metric(s, "bucketdb_cassandra_ack_writes_total"), 0.0, "ack=wal sends nothing early")
        # acknowledged from the WAL: nothing in Cassandra until a flush, so a lost disk
        # would take all of it (docs/CASSANDRA.md#acknowledgements)
        eq(rows(ks), {}, "rows before the flush in ack=wal")
        s.flush()
        eq(rows(ks), want, "rows after the flush")
    finally:
        s.stop()


@suite.test
def quorum_refused_while_down():
    ks = cassnode.keyspace("bdb_ack_down")
    s = server(ks, "quorum").start()
    try:
        s.write(["env,device=up t=1 %d" % T0], precision="ms")
        NODE.kill(signal.SIGTERM)
        try:
            r = s.request("POST", "/write", body=("env,device=down t=2 %d" % (T0 + 1)).encode(),
                          params={"precision": "ms"})
            eq(r.status, 503, "a write Cassandra cannot confirm: %s" % r.text)
            check(r.headers.get("retry-after"), "Retry-After on the refusal: %r" % r.headers)
            contains(r.text, "not acknowledged")
            eq(metric(s, "bucketdb_cassandra_ack_refusals_total"), 1.0, "refusal counted")
        finally:
            check(NODE.start(same_ports=True), NODE.error or "node did not restart")
        # back: acknowledged again once the session reconnects (a few seconds)
        deadline = time.time() + 90
        while True:
            r = s.request("POST", "/write", body=("env,device=back t=3 %d" % (T0 + 2)).encode(),
                          params={"precision": "ms"})
            if r.status == 204 or time.time() > deadline:
                break
            time.sleep(1)
        eq(r.status, 204, "a write after the node came back: %s" % r.text)
        got = rows(ks)
        eq(got.get(("back", "env.t", T0 + 2)), 3.0, "the acknowledged write's row")
        # the refused write is in the WAL and the head: the flush sends it
        s.flush()
        got = rows(ks)
        eq(sorted(k for k in got), [("back", "env.t", T0 + 2), ("down", "env.t", T0 + 1),
                                    ("up", "env.t", T0)], "rows after the flush")
    finally:
        s.stop()


def subbucket_rows(ks, device):
    """Partitions of device's telemetry rows past a bucket's first sub-bucket."""
    p = cql("SELECT DISTINCT tenant_id, device_id, bucket, sub_bucket FROM %s.telemetry" % ks)
    eq(p.returncode, 0, p.stderr)
    return [line for line in p.stdout.strip().splitlines()[1:]
            if line.split("\t")[1] == device and line.split("\t")[3] not in ("0", "")]


@suite.test
def hot_device_survives_node_and_disk():
    """A device made hot (4 sub-buckets) inside its current partition, the node then
    lost with its disk: with ack=quorum before any flush, with ack=wal after one. A
    node on an empty directory scans the sub-buckets the counts table names, so that
    table must name them for that partition (not the count in force at its start),
    and with ack=quorum before the acknowledgement."""
    kq, kw = cassnode.keyspace("bdb_ack_hq"), cassnode.keyspace("bdb_ack_hw")
    hot = ["--hot-threshold", "100", "--hot-subbuckets", "4"]
    q = server(kq, "quorum", hot).start()
    w = server(kw, None, hot).start()
    want = {}
    try:
        for r in range(4):  # 400 reports in a few seconds: hot after the first 100
            lines = []
            for i in range(100):
                ts = T0 + 60000 + (r * 100 + i) * 150
                lines.append("env,device=h1 t=%d %d" % (r * 100 + i, ts))
                want[("env.t", ts)] = float(r * 100 + i)
            for s in (q, w):
                s.write(lines, precision="ms")
        w.flush()
        for ks in (kq, kw):
            check(subbucket_rows(ks, "h1"), "%s: no row of h1 in a sub-bucket past the first: "
                  "the device did not become hot" % ks)
    finally:
        q.kill()
        w.kill()
    shutil.rmtree(q.data)
    shutil.rmtree(w.data)
    time.sleep(32)  # the killed nodes' writer leases expire
    for ks, what in ((kq, "acknowledged (ack=quorum)"), (kw, "flushed (ack=wal)")):
        n = server(ks).start()
        try:
            got = n.values(device="h1", **{"from": T0, "to": T0 + HOUR})
            eq(sorted((m, ts, v) for ts, m, v in got),
               sorted((m, ts, v) for (m, ts), v in want.items()),
               "the %s samples of the hot device on a node with an empty directory" % what)
        finally:
            n.stop()


@suite.test
def bad_ack_value():
    s = Server(args=["--storage", "cassandra://127.0.0.1:1/ks?ack=maybe"])
    try:
        s.start()
    except TestFailure as e:
        contains(str(e), "ack=maybe must be wal or quorum")
    else:
        s.stop()
        raise TestFailure("server started with ack=maybe")
    finally:
        s.kill()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
