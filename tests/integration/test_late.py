#!/usr/bin/env python3
"""Late data and per-tenant tier retention through the HTTP API.

Late data: events hours and days behind their device's newest event (new times, and
rewrites of times an earlier flush already aggregated) are readable at once, listed by
GET /api/v1/late and counted in /metrics; after the flush that recomputes their
windows every tier (1m, 1h, 1d) equals raw (count, min, max exact, sum to 1e-12,
stddev to 1e-9, p50/p95/p99 within 1%), also after a restart, and after kill -9 with
acked late rewrites only in the WAL (nothing lost, the recompute still happens).

Tier retention: tier_retention on create, PATCH and GET of the admin API, bad values
refused with the field named, persisted across a restart, and `bucketdb tenant
--tier-retention-*`."""

import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, run_bin  # noqa: E402
from test_resolution import DAY, HOUR, MIN, T0, check_tier, gen, write  # noqa: E402

suite = Suite("test_late")
END = T0 + 2 * DAY


def late_lines(seed, rewrite):
    """Hours and days late: new times (rewrite=False) or times of the base data."""
    rnd = random.Random(seed)
    lines = []
    for i in range(40):
        if rewrite:  # the base data is every 60 s from T0: hit its times exactly
            t = T0 + rnd.randrange(0, (END - 3 * HOUR - T0) // MIN) * MIN
        else:  # 3 to 40 hours behind the newest event, at times the base does not use
            t = END - rnd.randrange(3 * HOUR, 40 * HOUR) // MIN * MIN + 1234
        lines.append("env,device=d1 uni=%r,skew=%r,const=42.5 %d"
                     % (round(rnd.uniform(-50, 150), 3), round(rnd.lognormvariate(0, 2), 6), t))
    return lines


def all_tiers(s):
    for res in ("1m", "1h", "1d"):
        check_tier(s, res, T0, END)


def metric_value(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    check(False, "no %s in /metrics" % name)


@suite.test
def late_hours_and_days_equal_raw():
    with Server() as s:
        write(s, gen(2, 60000, 7))
        s.flush()
        # new times, hours and days late: exact at once (the head merges on top)
        s.write(late_lines(1, False), precision="ms")
        all_tiers(s)
        doc = s.get("/api/v1/late", device="d1").json()
        eq(doc["threshold_ms"], HOUR)
        eq(doc["late_events_total"], 40)
        eq(len(doc["events"]), 40)
        ev = doc["events"][0]
        check(ev["behind_ms"] > HOUR and ev["device"] == "d1", "late event %r" % ev)
        eq(len(s.get("/api/v1/late", device="other").json()["events"]), 0)
        eq(s.get("/api/v1/late", limit="0").status, 400)
        # rewrites of flushed times: equal raw after the flush that recomputes them
        s.write(late_lines(2, True), precision="ms")
        s.flush()
        all_tiers(s)
        m = s.metrics_text()
        eq(metric_value(m, "bucketdb_late_events_total"), 80)
        check(metric_value(m, 'bucketdb_tier_windows_recomputed_total{tier="1m"}') >= 40,
              "minute windows recomputed")
        # per series (3 metrics) and day touched (2)
        eq(metric_value(m, 'bucketdb_tier_windows_recomputed_total{tier="1d"}'), 6)
        eq(metric_value(m, "bucketdb_tier_recompute_pending"), 0)
        s.restart()
        all_tiers(s)


@suite.test
def late_rewrites_survive_kill9():
    with Server() as s:
        write(s, gen(2, 60000, 8))
        s.flush()
        s.write(late_lines(3, True), precision="ms")  # acked: in the WAL only
        s.kill()
        s.start()
        all_tiers(s)  # before the flush: marked minutes come from raw
        raw = s.query(device="d1", metric="env.uni", **{"from": T0, "to": END})
        eq(raw["count"], 2 * 1440, "no acked sample lost or doubled in raw")
        s.flush()
        all_tiers(s)  # the replay rebuilt the dirty minutes: recomputed
        s.write(late_lines(4, True), precision="ms")
        s.flush()
        s.kill()  # after the flush committed
        s.start()
        all_tiers(s)


def admin(s, method, path, doc=None):
    body = json.dumps(doc) if doc is not None else None
    hdrs = {"Authorization": "Token " + s.token, "Content-Type": "application/json"}
    return s.request(method, "/api/v1/admin" + path, body, hdrs)


@suite.test
def tier_retention_admin_api():
    with Server() as s:
        r = admin(s, "POST", "/tenants", {"name": "acme", "tier_retention": {"1m": "2d"}})
        eq(r.status, 201, "create (%r)" % r.body[:300])
        eq(r.json()["tier_retention"], {"1m": 2 * DAY, "1h": 0, "1d": 0})
        r = admin(s, "PATCH", "/tenants/acme",
                  {"tier_retention": {"1h": "forever", "1d": 400 * DAY}})
        eq(r.status, 200, "patch (%r)" % r.body[:300])
        eq(r.json()["tier_retention"], {"1m": 2 * DAY, "1h": -1, "1d": 400 * DAY})
        r = admin(s, "PATCH", "/tenants/acme", {"tier_retention": {"1m": "default"}})
        eq(r.json()["tier_retention"]["1m"], 0)
        r = admin(s, "PATCH", "/tenants/acme", {"tier_retention": {"5m": "1d"}})
        eq(r.status, 400)
        contains(r.text, "tier_retention")
        r = admin(s, "PATCH", "/tenants/acme", {"tier_retention": {"1h": "soon"}})
        eq(r.status, 400)
        contains(r.text, "tier_retention.1h")
        r = admin(s, "PATCH", "/tenants/acme", {"tier_retention": 5})
        eq(r.status, 400)
        s.restart()
        eq(admin(s, "GET", "/tenants/acme").json()["tier_retention"],
           {"1m": 0, "1h": -1, "1d": 400 * DAY})
        url = "http://127.0.0.1:%d" % s.port
        rc, out, err = run_bin(["tenant", "update", "acme", "--server", url, "--admin-token",
                                s.token, "--tier-retention-1m", "3d", "--tier-retention-1d",
                                "default"])
        eq(rc, 0, "bucketdb tenant update: %s" % err)
        eq(json.loads(out)["tier_retention"], {"1m": 3 * DAY, "1h": -1, "1d": 0})
        rc, out, err = run_bin(["tenant", "update", "acme", "--server", url, "--admin-token",
                                s.token, "--tier-retention-1m", "x\"y"])
        eq(rc, 2, "bad value refused before sending")


if __name__ == "__main__":
    suite.main()
