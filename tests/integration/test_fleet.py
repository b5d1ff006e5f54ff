#!/usr/bin/env python3
"""Fleet aggregates at 10,000 devices through the HTTP API.

Pre-computed fleet windows (GET /api/v1/fleet, 1h and 1d) and the ad hoc query over
device tiers by tag (GET /api/v1/fleet/query) equal what the raw data says: device
count, readings, min, max exactly, avg to 1e-12 and stddev (population) to 1e-9
relative. Checked from the head alone, after flushes in which the same device reaches
the same hour twice (the device count must stay exact), after rewrites of flushed
readings (late path), after a clean restart and after kill -9 with acknowledged but
unflushed writes (nothing lost, nothing counted twice).
Bad parameters get 400 with the reason."""

import json
import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import ON_CASSANDRA, Server, Suite, check, contains, eq, run_bin  # noqa: E402

suite = Suite("test_fleet")
HOUR, DAY = 3600000, 86400000
# On Cassandra (tests/cassandra-suite) the flushed readings and their tier and fleet
# windows are requests to the one test node: 2,000 devices check the same exactness.
NDEV = 2000 if ON_CASSANDRA else 10000
# midnight 3 days ago: inside every default tier retention
T0 = (int(time.time() * 1000) // DAY - 3) * DAY
SITES = ["berlin", "paris", "oslo", "rome"]


def dev(i):
    return "dev-%05d" % i


def tags(i):
    return {"site": SITES[i % 4], "model": "m%d" % (i % 3)}


class Fleet:
    """The raw truth: every acknowledged reading, per device."""

    def __init__(self, seed):
        self.rnd = random.Random(seed)
        self.rows = []  # (device index, ts, value)
        self.used = set()

    def batch(self, per_dev, days=2):
        lines = []
        for i in range(NDEV):
            for _ in range(per_dev):
                while True:
                    ts = T0 + self.rnd.randrange(days * DAY // 1000) * 1000
                    if (i, ts) not in self.used:
                        break
                self.used.add((i, ts))
                v = round(self.rnd.lognormvariate(3, 0.8), 3) if i % 2 else \
                    round(self.rnd.uniform(-20, 40), 2)
                self.rows.append((i, ts, v))
                t = tags(i)
                lines.append("env,device=%s,site=%s,model=%s temp=%r %d" % (
                    dev(i), t["site"], t["model"], v, ts))
        return lines

    def rewrite(self, every):
        """New values for readings already written (and flushed): the newest write wins."""
        lines = []
        for k in range(0, len(self.rows), every):
            i, ts, v = self.rows[k]
            v = round(v + 500.25, 3)
            self.rows[k] = (i, ts, v)
            t = tags(i)
            lines.append("env,device=%s,site=%s,model=%s temp=%r %d" % (
                dev(i), t["site"], t["model"], v, ts))
        return lines

    def expect(self, width, pick=lambda i: True):
        win = {}
        for i, ts, v in self.rows:
            if pick(i):
                win.setdefault(ts - ts % width, []).append((i, v))
        out = {}
        for s, xs in win.items():
            vals = [v for _, v in xs]
            n = len(vals)
            mean = math.fsum(vals) / n
            sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / n)
            out[s] = (len({i for i, _ in xs}), n, min(vals), max(vals), mean, sd, math.fsum(vals))
        return out


def write_all(s, lines, chunk=5000):
    for k in range(0, len(lines), chunk):
        s.write(lines[k:k + chunk], precision="ms")


def check_rows(doc, want, what):
    got = {r[0]: r for r in doc["values"]}
    eq(doc["count"], len(doc["values"]), what + ": count vs values")
    eq(sorted(got), sorted(want), what + ": windows")
    for start, (devs, n, mn, mx, mean, sd, total) in want.items():
        r = got[start]
        eq(r[1], devs, "%s window %d devices" % (what, start))
        eq(r[2], n, "%s window %d readings" % (what, start))
        eq(r[3], mn, "%s window %d min" % (what, start))
        eq(r[4], mx, "%s window %d max" % (what, start))
        check(abs(r[5] - mean) <= 1e-12 * max(abs(mean), 1e-300),
              "%s window %d avg %r, want %r" % (what, start, r[5], mean))
        check(abs(r[6] - sd) <= 1e-9 * sd + 1e-12,
              "%s window %d stddev %r, want %r" % (what, start, r[6], sd))
        check(abs(r[7] - total) <= 1e-12 * abs(total) + 1e-9,
              "%s window %d sum %r, want %r" % (what, start, r[7], total))


def fleet(s, path="/api/v1/fleet", **params):
    p = {"metric": "env.temp", "from": T0, "to": T0 + 3 * DAY}
    p.update(params)
    r = s.get(path, **p)
    eq(r.status, 200, "GET %s %r (%r)" % (path, params, r.body[:300]))
    return r.json()


def check_all(s, f, what, whole=False):
    for res, width in (("1h", HOUR), ("1d", DAY)):
        doc = fleet(s, resolution=res)
        eq(doc["source"], "fleet_tables")
        eq(doc["resolution"], res)
        check_rows(doc, f.expect(width), "%s pre-computed %s" % (what, res))
    # ad hoc by tag: one site; one site and one model; over hours and days
    doc = fleet(s, "/api/v1/fleet/query", tag="site:paris", resolution="1h")
    eq(doc["source"], "device_tiers")
    eq(doc["matched_devices"], NDEV // 4)
    eq(doc["tags"], {"site": "paris"})
    check_rows(doc, f.expect(HOUR, lambda i: i % 4 == 1), what + " ad hoc site:paris 1h")
    r = s.get("/api/v1/fleet/query?metric=env.temp&tag=site:oslo&tag=model:m1&resolution=1d"
              "&from=%d&to=%d" % (T0, T0 + 3 * DAY))
    eq(r.status, 200, r.body[:300])
    doc = r.json()
    eq(doc["matched_devices"], len([i for i in range(NDEV) if i % 4 == 2 and i % 3 == 1]))
    check_rows(doc, f.expect(DAY, lambda i: i % 4 == 2 and i % 3 == 1),
               what + " ad hoc site:oslo model:m1 1d")
    if not whole:
        return
    # the whole tenant ad hoc (10,000 devices' tiers) equals the pre-computed tables
    doc = fleet(s, "/api/v1/fleet/query", resolution="1h")
    eq(doc["matched_devices"], NDEV)
    check_rows(doc, f.expect(HOUR), what + " ad hoc whole tenant 1h")


@suite.test
def test_fleet_10000_devices():
    s = Server(args=["--flush-interval-ms", "3600000"]).start()
    f = Fleet(1)
    write_all(s, f.batch(2))
    check_all(s, f, "head only")
    s.flush()
    # the same devices again, into the same hours: device counts must stay exact
    write_all(s, f.batch(1))
    check_all(s, f, "files + head", whole=True)
    s.flush()
    # rewrites of flushed readings: the late path recomputes the devices' windows and the
    # fleet tables answer those windows from the device tiers
    write_all(s, f.rewrite(151))
    check_all(s, f, "rewrites in the head")
    s.flush()
    check_all(s, f, "rewrites flushed")
    doc = fleet(s, resolution="1h")
    check(doc["recomputed"] > 0, "windows recomputed after rewrites: %r" % doc["recomputed"])
    check(len(os.listdir(os.path.join(s.data, "fleet", "1h"))) >= 2, "fleet files written")
    s.restart()
    check_all(s, f, "after restart")
    # acknowledged, not flushed, then kill -9
    write_all(s, f.batch(1, days=3))
    s.kill()
    s.start()
    check_all(s, f, "after kill -9")
    s.flush()
    s.kill()
    s.start()
    check_all(s, f, "after flush and kill -9", whole=True)
    s.stop()


@suite.test
def test_fleet_head_rewrite_near_newest():
    """A rewrite of a flushed reading 10 minutes behind its device's newest (not late
    data) into an hour no late data touched: the fleet file holds the old reading and
    the head the new one; the tables answer that hour from the device tiers until and
    after the flush that recomputes it (counted once, the new value)."""
    s = Server(args=["--flush-interval-ms", "3600000"]).start()
    f = Fleet(2)
    lines = []
    for k in range(12):  # in time order per device: nothing marked for recompute
        for i in range(3):
            ts = T0 + DAY + k * 300000 + i * 1000
            v = round(f.rnd.uniform(-20, 40), 2)
            f.rows.append((i, ts, v))
            t = tags(i)
            lines.append("env,device=%s,site=%s,model=%s temp=%r %d" % (
                dev(i), t["site"], t["model"], v, ts))
    write_all(s, lines)
    s.flush()
    eq(fleet(s, resolution="1h")["recomputed"], 0, "recomputed before any rewrite")
    k = [n for n, (i, ts, _) in enumerate(f.rows) if i == 1][-3]  # 10 min before newest
    i, ts, v = f.rows[k]
    f.rows[k] = (i, ts, v + 100.5)
    t = tags(i)
    s.write(["env,device=%s,site=%s,model=%s temp=%r %d" % (
        dev(i), t["site"], t["model"], v + 100.5, ts)], precision="ms")
    for what in ("rewrite in the head", "rewrite flushed", "after restart"):
        for res, width in (("1h", HOUR), ("1d", DAY)):
            doc = fleet(s, resolution=res)
            check_rows(doc, f.expect(width), "%s %s" % (what, res))
            eq(doc["recomputed"], 1, "%s %s: windows answered from the device tiers" % (what, res))
        if what == "rewrite in the head":
            s.flush()
        elif what == "rewrite flushed":
            s.restart()
    s.stop()


@suite.test
def test_fleet_bad_requests():
    s = Server().start()
    s.write(["env,device=a,site=x temp=1 %d" % (T0 + 1000)], precision="ms")
    for path, want in (("/api/v1/fleet", "missing parameter 'metric'"),
                       ("/api/v1/fleet?metric=env.temp&resolution=1m",
                        "'resolution' must be 1h or 1d"),
                       ("/api/v1/fleet/query?metric=env.temp&resolution=5m",
                        "'resolution' must be 1m, 1h or 1d"),
                       ("/api/v1/fleet/query?metric=env.temp&tag=site", "invalid 'tag'"),
                       ("/api/v1/fleet?metric=env.temp&from=%d&to=%d" % (T0 + 5, T0),
                        "'from' must be before 'to'"),
                       ("/api/v1/fleet?metric=env.temp&from=yesterday", "invalid 'from'")):
        r = s.get(path)
        eq(r.status, 400, path)
        contains(r.text, want, path)
    eq(s.get("/api/v1/fleet/nope?metric=env.temp").status, 404)
    eq(s.post("/api/v1/fleet?metric=env.temp").status, 405)
    # a metric nobody has: no windows; ad hoc with a tag nobody has: no devices
    doc = fleet(s, metric="env.none")
    eq(doc["values"], [])
    doc = fleet(s, "/api/v1/fleet/query", tag="site:nowhere")
    eq(doc["matched_devices"], 0)
    eq(doc["values"], [])
    r = s.get("/api/v1/fleet", metric="env.temp", format="csv", **{"from": T0, "to": T0 + DAY})
    eq(r.status, 200)
    lines = r.text.strip().split("\n")
    eq(lines[0], "time,devices,readings,min,max,avg,stddev,sum")
    eq(lines[1].split(",")[:3], [str(T0), "1", "1"])
    # the CLI: pre-computed and by tag
    s.write(["env,device=b,site=y temp=3 %d" % (T0 + 2000)], precision="ms")
    url = "http://127.0.0.1:%d" % s.port
    for extra, devs in (([], 2), (["--tag", "site:y"], 1)):
        rc, out, err = run_bin(["query", "--server", url, "--fleet", "--metric", "env.temp",
                                "--from", str(T0), "--to", str(T0 + DAY), "--resolution", "1d"]
                               + extra)
        eq(rc, 0, err)
        doc = json.loads(out)
        eq(doc["values"][0][1], devs, "CLI %r devices" % extra)
    rc, out, err = run_bin(["query", "--server", url, "--fleet"])
    eq(rc, 2)
    contains(err, "--fleet needs --metric")
    s.stop()


if __name__ == "__main__":
    suite.main()
