#!/usr/bin/env python3
"""Rollup tiers through the HTTP API: resolution=1m|1h|1d agree with raw (count, sum,
min, max exactly or to 1e-12; p50/p95/p99 within the sketch's 1% of the exact order
statistic) before a flush (head), after a flush and after a restart; resolution=auto
routes by the range (raw, 1m, 1h, 1d) and names the tier that answered; explicit
resolutions are honoured; CSV carries the tier; bad values are refused; the final
flag follows the watermark; kill -9 before and after a flush loses nothing acked and
counts nothing twice."""

import math
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq  # noqa: E402

suite = Suite("test_resolution")
MIN, HOUR, DAY = 60000, 3600000, 86400000
# Data starts at a midnight 5 days ago: inside the default tier retention (1m: 90
# days), which the server applies to event times against its wall clock.
T0 = (int(time.time() * 1000) // 86400000 - 5) * 86400000
ALPHA = 0.01 * (1 + 1e-9)
WIDTH = {"1m": MIN, "1h": HOUR, "1d": DAY}


def gen(days, step_ms, seed, start=T0):
    """Samples {metric: [(ts, v)]}: uniform, skewed (lognormal) and constant."""
    rnd = random.Random(seed)
    data = {"env.uni": [], "env.skew": [], "env.const": []}
    t = start
    while t < start + days * DAY:
        data["env.uni"].append((t, round(rnd.uniform(0, 100), 3)))
        data["env.skew"].append((t, round(math.exp(rnd.gauss(0, 1.5)), 6)))
        data["env.const"].append((t, 42.5))
        t += step_ms
    return data


def write(s, data, dev="d1", chunk=5000):
    ts = [t for t, _ in data["env.uni"]]
    lines = []
    for i, t in enumerate(ts):
        lines.append("env,device=%s uni=%r,skew=%r,const=%r %d" % (
            dev, data["env.uni"][i][1], data["env.skew"][i][1], data["env.const"][i][1], t))
        if len(lines) >= chunk:
            s.write(lines, precision="ms")
            lines = []
    if lines:
        s.write(lines, precision="ms")


def raw_rows(s, frm, to, dev="d1"):
    rows = s.values(device=dev, **{"from": frm, "to": to})
    out = {}
    for t, m, v in rows:
        out.setdefault(m, []).append((t, v))
    return out


def check_tier(s, res, frm, to, dev="d1", expect_tier=None):
    """The tier's windows over [frm, to) equal those computed from the raw samples."""
    w = WIDTH[res]
    lo = frm - frm % w
    hi = to if to % w == 0 else to - to % w + w
    raw = raw_rows(s, lo, hi, dev)
    doc = s.query(device=dev, resolution=res, **{"from": frm, "to": to})
    eq(doc["tier"], expect_tier or res, "tier that answered")
    eq(doc["width_ms"], w)
    cols = doc["columns"]
    eq(cols[:2], ["time", "metric"])
    got = {}
    for row in doc["values"]:
        r = dict(zip(cols, row))
        got[(r["metric"], r["time"])] = r
    want = {}
    for m, samples in raw.items():
        for t, v in samples:
            want.setdefault((m, t - t % w), []).append(v)
    if sorted(got) != sorted(want):
        extra = sorted(set(got) - set(want))[:5]
        missing = sorted(set(want) - set(got))[:5]
        check(False, "windows of %s: %d got, %d want; extra %r, missing %r"
              % (res, len(got), len(want), extra, missing))
    for key, vals in want.items():
        r = got[key]
        eq(r["count"], len(vals), "count %s %r" % (res, key))
        eq(r["min"], min(vals), "min %s %r" % (res, key))
        eq(r["max"], max(vals), "max %s %r" % (res, key))
        exact = math.fsum(vals)
        check(abs(r["sum"] - exact) <= 1e-12 * abs(exact) + 1e-9,
              "sum %s %r: %r vs %r" % (res, key, r["sum"], exact))
        mean = exact / len(vals)
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))
        check(abs(r["stddev"] - sd) <= 1e-9 * max(sd, 1e-300) + 1e-12,
              "stddev %s %r: %r vs %r" % (res, key, r["stddev"], sd))
        sv = sorted(vals)
        for q, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
            x = sv[int(math.floor(q * (len(sv) - 1)))]
            check(abs(r[name] - x) <= ALPHA * abs(x),
                  "%s %s %r: %r vs exact %r" % (name, res, key, r[name], x))
    return doc


def total_count(s, res, frm, to, dev="d1", metric="env.uni"):
    doc = s.query(device=dev, resolution=res, metric=metric, **{"from": frm, "to": to})
    return sum(row[2] for row in doc["values"])


@suite.test
def tiers_agree_with_raw():
    with Server() as s:
        data = gen(3, 30000, 1)
        write(s, data)
        end = T0 + 3 * DAY
        for res in ("1m", "1h", "1d"):  # from the head alone
            check_tier(s, res, T0, end)
        s.flush()
        for res in ("1m", "1h", "1d"):  # from the tier files
            check_tier(s, res, T0, end)
        # late samples into flushed minutes (new times) and a not-yet-flushed day
        late = gen(1, 3600000 + 7, 2, start=T0 + 5)
        write(s, late)
        for res in ("1m", "1h", "1d"):  # files + head
            check_tier(s, res, T0, end)
        check_tier(s, "1m", T0 + 7 * HOUR + 13 * MIN + 5, T0 + 9 * HOUR)  # cut windows
        s.restart()
        for res in ("1m", "1h", "1d"):
            check_tier(s, res, T0, end)
        n = len(data["env.uni"]) + len(late["env.uni"])
        for res in ("1m", "1h", "1d"):
            eq(total_count(s, res, T0, end), n, "total count at %s" % res)


@suite.test
def auto_routing_and_explicit():
    with Server() as s:
        data = gen(2, 60000, 3)
        write(s, data)
        last = data["env.uni"][-1][0]
        cases = [(HOUR, "raw"), (6 * HOUR, "raw"), (6 * HOUR + 1, "1m"), (DAY, "1m"),
                 (7 * DAY + 1, "1h"), (30 * DAY, "1h"), (90 * DAY + 1, "1d"),
                 (400 * DAY, "1d")]
        for span, tier in cases:
            frm = last + 1 - span
            doc = s.query(device="d1", resolution="auto", **{"from": frm, "to": last + 1})
            eq(doc["tier"], tier, "auto over %d ms" % span)
            eq(doc["resolution"], "auto")
            if tier == "raw":
                eq(doc["columns"], ["time", "metric", "value"])
        # explicit resolutions are honoured whatever the range
        doc = check_tier(s, "1d", last - HOUR, last + 1)
        eq(doc["resolution"], "1d")
        check_tier(s, "1h", T0, T0 + 2 * DAY)
        doc = s.query(device="d1", resolution="raw", **{"from": T0, "to": T0 + 2 * DAY})
        eq(doc["tier"], "raw")
        eq(doc["count"], 3 * len(data["env.uni"]))
        # metric filter, order, limit
        doc = s.query(device="d1", resolution="1h", metric="env.skew", order="desc", limit=5,
                      **{"from": T0, "to": T0 + 2 * DAY})
        eq(doc["count"], 5)
        eq([r[0] for r in doc["values"]], [T0 + 2 * DAY - k * HOUR for k in range(1, 6)])
        check(all(r[1] == "env.skew" for r in doc["values"]), "metric filter")
        # final: windows ending at or before the watermark (last event - 5 min)
        doc = s.query(device="d1", resolution="1m", metric="env.uni",
                      **{"from": last - 20 * MIN, "to": last + 1})
        wm = doc["watermark"]
        eq(wm, last - 5 * MIN)
        for row in doc["values"]:
            eq(row[-1], row[0] + MIN <= wm, "final flag of %d" % row[0])
        check(doc["values"][0][-1] is True and doc["values"][-1][-1] is False, "final flags")
        # CSV names the tier on every row
        r = s.query(device="d1", resolution="auto", format="csv",
                    **{"from": last + 1 - DAY, "to": last + 1})
        lines = r.text.strip().split("\n")
        eq(lines[0], "time,metric,tier,count,sum,min,max,mean,stddev,p50,p95,p99,final")
        check(all(ln.split(",")[2] == "1m" for ln in lines[1:]), "csv tier column")
        # from is not minute-aligned: the window holding it is included whole
        eq(len(lines) - 1, 3 * (24 * 60 + 1))
        # refusals
        r = s.query(expect=400, device="d1", resolution="5m")
        contains(r.text, "resolution")
        s.query(expect=404, device="nope", resolution="1h")


@suite.test
def stats_choose_the_columns():
    with Server() as s:
        data = gen(3, 60000, 5)
        write(s, data)
        s.flush()
        # and samples still in the head, inside windows the files hold too
        write(s, gen(1, 3600000 + 11, 6, start=T0 + 7))
        # parts of a file window (the reader steps over the windows before and stops
        # after) agree with raw: one hour of a day's 1m file, a day of a 30-day 1h file
        check_tier(s, "1m", T0 + DAY + 12 * HOUR, T0 + DAY + 13 * HOUR)
        check_tier(s, "1h", T0 + DAY + 5 * HOUR, T0 + 2 * DAY + 1)
        rng = {"from": T0, "to": T0 + 2 * DAY}
        full = s.query(device="d1", resolution="1h", **rng)
        allc = full["columns"]
        eq(allc, ["time", "metric", "count", "sum", "min", "max", "mean", "stddev", "p50",
                  "p95", "p99", "final"])
        rows = {(r[0], r[1]): dict(zip(allc, r)) for r in full["values"]}
        # any subset, in the columns' order whatever the order asked; repeats once
        for asked, cols in (("mean", ["mean"]), ("p99,count", ["count", "p99"]),
                            ("max,min,max", ["min", "max"]),
                            ("count,sum,min,max,mean,stddev,p50,p95,p99", allc[2:-1])):
            doc = s.query(device="d1", resolution="1h", stats=asked, **rng)
            eq(doc["columns"], ["time", "metric"] + cols + ["final"], "columns for %s" % asked)
            eq(doc["count"], full["count"])
            for r in doc["values"]:
                want = rows[(r[0], r[1])]
                eq(r[2:], [want[c] for c in cols + ["final"]], "row %r for %s" % (r[:2], asked))
        r = s.query(device="d1", resolution="1h", stats="p95,mean", format="csv", **rng)
        lines = r.text.strip().split("\n")
        eq(lines[0], "time,metric,tier,mean,p95,final")
        eq(len(lines) - 1, full["count"])
        # auto: honoured when a tier answers, not asked of a raw answer
        doc = s.query(device="d1", resolution="auto", stats="max",
                      **{"from": T0, "to": T0 + DAY})
        eq((doc["tier"], doc["columns"]), ("1m", ["time", "metric", "max", "final"]))
        doc = s.query(device="d1", resolution="auto", stats="max",
                      **{"from": T0, "to": T0 + HOUR})
        eq((doc["tier"], doc["columns"]), ("raw", ["time", "metric", "value"]))
        # refusals name what is wrong
        for bad, word in (("avg", "'avg'"), ("", "''"), ("mean,", "''"), ("MEAN", "'MEAN'")):
            r = s.query(expect=400, device="d1", resolution="1h", stats=bad, **rng)
            contains(r.json()["error"], "unknown statistic %s" % word)
            contains(r.json()["error"], "count, sum, min, max, mean, stddev, p50, p95, p99")
        for res in (None, "raw"):
            params = dict(rng, device="d1", stats="mean")
            if res:
                params["resolution"] = res
            r = s.query(expect=400, **params)
            contains(r.json()["error"], "'stats' applies to aggregated windows")


def crash_rounds(s, flush_before_kill):
    data = gen(1, 20000, 11)
    write(s, data)
    s.flush()
    more = gen(1, 20000, 12, start=T0 + DAY)
    write(s, more)  # acknowledged: in the WAL
    if flush_before_kill:
        s.flush()
    s.kill()
    s.start()
    n = len(data["env.uni"]) + len(more["env.uni"])
    for res in ("1m", "1h", "1d"):
        check_tier(s, res, T0, T0 + 2 * DAY)
        eq(total_count(s, res, T0, T0 + 2 * DAY), n, "count after kill -9 at %s" % res)
    s.flush()
    s.kill()
    s.start()
    for res in ("1m", "1h", "1d"):
        eq(total_count(s, res, T0, T0 + 2 * DAY), n, "count after flush + kill -9 at %s" % res)
    check_tier(s, "1h", T0, T0 + 2 * DAY)


@suite.test
def kill9_before_flush():
    with Server() as s:
        crash_rounds(s, False)


@suite.test
def kill9_after_flush():
    with Server() as s:
        crash_rounds(s, True)


if __name__ == "__main__":
    suite.main()
