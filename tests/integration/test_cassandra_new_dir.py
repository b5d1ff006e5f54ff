#!/usr/bin/env python3
"""A new (or lost and replaced) data directory on a keyspace another directory filled,
against one real Cassandra 2.1.0 node (cassnode.py): issue 20's "a lost data directory
corrupts the shared keyspace" (docs/CASSANDRA.md, "A new data directory on a keyspace").

`new_directory_answers_and_adds`:
- server A (Cassandra-backed) and an embedded server get the same fleet (6 devices with
  tags, 2 metrics, hours 0 to 2:40 of a day 3 days ago, in time order); both flush;
  A's answers are recorded: raw (whole range), resolution 1m/1h/1d/auto of every
  device, /api/v1/fleet 1h/1d of every metric, /api/v1/devices and /api/v1/devices/D;
  A stops (cleanly);
- server B starts on an EMPTY data directory on the same keyspace, WITHOUT adopt=true
  (an empty directory is not refused any more), and answers every one of those
  queries exactly as A did (JSON compared whole);
- B and the embedded server then get more for 3 devices in the same hours (after
  their last reports, into the same minute, hour and day windows, and a few late
  reports into hour 0 that the late path recomputes from raw, which reads A's rows),
  and flush: B's tier, fleet and registry answers equal the embedded server's, and
  so do Cassandra's rows: agg_1h count per window, fleet_agg_1h device_count and
  count per window, and the devices rows' samples and first/last seen (counts add,
  nothing halved);
- B restarts (its catalog now saved, with the inherited horizons) and the 3 devices
  not sent to B yet get reports in their flushed hour: after a flush the rows still
  add up (the horizon survives a restart);
- while B runs, a third server on another empty directory is refused (the writer
  lease: two writers).

Fails on the code before the rebuild (B refused without adopt=true; with it, 404 for
raw and tier queries and agg_1h counts replaced by B's partials).

With BDB_CASSANDRA_NODE=HOST:PORT (tests/run) the file uses that running node, its
keyspace named with a per-run suffix (cassnode.keyspace)."""

import datetime
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import Server, Suite, TestFailure, check, eq  # noqa: E402

suite = Suite("test_cassandra_new_dir", embedded_only="starts its own Cassandra node")
SEED = int(os.environ.get("BDB_SEED", "2020"))
MIN, HOUR, DAY = 60000, 3600000, 86400000
T0 = (int(time.time() * 1000) // DAY - 3) * DAY  # inside every tier's retention
DEVICES = ["meter-%d" % i for i in range(6)]
METRICS = ["pwr.kw", "pwr.volt"]


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


def rows(stmt):
    return cassnode.cql_rows(NODE, stmt, TestFailure)


NODE = cassnode.node_for("bucketdb-newdir-", "bucketdb-newdir-it",
                         cassnode.answers)


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def cass_server(ks, data=None, args=()):
    uri = "cassandra://%s:%d/%s?consistency=ONE" % (NODE.addr, node().port, ks)
    return Server(data=data, args=["--storage", uri, "--flush-interval-ms", "1h"] + list(args))


def send(servers, rws):
    lines = []
    for dev, ts, metric, v in rws:
        meas, field = metric.split(".")
        lines.append("%s,device=%s,site=s%d %s=%r %d" % (meas, dev, DEVICES.index(dev) % 3,
                                                          field, v, ts))
    for s in servers:
        s.write(lines, precision="ms")


def batch(rng, devs, lo, hi, n):
    """n reports of devs in [lo, hi), one per (device, metric, second), time order."""
    seen, out = set(), []
    while len(out) < n:
        dev, metric = rng.choice(devs), rng.choice(METRICS)
        ts = lo + rng.randrange(0, (hi - lo) // 1000) * 1000
        if (dev, metric, ts) in seen:
            continue
        seen.add((dev, metric, ts))
        out.append((dev, ts, metric, round(rng.gauss(230, 15), rng.choice([0, 1, 3]))))
    out.sort(key=lambda r: r[1])
    return out


def queries():
    out = []
    for dev in DEVICES:
        out.append(("/api/v1/query", {"device": dev, "from": T0 - DAY, "to": T0 + DAY}))
        for res, lo, hi in [("1m", T0, T0 + DAY), ("1h", T0, T0 + DAY),
                            ("1d", T0 - DAY, T0 + 2 * DAY), ("auto", T0, T0 + DAY),
                            ("auto", T0 - 5 * DAY, T0 + 5 * DAY)]:
            out.append(("/api/v1/query", {"device": dev, "resolution": res,
                                          "from": lo, "to": hi}))
        out.append(("/api/v1/devices/" + dev, {}))
    for metric in METRICS:
        for res in ("1h", "1d"):
            out.append(("/api/v1/fleet", {"metric": metric, "resolution": res,
                                          "from": T0 - DAY, "to": T0 + 2 * DAY}))
    out.append(("/api/v1/devices", {}))
    return out


def answers(s, qs):
    a = {}
    for path, params in qs:
        r = s.get(path, **params)
        doc = r.json() if r.status == 200 else r.body[:200].decode("utf-8", "replace")
        if isinstance(doc, dict):
            # how many fleet windows were answered from device tiers: A's devices were
            # new on a sink, so their first flush marked their windows (db_tier_late.c)
            doc.pop("recomputed", None)
        a[(path, json.dumps(params, sort_keys=True))] = (r.status, doc)
    return a


def same(label, want, got):
    for k in want:
        if want[k] != got.get(k):
            raise TestFailure("%s: %s %s differs:\n  want %r\n  got  %r"
                              % (label, k[0], k[1], json.dumps(want[k])[:600],
                                 json.dumps(got.get(k))[:600]))


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-12


def same_stats(label, want, got):
    """Tier and fleet answers of the embedded server (want) and B (got): counts, min,
    max and devices exactly; sums 1e-12, stddev 1e-9, quantiles within the sketch's
    error (the embedded engine merges its windows in another order)."""
    for k in want:
        sw, w = want[k]
        sg, g = got[k]
        eq(sg, sw, "%s: %s %s status" % (label, k[0], k[1]))
        if sw != 200 or "values" not in w:
            if w != g and k[0] != "/api/v1/devices":
                raise TestFailure("%s: %s %s differs:\n  want %r\n  got  %r"
                                  % (label, k[0], k[1], w, g))
            continue
        cols = w["columns"]
        eq(g["columns"], cols, "%s: %s %s columns" % (label, k[0], k[1]))
        eq(len(g["values"]), len(w["values"]), "%s: %s %s rows" % (label, k[0], k[1]))
        for x, y in zip(w["values"], g["values"]):
            for c, a, b in zip(cols, x, y):
                if a == b:
                    continue
                tol = {"p50": 0.0201, "p95": 0.0201, "p99": 0.0201,
                       "stddev": 1e-9}.get(c, 1e-12)
                if c in ("time", "count", "min", "max", "devices", "readings", "start") or \
                        not isinstance(a, (int, float)) or not close(a, b, tol):
                    raise TestFailure("%s: %s %s column %s: want %r got %r"
                                      % (label, k[0], k[1], c, x, y))


def registry(s):
    """The registry fields that must add up: samples, first and last event, metrics."""
    doc = s.devices()
    return sorted((d["device"], d.get("samples"), d.get("first_seen"), d.get("last_seen"),
                   json.dumps(sorted(d.get("metrics") or [])),
                   json.dumps(d.get("tags"), sort_keys=True)) for d in doc["devices"])


def ms(text):
    return int(datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp() * 1000)


def check_rows(label, ks, emb):
    """Cassandra's agg_1h, fleet_agg_1h and devices rows against the embedded server's
    answers for the same data."""
    n = 0
    for dev in DEVICES:
        for metric in METRICS:
            want = emb.get("/api/v1/query", device=dev, metric=metric, resolution="1h",
                           **{"from": T0, "to": T0 + DAY}).json()
            ci = want["columns"].index("count")
            ti = want["columns"].index("time")
            mi = want["columns"].index("metric")
            want = sorted((r[ti], r[ci]) for r in want["values"] if r[mi] == metric)
            got = sorted((ms(r[0]), int(r[1])) for r in rows(
                "SELECT window_start, count FROM %s.agg_1h WHERE tenant_id = 'default' AND "
                "device_id = '%s' AND metric_name = '%s'" % (ks, dev, metric)))
            eq(got, want, "%s: agg_1h rows of %s/%s (window, count)" % (label, dev, metric))
            n += len(got)
    for metric in METRICS:
        want = emb.get("/api/v1/fleet", metric=metric, resolution="1h",
                       **{"from": T0, "to": T0 + DAY}).json()
        cols = want["columns"]
        want = sorted((r[cols.index("time")], r[cols.index("devices")],
                       r[cols.index("readings")]) for r in want["values"])
        got = sorted((ms(r[0]), int(r[1]), int(r[2])) for r in rows(
            "SELECT window_start, device_count, count FROM %s.fleet_agg_1h WHERE tenant_id = "
            "'default' AND metric_name = '%s'" % (ks, metric)))
        eq(got, want, "%s: fleet_agg_1h rows of %s (window, devices, readings)"
           % (label, metric))
        n += len(got)
    want = sorted((d["device"], d["samples"]) for d in emb.devices()["devices"])
    got = sorted((r[0], int(r[1])) for r in rows(
        "SELECT device_id, samples FROM %s.devices WHERE tenant_id = 'default'" % ks))
    eq(got, want, "%s: devices rows (device, samples)" % label)
    want = sorted((b["bucket_ms"], d["device"], d["event_count"]) for b in tbt(emb)["buckets"]
                  for d in b["devices"])
    got = sorted((ms(r[0]), r[1], int(r[2])) for r in rows(
        "SELECT bucket, device_id, event_count FROM %s.telemetry_by_tenant_totals WHERE "
        "tenant_id = 'default' AND day = %d" % (ks, T0)))
    eq(got, want, "%s: telemetry_by_tenant_totals rows (bucket, device, events)" % label)
    return n


def tbt(s):
    r = s.get("/api/v1/telemetry_by_tenant", **{"from": T0, "to": T0 + DAY})
    eq(r.status, 200, "telemetry_by_tenant: %r" % r.body[:200])
    return r.json()


def events(s):
    """(bucket, device, events) of telemetry_by_tenant (sub-buckets left out: the
    embedded server has no hot device)."""
    return sorted((b["bucket_ms"], d["device"], d["event_count"]) for b in tbt(s)["buckets"]
                  for d in b["devices"])


@suite.test
def new_directory_answers_and_adds():
    node()
    ks = cassnode.keyspace("bdb_newdir_it")
    p = cql("DROP KEYSPACE IF EXISTS %s" % ks)
    check(p.returncode == 0, p.stderr)
    rng = random.Random(SEED)
    qs = queries()
    emb = Server(args=["--flush-interval-ms", "1h"]).start()
    # A makes devices with more than 100 reports a minute hot: their later samples
    # spread over 4 sub-buckets, which B must read too
    a = cass_server(ks, args=["--hot-threshold", "100", "--hot-subbuckets", "4"]).start()
    b = c = None
    try:
        first = batch(rng, DEVICES, T0, T0 + 2 * HOUR + 40 * MIN, 1500)
        for i in range(0, len(first), 300):
            send([emb, a], first[i:i + 300])
        emb.flush()
        a.flush()
        want = answers(a, qs)
        check(all(st == 200 for st, _ in want.values()), "A answers: %r" % [
            k for k, v in want.items() if v[0] != 200][:3])
        want_tbt = tbt(a)
        hot = [r for r in rows("SELECT device_id, sub_buckets FROM %s.telemetry_by_tenant_totals "
                               "WHERE tenant_id = 'default' AND day = %d" % (ks, T0))
               if int(r[1]) > 1]
        check(hot, "no device of A became hot: %s" % a.log()[-1500:])
        a.stop()

        # An empty directory on the same keyspace, without adopt=true.
        b = cass_server(ks).start()
        check("rebuilt 6 device(s)" in b.log(), "no rebuild in the log: %s" % b.log()[-1500:])
        same("B on an empty directory", want, answers(b, qs))
        eq(tbt(b), want_tbt, "telemetry_by_tenant of B")
        print("  B answers %d queries as A did" % len(qs))

        # Two writers: a third server while B runs is refused by the writer lease.
        c = cass_server(ks)
        try:
            c.start()
            raise TestFailure("a second server on the keyspace started")
        except TestFailure as e:
            check("another server writes" in str(e) or "another server writes" in c.log(),
                  "the second server: %s" % str(e)[-800:])
        c.kill()  # (exited already: forgets the process)
        c = None

        # More for 3 devices in the same minute, hour and day windows, plus late reports.
        some = DEVICES[:3]
        last = {d: max(r[1] for r in first if r[0] == d) for d in some}
        more = [(d, last[d] + 1000 * (k + 1), METRICS[k % 2], 200.0 + k)
                for d in some for k in range(3)]  # the minute of each device's last report
        more += batch(rng, some, T0 + 2 * HOUR + 40 * MIN, T0 + 3 * HOUR, 300)
        more = [r for r in more if r[1] < T0 + 3 * HOUR]
        send([emb, b], sorted(more, key=lambda r: r[1]))
        send([emb, b], batch(rng, some[:1], T0 + 5 * MIN, T0 + 10 * MIN, 20))  # late
        emb.flush()
        b.flush()
        qs_tiers = [q for q in qs if "resolution" in q[1]]
        same_stats("B after its flush", answers(emb, qs_tiers), answers(b, qs_tiers))
        eq(registry(b), registry(emb), "registry after B's flush")
        eq(events(b), events(emb), "telemetry_by_tenant after B's flush")
        n = check_rows("after B's flush", ks, emb)
        print("  after B's flush: answers and %d agg_1h/fleet_agg_1h rows add up" % n)

        # A restart keeps the horizons: the other devices' hours still merge.
        b.restart()
        rest = DEVICES[3:]
        send([emb, b], batch(rng, rest, T0 + 2 * HOUR + 50 * MIN, T0 + 3 * HOUR, 200))
        emb.flush()
        b.flush()
        same_stats("B after a restart", answers(emb, qs_tiers), answers(b, qs_tiers))
        eq(registry(b), registry(emb), "registry after B's restart")
        check_rows("after B's restart", ks, emb)
    finally:
        for s in (emb, a, b, c):
            if s is not None and s.proc is not None:
                s.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
