#!/usr/bin/env python3
"""The read cache (docs/AGGREGATION.md#read-cache) never changes an answer: two servers
get the same writes, one with the default cache and one with read_cache_bytes = 0, and
Grafana's panels (InfluxQL GROUP BY time(1m) and time(1h), one device and a tag group,
and PromQL avg_over_time) and raw reads (/api/v1/query, which also answers how many
chunks it decoded) must answer byte for byte the same, each asked three times of
the cached server (a miss read as without it, a miss kept, a hit), before and after every step that could leave a kept
value stale: a flush, samples into flushed windows (the head, then a new block),
rewrites of flushed times, late data, compaction (at /internal/flush), a deleted
tenant and a new one of the same name. Also: the /metrics counters move, and
read_cache_bytes is range-checked at start."""

import json
import os
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import BIN, Server, Suite, check, contains, embedded_only, eq, path_with  # noqa: E402

suite = Suite("test_read_cache", embedded_only="the cache serves the embedded engine's files")
MIN, HOUR, DAY = 60000, 3600000, 86400000
# Two days before today (UTC): inside the tiers' retention (1m: 90 days, 1h: 365).
T0 = (int(time.time() * 1000) // DAY - 2) * DAY
SITES = ("s1", "s2")


def tok(t):
    return {"Authorization": "Token " + t} if t else {}


def admin(s, method, path, doc=None):
    hdrs = tok(s.token)
    body = None
    if doc is not None:
        body = json.dumps(doc)
        hdrs["Content-Type"] = "application/json"
    return s.request(method, "/api/v1/admin" + path, body, hdrs)


def lines(dev, site, a, b, step, seed):
    out = []
    x = seed
    for t in range(a, b, step):
        x = (x * 1103515245 + 12345) % (1 << 31)
        v = (x >> 8) % 10000 / 100.0
        out.append("env,device=%s,site=%s temp=%.2f,hum=%.2f %d" % (dev, site, v, v / 3 + 20, t))
    return out


def write_both(pair, body_lines, db=None):
    for s in pair:
        params = {"precision": "ms"}
        if db:
            params["db"] = db
        for i in range(0, len(body_lines), 5000):
            r = s.request("POST", path_with("/write", params),
                          "\n".join(body_lines[i:i + 5000]) + "\n", tok(s.token))
            eq(r.status, 204, "write (%r)" % r.body[:300])


def flush_both(pair):
    for s in pair:
        s.flush()


def panels(db):
    """(path, params) of the panels over fixed absolute ranges, aligned and not."""
    out = []
    for a, b in ((T0, T0 + DAY), (T0 + 7 * MIN + 13, T0 + 26 * HOUR + 5 * MIN),
                 (T0 + 3 * HOUR, T0 + 33 * HOUR)):
        rng = "time >= %dms and time <= %dms" % (a, b)
        for q in ('SELECT mean("temp") FROM "env" WHERE "device" = \'d1\' AND %s '
                  'GROUP BY time(1m) fill(null)',
                  'SELECT mean("hum"), max("temp") FROM "env" WHERE "device" = \'d2\' AND %s '
                  'GROUP BY time(1m)',
                  'SELECT mean("temp") FROM "env" WHERE "device" = \'d1\' AND %s '
                  'GROUP BY time(1h) fill(null)',
                  'SELECT mean("temp") FROM "env" WHERE "site" = \'s1\' AND %s '
                  'GROUP BY time(1h) fill(null)'):
            out.append(("/query", {"db": db, "epoch": "ms", "q": q % rng}))
        out.append(("/api/v1/query", {"device": "d1", "from": a, "to": b, "tenant": db}))
        out.append(("/api/v1/query", {"device": "d2", "from": a + 5 * HOUR, "to": b,
                                      "tenant": db, "metric": "env.temp"}))
        for expr, step in (('avg_over_time(env_temp{device="d1"}[1m])', 60),
                           ('avg(avg_over_time(env_temp{site="s1"}[1h]))', 3600)):
            out.append(("/prometheus/api/v1/query_range",
                        {"query": expr, "start": (a // (step * 1000) + 1) * step,
                         "end": b // (step * 1000) * step, "step": step, "db": db}))
    return out


def same_answers(pair, db="bench", ok=True):
    """Every panel: the cached server three times, the uncached once, the same bytes (ok:
    every answer a 200)."""
    c, n = pair
    tiers = set()
    for path, params in panels(db):
        want = n.request("GET", path_with(path, params), None, tok(n.token))
        for i in range(3):  # asked once, kept at the second, a hit at the third
            got = c.request("GET", path_with(path, params), None, tok(c.token))
            eq(got.status, want.status, "%s %r" % (path, params))
            check(got.body == want.body, "%s %r, read %d of the cached server:\n%r\n!=\n%r"
                  % (path, params, i + 1, got.body[:400], want.body[:400]))
        if ok:
            eq(want.status, 200, "%s %r: %r" % (path, params, want.body[:300]))
        tiers.add(want.headers.get("x-bucketdb-tier"))
    return tiers


def metric(s, name):
    for line in s.metrics_text().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise AssertionError("%s not in /metrics" % name)


@suite.test
@embedded_only("the cache serves the embedded engine's files")
def cached_answers_equal_uncached_through_changes():
    with Server() as c, Server(args=["--read-cache-bytes", "0"]) as n:
        pair = (c, n)
        for s in pair:
            admin(s, "POST", "/tenants", {"name": "bench"})
        data = []
        for i, dev in enumerate(("d1", "d2", "d3", "d4")):
            data += lines(dev, SITES[i % 2], T0 + 1000 * (i + 1), T0 + 36 * HOUR, 10000, i + 1)
        write_both(pair, data, "bench")
        tiers = same_answers(pair)          # all in the head
        flush_both(pair)
        tiers |= same_answers(pair)         # blocks and tier files
        check({"1m", "1h"} <= tiers, "the panels read the tiers: %r" % tiers)
        h = metric(c, "bucketdb_read_cache_hits_total")
        check(h > 0, "no hit on the cached server")
        check(metric(c, "bucketdb_read_cache_misses_total") > 0, "no miss")
        check(metric(c, "bucketdb_read_cache_bytes") > 0, "nothing kept")
        eq(metric(c, "bucketdb_read_cache_max_bytes"), 64 << 20)
        eq(metric(n, "bucketdb_read_cache_hits_total"), 0)
        eq(metric(n, "bucketdb_read_cache_max_bytes"), 0)
        # more samples into flushed windows: in the head, then a new block beside the old
        write_both(pair, lines("d1", "s1", T0 + 5 * HOUR + 5, T0 + 8 * HOUR, 30000, 9), "bench")
        same_answers(pair)
        flush_both(pair)
        same_answers(pair)
        # rewrites of flushed times (other values) and late data far behind
        write_both(pair, ["env,device=d1,site=s1 temp=%d %d" % (500 + i, T0 + 1000 + i * 610000)
                          for i in range(40)], "bench")
        write_both(pair, lines("d2", "s2", T0 + 20 * HOUR + 3, T0 + 21 * HOUR, 7000, 11),
                   "bench")
        same_answers(pair)
        flush_both(pair)
        same_answers(pair)
        flush_both(pair)                    # compaction runs after a flush
        same_answers(pair)
        # a deleted tenant, and a new one of the same name with other data
        for s in pair:
            eq(admin(s, "DELETE", "/tenants/bench").status, 204)
        same_answers(pair, ok=False)
        flush_both(pair)
        same_answers(pair, ok=False)
        for s in pair:
            eq(admin(s, "POST", "/tenants", {"name": "bench"}).status, 201)
        write_both(pair, lines("d1", "s1", T0 + 2 * HOUR, T0 + 30 * HOUR, 20000, 21) +
                   lines("d2", "s2", T0 + 9 * HOUR, T0 + 33 * HOUR, 15000, 22), "bench")
        same_answers(pair)
        flush_both(pair)
        same_answers(pair)
        check(metric(c, "bucketdb_read_cache_hits_total") > h, "no hit after the changes")


def refused_outside_1mib_1tib(name):
    """A cache size under 1 MiB or over 1 TiB stops the start, naming the setting."""
    for bad in ("1000", "2000000000000"):
        p = subprocess.run([BIN, "serve", "--data", "/nonexistent-bdb-rcache",
                            "--listen", "127.0.0.1:0", "--" + name.replace("_", "-"), bad],
                           capture_output=True, timeout=30)
        check(p.returncode != 0, "%s=%s accepted" % (name, bad))
        contains(p.stderr.decode(), "%s: must be 0 (off) or 1MiB..1TiB" % name)


@suite.test
def read_cache_bytes_is_range_checked():
    refused_outside_1mib_1tib("read_cache_bytes")


@suite.test
def catalog_cache_bytes_is_range_checked_and_zero_keeps_nothing():
    refused_outside_1mib_1tib("catalog_cache_bytes")
    with Server(args=["--catalog-cache-bytes", "0"]) as s:
        s.write(["env,device=z1 temp=1 %d" % (int(time.time() * 1000) - 60000)], precision="ms")
        for _ in range(3):
            r = s.request("GET", "/query?q=SHOW+TAG+VALUES+WITH+KEY+%3D+device")
            eq(r.status, 200, r.body[:300])
            contains(r.text, "z1")
        check(metric(s, "bucketdb_catalog_cache_hits_total") == 0, "kept with size 0")
        check(metric(s, "bucketdb_catalog_cache_bytes") == 0, "bytes kept with size 0")


@suite.test
def group_cache_bytes_is_range_checked_and_zero_keeps_nothing():
    refused_outside_1mib_1tib("group_cache_bytes")
    with Server(args=["--group-cache-bytes", "0"]) as s:
        now = int(time.time() * 1000)
        s.write(["env,device=z%d,site=a temp=%d %d" % (d, d, now - 7200000 + i * 60000)
                 for d in range(2) for i in range(100)], precision="ms")
        q = ("/query?q=" + urllib.parse.quote("SELECT mean(temp) FROM env WHERE site = 'a' "
                                              "AND time >= now() - 2h GROUP BY time(10m)"))
        for _ in range(3):
            r = s.request("GET", q)
            eq(r.status, 200, r.body[:300])
            contains(r.text, "0.5")
        check(metric(s, "bucketdb_group_cache_hits_total") == 0, "kept with size 0")
        check(metric(s, "bucketdb_group_cache_bytes") == 0, "bytes kept with size 0")


if __name__ == "__main__":
    suite.main()
