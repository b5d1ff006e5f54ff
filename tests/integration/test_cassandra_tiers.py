#!/usr/bin/env python3
"""Rollup tiers and fleet aggregates on `serve --storage cassandra://...` against a
real Apache Cassandra 2.1.0 node, compared with the embedded engine.

ONE node is started for the whole file (cassnode.py) and stopped at the end. The test
`tiers_fleet_parity`:
- one seeded workload (4 devices, 3 metrics, two days starting at a midnight 3 days
  ago) goes to an embedded server and to a Cassandra-backed one in three rounds with
  a flush after each, plus an unflushed round: two rounds in time order that cut an
  hour and a day between flushes (the second flush must write the merged window,
  not its own partial), then late data and rewrites of written times (the late path
  recomputes their windows and writes them again), then the head merged at read;
- after every round /api/v1/query at resolution 1m, 1h, 1d and auto (ranges that
  route to each tier) for every device and metric, and /api/v1/fleet at 1h and 1d
  for every metric, answer identically on both: count, min, max and device counts
  exactly, sum and mean to 1e-12 relative, stddev to 1e-9, p50/p95/p99 within the
  sketch's relative error 0.01;
- the agg_1m, agg_1h, agg_1d, fleet_agg_1h and fleet_agg_1d tables hold the rows
  (`bucketdb cql -e SELECT ...`), an agg_1m row carries TTL = 90 days minus its age;
- a clean restart of the Cassandra-backed server, then a kill -9 while a flush's
  rows are confirmed but the flush has not committed (BDB_TEST_PAUSE_AFTER_AGG_PUT_MS
  holds the flush there), restart, flush: still identical (no window lost, none
  counted twice);
- with agg_1h and fleet_agg_1h truncated behind the server's back, its 1h answers
  lose the flushed windows: they come from Cassandra, not from local files;
- with the node stopped, tier and fleet queries are answered from the local files
  (which hold the same windows) and match again.

If Java or the Cassandra package is missing the test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_tiers.py
BDB_SEED sets the workload's seed."""

import datetime
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import BIN, Server, Suite, TestFailure, check, eq  # noqa: E402

suite = Suite("test_cassandra_tiers", embedded_only="starts its own Cassandra node")
SEED = int(os.environ.get("BDB_SEED", "4242"))
KS = "bdb_tiers_it"
MIN, HOUR, DAY = 60000, 3600000, 86400000
T0 = (int(time.time() * 1000) // DAY - 3) * DAY  # inside every tier's retention
DEVICES = ["gw-%d" % i for i in range(4)]
METRICS = ["env.temp", "env.hum", "pwr.kw"]
ALPHA = 0.01 * (1 + 1e-9)
PAUSE_ENV = "BDB_TEST_PAUSE_AFTER_AGG_PUT_MS"


def cql(*stmts):
    cmd = [BIN, "cql", "--host", cassnode.ADDR, "--port", str(NODE.port)]
    for s in stmts:
        cmd += ["-e", s]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60)


def _new_node():
    # The node's files on /dev/shm when it has room (as tests/cassandra-suite does):
    # the keyspace's schema changes cost about 1 s there against 5 s on the disk.
    old = tempfile.tempdir
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) and \
            shutil.disk_usage("/dev/shm").free > (2 << 30):
        tempfile.tempdir = "/dev/shm"
    try:
        return cassnode.Node("bucketdb-tiers-", "bucketdb-tiers-it",
                             lambda n: cql("SELECT release_version FROM system.local"))
    finally:
        tempfile.tempdir = old


NODE = _new_node()


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def cass_server(data=None, env=None):
    uri = "cassandra://%s:%d/%s?consistency=ONE" % (cassnode.ADDR, node().port, KS)
    return Server(data=data, env=env,
                  args=["--storage", uri, "--flush-interval-ms", "1h"])


class Workload:
    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.written = []  # (device, ts, metric)

    def round(self, n, lo=None, hi=None):
        """n samples in [lo, hi) in time order (nothing late, nothing rewritten: flushed
        windows are merged with new partials, not recomputed), or, without a range,
        late samples into the first 6 hours and rewrites of written times (the late
        path recomputes their windows)."""
        rows = []
        for _ in range(n):
            dev = self.rng.choice(DEVICES)
            metric = self.rng.choice(METRICS)
            if lo is not None:
                ts = lo + self.rng.randint(0, (hi - lo) // 1000 - 1) * 1000
            elif self.written and self.rng.random() < 0.15:  # rewrite a time
                dev, ts, metric = self.rng.choice(self.written)
            else:
                ts = T0 + self.rng.randint(0, 6 * 3600 - 1) * 1000 + self.rng.choice([0, 250])
            v = round(self.rng.gauss(50, 20), self.rng.choice([0, 2, 5]))
            rows.append((dev, ts, metric, v))
        rows.sort(key=lambda r: r[1])
        self.written += [(d, t, m) for d, t, m, _ in rows]
        return rows

    @staticmethod
    def send(servers, rows):
        lines = []
        for dev, ts, metric, v in rows:
            meas, field = metric.split(".")
            lines.append("%s,device=%s %s=%r %d" % (meas, dev, field, v, ts))
        for s in servers:
            for i in range(0, len(lines), 2000):
                s.write(lines[i:i + 2000], precision="ms")


def queries():
    """(path, params) of every tier and fleet query compared."""
    out = []
    ranges = [("1m", T0, T0 + 3 * DAY), ("1h", T0, T0 + 3 * DAY), ("1d", T0 - DAY, T0 + 3 * DAY),
              ("1m", T0 + 7 * HOUR + 5, T0 + 9 * HOUR + 13 * MIN),  # windows cut at both ends
              ("auto", T0 + HOUR, T0 + 3 * HOUR),  # raw
              ("auto", T0, T0 + DAY),  # 1m
              ("auto", T0 - 5 * DAY, T0 + 5 * DAY),  # 1h
              ("auto", T0 - 100 * DAY, T0 + 3 * DAY)]  # 1d
    for dev in DEVICES:
        for res, lo, hi in ranges:
            out.append(("/api/v1/query", {"device": dev, "resolution": res, "from": lo, "to": hi}))
    for metric in METRICS:
        for res in ("1h", "1d"):
            out.append(("/api/v1/fleet", {"metric": metric, "resolution": res,
                                          "from": T0 - DAY, "to": T0 + 3 * DAY}))
    return out


def close(a, b, rel, absolute=0.0):
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b)) + absolute


def same_row(cols, x, y):
    """None when the rows agree within the engine's tolerances, else the column."""
    if len(x) != len(y):
        return "length"
    for c, a, b in zip(cols, x, y):
        if a == b:
            continue
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or \
                isinstance(a, bool) or c in ("time", "metric", "count", "min", "max",
                                             "devices", "readings", "start"):
            return c
        tol = {"p50": ALPHA * 2, "p95": ALPHA * 2, "p99": ALPHA * 2,
               "stddev": 1e-9}.get(c, 1e-12)
        if not close(float(a), float(b), tol, 1e-12):
            return c
    return None


def compare(label, emb, cas, qs):
    windows = 0
    for path, params in qs:
        a, b = emb.get(path, **params), cas.get(path, **params)
        eq(b.status, a.status, "%s %s %r: status (%r)" % (label, path, params, b.body[:300]))
        if a.status != 200:
            continue
        da, db = a.json(), b.json()
        for k in ("tier", "resolution", "source", "width_ms", "columns"):
            eq(db.get(k), da.get(k), "%s %s %r: %s" % (label, path, params, k))
        ra, rb = da["values"], db["values"]
        if len(ra) != len(rb):
            ka = set((r[0], r[1]) for r in ra)
            kb = set((r[0], r[1]) for r in rb)
            raise TestFailure("%s %s %r: embedded %d rows, cassandra %d; embedded-only %r, "
                              "cassandra-only %r" % (label, path, params, len(ra), len(rb),
                                                     sorted(ka - kb)[:3], sorted(kb - ka)[:3]))
        for x, y in zip(ra, rb):
            bad = same_row(da["columns"], x, y)
            if bad:
                raise TestFailure("%s %s %r: column %s differs: embedded %r, cassandra %r" % (
                    label, path, params, bad, x, y))
        windows += len(ra)
    return windows


def table_count(table):
    p = cql("SELECT count(*) FROM %s.%s" % (KS, table))
    eq(p.returncode, 0, p.stderr)
    return int(p.stdout.split()[-1])


@suite.test
def tiers_fleet_parity():
    node()
    w = Workload(SEED)
    qs = queries()
    emb = Server(args=["--flush-interval-ms", "1h"]).start()
    cas = cass_server().start()
    try:
        split = T0 + 26 * HOUR + 20 * MIN  # an hour and a day cut between flushes
        for i, (n, lo, hi) in enumerate([(2500, T0, split), (1500, split, T0 + 2 * DAY),
                                         (600, None, None)]):
            rows = w.round(n, lo, hi)
            Workload.send([emb, cas], rows)
            emb.flush()
            cas.flush()
            n = compare("after flush %d" % (i + 1), emb, cas, qs)
            check(n > 0, "no windows compared")
        Workload.send([emb, cas], w.round(400, T0 + 2 * DAY - 2 * HOUR, T0 + 2 * DAY))  # head
        n = compare("flushed + head", emb, cas, qs)
        print("  parity: %d samples, %d windows compared per pass" % (len(w.written), n))

        counts = {t: table_count(t) for t in ("agg_1m", "agg_1h", "agg_1d", "fleet_agg_1h",
                                              "fleet_agg_1d")}
        for t, c in counts.items():
            check(c > 0, "%s is empty after flushes: %r" % (t, counts))
        check(counts["agg_1m"] > counts["agg_1h"] > counts["agg_1d"], "rows %r" % counts)
        eq(counts["fleet_agg_1d"], 2 * len(METRICS), "fleet day rows (2 days x metrics)")
        p = cql("SELECT window_start, count, TTL(count) FROM %s.agg_1m WHERE tenant_id = "
                "'default' AND device_id = '%s' AND metric_name = '%s' AND day = %d LIMIT 1"
                % (KS, DEVICES[0], METRICS[0], T0))
        eq(p.returncode, 0, p.stderr)
        start, cnt, ttl = p.stdout.strip().splitlines()[1].split("\t")
        start_ms = int(datetime.datetime.strptime(start, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp() * 1000)
        age = int(time.time() * 1000) - start_ms - MIN
        want = (90 * DAY - age) // 1000
        check(want - 300 <= int(ttl) <= want + 5, "agg_1m TTL %s, want about %d" % (ttl, want))

        cas.restart()  # a clean stop flushes the head
        emb.flush()
        cas.flush()
        compare("after restart", emb, cas, qs)

        # kill -9 after the rows of a flush are confirmed, before the flush commits
        cas.stop()
        cas.env = dict(os.environ, **{PAUSE_ENV: "20000"})
        cas.start()
        # in time order into a new day: nothing late, so no read-time fix from raw would
        # hide rows that hold the replayed samples a second time
        rows = w.round(500, T0 + 2 * DAY, T0 + 2 * DAY + 6 * HOUR)
        Workload.send([emb, cas], rows)
        emb.flush()

        def flush_quietly():
            try:
                cas.post("/internal/flush")
            except Exception:  # the server is killed while it pauses
                pass

        t = threading.Thread(target=flush_quietly, daemon=True)
        t.start()
        deadline = time.monotonic() + 60
        while "test pause" not in cas.log() and time.monotonic() < deadline:
            time.sleep(0.1)
        check("test pause" in cas.log(),
              "the flush never reached the pause: %s" % cas.log()[-2000:])
        cas.kill()
        t.join(timeout=30)
        cas.env.pop(PAUSE_ENV)
        cas.start()  # the WAL brings the samples back; Cassandra has rows with them
        # Device tiers: the local files (the crashed flush's were dropped) + the replayed
        # head, late minutes fixed from raw. Fleet tables are left out until the flush:
        # before the flush that recomputes a rewritten reading's window, the fleet
        # tables count it twice on either backend (db_fleet.h), and the embedded server
        # has had that flush.
        compare("after kill -9 between put and commit", emb, cas,
                [q for q in qs if q[0] == "/api/v1/query"])
        cas.flush()
        compare("after kill -9 and a flush", emb, cas, qs)

        # The answers come from Cassandra: behind the server's back, the hour rows go.
        p = cql("TRUNCATE %s.agg_1h" % KS, "TRUNCATE %s.fleet_agg_1h" % KS)
        eq(p.returncode, 0, p.stderr)
        doc = cas.get("/api/v1/query", device=DEVICES[0], resolution="1h",
                      **{"from": T0, "to": T0 + 2 * DAY}).json()
        eq(doc["values"], [], "1h windows after agg_1h was truncated")
        doc = cas.get("/api/v1/fleet", metric=METRICS[0], resolution="1h",
                      **{"from": T0, "to": T0 + 2 * DAY}).json()
        eq(doc["values"], [], "fleet 1h windows after fleet_agg_1h was truncated")
        doc = emb.get("/api/v1/query", device=DEVICES[0], resolution="1h",
                      **{"from": T0, "to": T0 + 2 * DAY}).json()
        check(doc["values"], "the embedded server has the hours")

        # Cassandra gone: the local files (which hold the same windows) answer.
        NODE.kill(signal.SIGTERM)
        t0 = time.monotonic()
        compare("Cassandra stopped", emb, cas,
                [q for q in qs if q[0] == "/api/v1/query" and q[1]["resolution"] == "1h"][:1] +
                [q for q in qs if q[0] == "/api/v1/fleet"][:1])
        # (each waits for the session's retries against the stopped node)
        print("  2 queries with Cassandra stopped in %.1f s" % (time.monotonic() - t0))
        check("answered from the local tier files" in cas.log(), "no fallback in the log")
    finally:
        emb.stop()
        cas.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
