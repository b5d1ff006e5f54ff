#!/usr/bin/env python3
"""`bucketdb serve --storage cassandra://...` against a real Apache Cassandra 2.1.0
node, compared with the embedded engine.

ONE node is started for the whole file (cassnode.py: free ports, 512 MB heap,
everything under a temporary directory) and stopped at the end. The tests:
- a bad storage URI or an unreachable node stops the server at start with the
  reason;
- parity: one seeded random workload (several tenants, devices and metrics,
  out-of-order times, rewrites of a time with a new value, sub-second times) goes
  to an embedded server and to a Cassandra-backed one, with flushes in between so
  that answers merge the head and flushed data; every device's full range and
  random sub-ranges answer identically on both; the Cassandra server has no block
  file and the telemetry table holds the rows; then a clean restart and a kill -9
  of the Cassandra-backed server, and the answers still match;
- per-tenant TTL: rows carry USING TTL = the tenant's TTL minus the sample's age;
- Cassandra killed (kill -9) while bucketdb keeps ingesting: writes are still
  acknowledged (WAL), a flush fails and keeps everything (/metrics shows the failed
  flush and batch, retries, errors, the node down, the WAL waiting), bucketdb is
  killed too, both come back (/metrics: connected, node up, rows confirmed, the WAL
  released), and every acknowledged sample is there.

If Java or the Cassandra package is missing every test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_backend.py
BDB_SEED sets the workload's seed."""

import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import (BIN, HOUR, MIN, Server, Suite, TestFailure, check, contains,  # noqa: E402
                     eq, now_ms, run_bin)

suite = Suite("test_cassandra_backend", embedded_only="starts its own Cassandra node")
SEED = int(os.environ.get("BDB_SEED", "5150"))
KS = "bdb_backend_it"
TENANTS = ["default", "acme"]
DEVICES = ["pump-%d" % i for i in range(5)]
METRICS = ["m.temp", "m.rpm", "power.kw"]


def cql(*stmts):
    cmd = ["cql", "--host", cassnode.ADDR, "--port", str(NODE.port)]
    for s in stmts:
        cmd += ["-e", s]
    return subprocess.run([BIN] + cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=60)


NODE = cassnode.Node("bucketdb-backend-", "bucketdb-backend-it",
                     lambda n: cql("SELECT release_version FROM system.local"))


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def uri(ks=KS, extra=""):
    return "cassandra://%s:%d/%s?consistency=ONE%s" % (cassnode.ADDR, node().port, ks, extra)


def cass_server(data=None, extra_args=(), ks=KS, uri_extra=""):
    # A long flush interval: the test decides when data leaves the head. Each test has
    # its own keyspace on the shared node.
    return Server(data=data, args=["--storage", uri(ks, uri_extra), "--flush-interval-ms", "1h"] +
                  list(extra_args))


def ttls(ks):
    """{(tenant, device): TTL of one of its rows} from a scan of the telemetry table."""
    p = cql("SELECT tenant_id, device_id, TTL(metric_value) FROM %s.telemetry" % ks)
    eq(p.returncode, 0, p.stderr)
    out = {}
    for line in p.stdout.strip().splitlines()[1:]:
        t, d, ttl = line.split("\t")
        out[(t, d)] = int(ttl) if ttl != "\\N" else None
    return out


def cmetrics(server):
    """{series: value} of the bucketdb_cassandra_* families of server's /metrics;
    per-node series keep their labels in the key."""
    out = {}
    for line in server.metrics_text().splitlines():
        if line.startswith("bucketdb_cassandra_"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def node_series(m, family):
    return {k: v for k, v in m.items() if k.startswith(family + "{")}


def lp(tenant_metrics):
    lines = []
    for dev, ts, metric, v in tenant_metrics:
        meas, field = metric.split(".")
        lines.append("%s,device=%s %s=%r %d" % (meas, dev, field, v, ts))
    return lines


class Workload:
    """Random samples over two days, every write remembered as the last value per
    (tenant, device, metric, time)."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.t0 = 1718409600000  # 2024-06-15T00:00:00Z
        self.model = {}

    def batch(self, n):
        """{tenant: [(device, ts, metric, value)]}; the model learns them only when
        send() sees them acknowledged."""
        by_tenant = {}
        for _ in range(n):
            t = self.rng.choice(TENANTS)
            dev = self.rng.choice(DEVICES)
            metric = self.rng.choice(METRICS)
            if self.model and self.rng.random() < 0.1:  # rewrite a time with a new value
                (t, dev, metric, ts) = self.rng.choice(sorted(self.model))
            else:
                ts = self.t0 + self.rng.randint(0, 2 * 24 * 3600) * 1000 + \
                    self.rng.choice([0, 0, 0, 1, 250, 999])
            v = round(self.rng.uniform(-1000, 1000), self.rng.choice([0, 1, 3, 6]))
            by_tenant.setdefault(t, []).append((dev, ts, metric, v))
        return by_tenant

    def send(self, servers, n, refusable=False):
        """Writes n samples to every server (204 expected); refusable: one server, a
        503 is allowed and returns False (the samples were not acknowledged)."""
        for t, rows in self.batch(n).items():
            body = lp(rows)
            for s in servers:
                params = {"precision": "ms"}
                if t != "default":
                    params["tenant"] = t
                r = s.write(body, expect=None if refusable else 204, **params)
                if refusable and r.status == 503:
                    return False
                eq(r.status, 204, "POST /write (%r)" % r.body[:300])
            for dev, ts, metric, v in rows:
                self.model[(t, dev, metric, ts)] = v
        return True


def answers(s, queries):
    out = []
    for q in queries:
        r = s.get("/api/v1/query", **q)
        if r.status == 404:
            out.append(("404",))
            continue
        eq(r.status, 200, "query %r: %r" % (q, r.body[:300]))
        out.append(tuple(tuple(v) for v in r.json()["values"]))
    return out


def make_queries(w, rng, n):
    qs = []
    for t in TENANTS:
        for dev in DEVICES:
            base = {"device": dev, "from": w.t0 - HOUR, "to": w.t0 + 3 * 24 * HOUR}
            if t != "default":
                base["tenant"] = t
            qs.append(base)
    for _ in range(n):
        t = rng.choice(TENANTS)
        lo = w.t0 + rng.randint(-HOUR, 48 * HOUR)
        q = {"device": rng.choice(DEVICES), "from": lo,
             "to": lo + rng.choice([1000, MIN, HOUR, 7 * HOUR, 30 * HOUR])}
        if rng.random() < 0.4:
            q["metric"] = ",".join(rng.sample(METRICS, rng.randint(1, 2)))
        if rng.random() < 0.3:
            q["order"] = "desc"
        if t != "default":
            q["tenant"] = t
        qs.append(q)
    return qs


def model_rows(w):
    return len(w.model)


def compare(label, emb, cas, queries):
    a, b = answers(emb, queries), answers(cas, queries)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            raise TestFailure("%s: query %r differs: embedded %d rows, cassandra %d rows; "
                              "first embedded-only %r, cassandra-only %r" % (
                                  label, queries[i], len(x), len(y),
                                  sorted(set(x) - set(y))[:3], sorted(set(y) - set(x))[:3]))
    return sum(len(x) for x in a if x != ("404",))


# ------------------------------------------------------------------ tests


@suite.test
def bad_storage_refused():
    rc, _, err = run_bin(["serve", "--storage", "mysql://x", "--check-config"])
    eq(rc, 2, err)
    contains(err, "storage: expected embedded or cassandra://")
    # Unknown URI key and an unreachable node: the server does not start.
    for bad, want in [("cassandra://127.0.0.1:1/ks?colour=red", "unknown key 'colour'"),
                      ("cassandra://127.0.0.1:1/ks?consistency=MOST", "consistency=MOST"),
                      ("cassandra://127.0.0.1:1/bad-ks", "letters, digits and _"),
                      ("cassandra://127.0.0.1:1/ks", "no Cassandra contact point answered"),
                      # keys that could not fit a Cassandra partition key (64 KiB)
                      ("cassandra://127.0.0.1:1/ks --max-key-bytes 21796", "max_key_bytes <= 21795")]:
        bad, *more = bad.split(" ")
        s = Server(args=["--storage", bad] + more)
        try:
            s.start()
        except TestFailure as e:
            contains(str(e), want)
        else:
            s.stop()
            raise TestFailure("server started with --storage %s" % bad)
        finally:
            s.kill()


@suite.test
def parity_restart_kill():
    node()
    w = Workload(SEED)
    rng = random.Random(SEED + 1)
    emb = Server(args=["--flush-interval-ms", "1h"]).start()
    cas = cass_server().start()
    try:
        contains(cas.log(), "storage: cassandra://")
        w.send([emb, cas], 600)
        emb.flush()
        cas.flush()
        w.send([emb, cas], 400)  # these stay in the head: answers merge both
        queries = make_queries(w, rng, 60)
        rows = compare("after flush", emb, cas, queries)
        check(rows > 0, "queries returned nothing")
        blocks = os.path.join(cas.data, "blocks")
        check(not [f for f in os.listdir(blocks) if f.endswith(".blk")] if os.path.isdir(
            blocks) else True, "a Cassandra-backed server wrote block files")
        p = cql("SELECT count(*) FROM %s.telemetry" % KS)
        eq(p.returncode, 0, p.stderr)
        flushed = int(p.stdout.split()[-1])
        check(flushed > 0, "telemetry table is empty after a flush: %r" % p.stdout)
        # Every row in the table was confirmed (a rewrite of a time counts again).
        m = cmetrics(cas)
        check(m.get("bucketdb_cassandra_rows_confirmed_total", 0) >= flushed,
              "rows confirmed %r < %d rows in the table" % (
                  m.get("bucketdb_cassandra_rows_confirmed_total"), flushed))
        eq(m.get("bucketdb_cassandra_connected"), 1.0, "connected")
        eq(m.get("bucketdb_cassandra_nodes_up"), 1.0, "nodes up")
        eq(cmetrics(emb), {}, "the embedded engine has no bucketdb_cassandra_* series")

        cas.restart()  # clean stop flushes the head into Cassandra
        compare("after restart", emb, cas, queries)
        p = cql("SELECT count(*) FROM %s.telemetry" % KS)
        check(int(p.stdout.split()[-1]) >= flushed, p.stdout)

        w.send([emb, cas], 300)
        cas.kill()  # unflushed samples only in the WAL
        cas.start()
        queries = make_queries(w, rng, 60)
        rows = compare("after kill -9", emb, cas, queries)
        print("  parity: %d samples written, %d rows compared" % (model_rows(w), rows))
    finally:
        emb.stop()
        cas.stop()


@suite.test
def tenant_ttl_rows():
    node()
    s = cass_server(extra_args=["--retention-ms", "30d"], ks=KS + "_ttl").start()
    try:
        import json
        r = s.request("POST", "/api/v1/admin/tenants", json.dumps(
            {"name": "shortlived", "retention_ms": "2d"}),
            {"Authorization": "Token " + s.token, "Content-Type": "application/json"})
        eq(r.status, 201, r.text)
        now = now_ms()
        age = 12 * HOUR
        s.write(["env,device=ttl-a t=1 %d" % (now - age)], precision="ms", tenant="shortlived",
                headers={"Authorization": "Token " + r.json()["token"]})
        s.write(["env,device=ttl-b t=1 %d" % (now - age)], precision="ms")
        s.flush()
        got = ttls(KS + "_ttl")
        ttl = got[("shortlived", "ttl-a")]
        want = (2 * 24 * HOUR - age) // 1000
        check(want - 120 <= ttl <= want, "TTL %d, want about %d (2 d minus 12 h)" % (ttl, want))
        ttl = got[("default", "ttl-b")]
        want = (30 * 24 * HOUR - age) // 1000
        check(want - 120 <= ttl <= want, "TTL %d, want about %d (30 d minus 12 h)" % (ttl, want))
        eq(s.values(device="ttl-b", **{"from": now - DAY_MS, "to": now}),
           [(now - age, "env.t", 1.0)])
    finally:
        s.stop()


DAY_MS = 24 * HOUR


@suite.test
def cassandra_down_nothing_lost():
    n = node()
    w = Workload(SEED + 7)
    # A small head: with Cassandra away, unflushed samples pile up there (and in the
    # WAL) until the head guard answers 503.
    cas = cass_server(ks=KS + "_down", extra_args=["--head-max-bytes", "65536"],
                      uri_extra="&offline_start=true").start()
    try:
        w.send([cas], 200)
        cas.flush()
        # Cassandra goes away (a clean stop: a single node with the package's periodic
        # commit log may lose its own last 10 s on kill -9, which no client can help);
        # bucketdb keeps acknowledging into its WAL.
        n.kill(signal.SIGTERM)
        acked = len(w.model)
        refused = False
        for _ in range(400):  # bounded: 503 comes after ~128 KiB of head
            if not w.send([cas], 100, refusable=True):
                refused = True
                break
        check(refused, "no 503 while Cassandra was down and the head grew")
        check(len(w.model) > acked, "nothing acknowledged while Cassandra was down")
        r = cas.post("/internal/flush")
        check(r.status >= 500, "a flush with Cassandra down answered %d" % r.status)
        # /health: the failing flushes as a warning, and shedding (the head is over its
        # guard) makes it unhealthy rather than degraded
        doc = cas.get("/health").json()
        check(doc["status"] == "unhealthy" and
              any(x.startswith("flushing is failing") for x in doc["warnings"]),
              "/health with Cassandra down: %r" % doc)
        # /metrics shows the outage: the failed flush, its batch, the session's
        # retries and errors, the node down, the WAL holding what waits for it.
        m = cmetrics(cas)
        check(m.get("bucketdb_cassandra_flush_failures_total", 0) >= 1, "flush failures: %r" % m)
        check(m.get("bucketdb_cassandra_batch_failures_total", 0) >= 1, "batch failures: %r" % m)
        check(m.get("bucketdb_cassandra_retries_total", 0) >= 1, "retries: %r" % m)
        check(m.get("bucketdb_cassandra_failures_total", 0) >= 1, "failures: %r" % m)
        check(m.get("bucketdb_cassandra_errors_total", 0) +
              m.get("bucketdb_cassandra_connect_failures_total", 0) >= 1, "errors: %r" % m)
        eq(m.get("bucketdb_cassandra_nodes_up"), 0.0, "nodes up with the node stopped")
        eq(list(node_series(m, "bucketdb_cassandra_node_up").values()), [0.0], "node_up")
        check(m.get("bucketdb_cassandra_wal_pending_bytes", 0) > 0, "WAL pending: %r" % m)
        # the background flush retries every second while the head is over its limit
        check("bucketdb_cassandra_inflight_batches" in m, "no in-flight gauge: %r" % m)
        cas.kill()  # and bucketdb crashes too, before Cassandra is back
        # offline_start: it starts without Cassandra and replays its WAL into the head
        # (which is over its limit again: writes would get 503 until a flush works).
        cas.start()
        contains(cas.log(), "starting anyway (offline_start)")
        m = cmetrics(cas)
        eq(m.get("bucketdb_cassandra_connected"), 0.0, "connected before any node answered")
        wal_before = m.get("bucketdb_cassandra_wal_pending_bytes", 0)
        check(wal_before > 0, "the replayed WAL waits for Cassandra: %r" % m)
        check(n.start(same_ports=True), n.error or "node did not restart")
        deadline = time.monotonic() + 30
        while True:  # the sink retries the connection every 2 s
            r = cas.post("/internal/flush")
            if r.status == 204 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        eq(r.status, 204, "flush after Cassandra came back: %r" % r.body[:300])
        contains(cas.log(), "cassandra: connected")
        m = cmetrics(cas)
        eq(m.get("bucketdb_cassandra_connected"), 1.0, "connected")
        eq(list(node_series(m, "bucketdb_cassandra_node_up").values()), [1.0], "node_up")
        check(m.get("bucketdb_cassandra_rows_confirmed_total", 0) > 0, "rows: %r" % m)
        check(m.get("bucketdb_cassandra_flushes_total", 0) >= 1, "flushes: %r" % m)
        check(m.get("bucketdb_cassandra_wal_pending_bytes", 0) < wal_before,
              "WAL not released after the flush: %r -> %r" % (
                  wal_before, m.get("bucketdb_cassandra_wal_pending_bytes")))
        w.send([cas], 100)
        cas.restart()
        want = {}
        for (t, dev, metric, ts), v in w.model.items():
            want.setdefault((t, dev), set()).add((ts, metric, v))
        total = 0
        for (t, dev), rows in sorted(want.items()):
            q = {"device": dev, "from": w.t0 - HOUR, "to": w.t0 + 3 * DAY_MS}
            if t != "default":
                q["tenant"] = t
            got = set(cas.values(**q))
            if got != rows:
                raise TestFailure("%s/%s: %d missing %r, %d extra %r" % (
                    t, dev, len(rows - got), sorted(rows - got)[:3], len(got - rows),
                    sorted(got - rows)[:3]))
            total += len(got)
        eq(total, len(w.model))
        contains(cas.all_logs(), "unreachable")
        contains(cas.all_logs(), "flush failed")
    finally:
        cas.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
