#!/usr/bin/env python3
"""Bucket sizes and changes of size never hide data: a device written across many
buckets and through profile changes (1h -> 15m -> 6h) and learned changes returns
every sample for any range, before and after a flush, after a clean restart and
after kill -9; the partitions endpoint shows the sizes around each change;
out-of-order and duplicate timestamps resolve to the latest write everywhere."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import DAY, HOUR, MIN, Server, Suite, check, eq  # noqa: E402

suite = Suite("test_buckets")
T0 = 1704067200000  # 2024-01-01T00:00:00Z, aligned to a day


class Model:
    """Reference: (device, metric, ts) -> value, the latest write wins."""

    def __init__(self):
        self.data = {}

    def put(self, dev, metric, ts, v):
        self.data[(dev, metric, ts)] = v

    def rows(self, dev, lo, hi, metrics=None):
        out = [(ts, m, v) for (d, m, ts), v in self.data.items()
               if d == dev and lo <= ts < hi and (metrics is None or m in metrics)]
        out.sort(key=lambda r: (r[0], r[1]))
        return out


def lp(dev, metric, ts, v):
    meas, field = metric.split(".", 1)
    return "%s,device=%s %s=%r %d" % (meas, dev, field, float(v), ts)


def write_points(s, model, points, chunk=2000):
    for i in range(0, len(points), chunk):
        part = points[i:i + chunk]
        s.write([lp(*p) for p in part], precision="ms")
        for p in part:
            model.put(*p)


def check_ranges(s, model, dev, ranges, what):
    for lo, hi in ranges:
        got = s.values(device=dev, **{"from": lo, "to": hi})
        want = model.rows(dev, lo, hi)
        if got != want:
            missing = sorted(set(want) - set(got))[:5]
            extra = sorted(set(got) - set(want))[:5]
            raise AssertionError("%s: range [%d, %d) of %s: %d rows, want %d; missing %r "
                                 "extra %r" % (what, lo, hi, dev, len(got), len(want),
                                               missing, extra))


def sizes(parts):
    return [(p["start"], p["end"] - p["start"], p["bucket"]) for p in parts]


def expect_partitions(s, dev, lo, hi, spec):
    """spec: list of (start, size_ms, count) runs."""
    want = []
    for start, size, count in spec:
        names = {10 * MIN: "10m", 15 * MIN: "15m", HOUR: "1h", 6 * HOUR: "6h", DAY: "1d"}
        for i in range(count):
            want.append((start + i * size, size, names[size]))
    eq(sizes(s.partitions(dev, **{"from": lo, "to": hi})), want, "partitions of %s" % dev)


@suite.test
def profile_changes_never_hide_data():
    m = Model()
    dev = "bk"
    with Server() as s:
        info = s.set_bucket(dev, "1h")
        eq((info["bucket"], info["pinned"]), ("1h", True))
        # Phase 1: 1h buckets, T0 .. T0+3h, every 5 minutes, two metrics.
        pts = []
        for t in range(T0, T0 + 3 * HOUR, 5 * MIN):
            pts += [(dev, "env.temp", t, (t - T0) / MIN), (dev, "env.hum", t, 50)]
        write_points(s, m, pts)
        # Change to 15m: effective at the end of the newest event's 1h bucket (T0+3h).
        info = s.set_bucket(dev, "15m")
        eq(info["bucket"], "15m")
        # Phase 2: T0+3h .. T0+4h30m every minute, plus late data into phase 1.
        pts = [(dev, "env.temp", t, (t - T0) / MIN) for t in range(T0 + 3 * HOUR,
                                                                   T0 + 4 * HOUR + 30 * MIN, MIN)]
        pts += [(dev, "env.temp", T0 + HOUR + 2 * MIN, -1), (dev, "env.late", T0 + 17, 1)]
        write_points(s, m, pts)
        expect_partitions(s, dev, T0, T0 + 5 * HOUR,
                          [(T0, HOUR, 3), (T0 + 3 * HOUR, 15 * MIN, 8)])
        # Change to 6h: the newest event is at 4h29m, its 15m bucket ends at 4h30m, and
        # the first 6h boundary at or after that is T0+6h.
        s.set_bucket(dev, "6h")
        pts = [(dev, "env.temp", t, (t - T0) / MIN) for t in range(T0 + 4 * HOUR + 30 * MIN,
                                                                   T0 + 20 * HOUR, 10 * MIN)]
        pts.append((dev, "env.hum", T0 + 3 * HOUR + 7 * MIN, 99))  # late, into a 15m bucket
        write_points(s, m, pts)
        expect_partitions(s, dev, T0, T0 + DAY,
                          [(T0, HOUR, 3), (T0 + 3 * HOUR, 15 * MIN, 12), (T0 + 6 * HOUR,
                                                                          6 * HOUR, 3)])
        d = s.device(dev)
        eq((d["bucket"], d["pinned"]), ("6h", True))
        eq(d["samples"], sum(1 for k in m.data), "samples (no duplicates were written)")

        boundaries = [T0, T0 + 3 * HOUR, T0 + 6 * HOUR, T0 + 20 * HOUR]
        ranges = [(T0 - DAY, T0 + 2 * DAY),  # everything
                  (T0 + 2 * HOUR + 59 * MIN, T0 + 3 * HOUR + 1),  # across 1h -> 15m
                  (T0 + 5 * HOUR, T0 + 7 * HOUR),  # across 15m -> 6h
                  (T0 + 30 * MIN, T0 + 13 * HOUR + 1),  # across both
                  (T0 + 3 * HOUR + 7 * MIN, T0 + 3 * HOUR + 8 * MIN),  # one late sample
                  (T0 + 17, T0 + 18)]
        ranges += [(b - 1, b + 1) for b in boundaries]
        check_ranges(s, m, dev, ranges, "head")
        # Desc with a limit across the change points.
        got = s.values(device=dev, metric="env.temp", order="desc", limit=40,
                       **{"from": T0, "to": T0 + 7 * HOUR})
        want = m.rows(dev, T0, T0 + 7 * HOUR, {"env.temp"})
        eq(got, list(reversed(want))[:40], "desc limit 40")

        s.flush()
        check_ranges(s, m, dev, ranges, "after flush")
        # Overwrite samples on both sides of each change, in blocks now.
        pts = [(dev, "env.temp", t, 1000 + i) for i, t in enumerate(
            [T0, T0 + 2 * HOUR + 55 * MIN, T0 + 3 * HOUR, T0 + 5 * HOUR + 50 * MIN,
             T0 + 6 * HOUR, T0 + 19 * HOUR + 50 * MIN])]
        write_points(s, m, pts)
        check_ranges(s, m, dev, ranges, "overwrites over blocks")
        s.restart()
        check_ranges(s, m, dev, ranges, "after restart")
        expect_partitions(s, dev, T0, T0 + DAY,
                          [(T0, HOUR, 3), (T0 + 3 * HOUR, 15 * MIN, 12), (T0 + 6 * HOUR,
                                                                          6 * HOUR, 3)])
        s.flush()
        check_ranges(s, m, dev, ranges, "after restart and flush")
        eq(s.device(dev)["bucket"], "6h")


@suite.test
def profile_history_survives_kill9():
    """The history lives in the WAL until a flush: replay must rebuild it exactly."""
    m = Model()
    dev = "k9"
    with Server() as s:
        s.set_bucket(dev, "1h")
        write_points(s, m, [(dev, "a.v", t, t % 97) for t in range(T0, T0 + 2 * HOUR, MIN)])
        s.set_bucket(dev, "15m")  # effective T0+2h
        write_points(s, m, [(dev, "a.v", t, t % 89) for t in range(T0 + 2 * HOUR,
                                                                    T0 + 3 * HOUR, MIN)])
        s.set_bucket(dev, "1d")  # newest 2h59m -> 15m bucket ends 3h -> first day T0+1d
        write_points(s, m, [(dev, "a.v", t, 5) for t in range(T0 + DAY, T0 + DAY + HOUR, MIN)])
        spec = [(T0, HOUR, 2), (T0 + 2 * HOUR, 15 * MIN, 88), (T0 + DAY, DAY, 1)]
        expect_partitions(s, dev, T0, T0 + 2 * DAY, spec)
        before = s.values(device=dev, **{"from": T0, "to": T0 + 2 * DAY})
        eq(before, m.rows(dev, T0, T0 + 2 * DAY))
        s.kill()
        s.start()
        expect_partitions(s, dev, T0, T0 + 2 * DAY, spec)
        eq(s.values(device=dev, **{"from": T0, "to": T0 + 2 * DAY}), before, "after kill -9")
        d = s.device(dev)
        eq((d["bucket"], d["pinned"]), ("1d", True))
        # Back to auto: the device is unpinned and keeps its history.
        s.set_bucket(dev, "auto")
        eq(s.device(dev)["pinned"], False)
        eq(s.values(device=dev, **{"from": T0, "to": T0 + 2 * DAY}), before)
        r = s.request("PUT", "/api/v1/devices/k9/profile?bucket=7m")
        eq(r.status, 400)


@suite.test
def pending_change_is_replaced_not_stacked():
    dev = "pend"
    with Server() as s:
        s.set_bucket(dev, "1h")
        s.write("m,device=pend v=1 %d" % (T0 + 10 * MIN), precision="ms")
        s.set_bucket(dev, "15m")  # pending from T0+1h (no event there yet)
        s.set_bucket(dev, "6h")  # replaces it: from the first 6h boundary after T0+1h
        expect_partitions(s, dev, T0, T0 + 12 * HOUR, [(T0, HOUR, 6), (T0 + 6 * HOUR,
                                                                      6 * HOUR, 1)])
        s.set_bucket(dev, "1h")  # back to the size in force: no change at all
        expect_partitions(s, dev, T0, T0 + 3 * HOUR, [(T0, HOUR, 3)])
        s.write("m,device=pend v=2 %d" % (T0 + 5 * HOUR), precision="ms")
        eq(s.values(device=dev, **{"from": T0, "to": T0 + DAY}),
           [(T0 + 10 * MIN, "m.v", 1), (T0 + 5 * HOUR, "m.v", 2)])


@suite.test
def learned_bucket_changes_never_hide_data():
    """A device that reports fast (2/s) then slowly (1 per 2 min) changes class and
    bucket on its own; every sample stays visible."""
    m = Model()
    dev = "auto"
    with Server() as s:
        pts = [(dev, "r.x", T0 + i * 500, i % 1000) for i in range(40 * 60 * 2)]  # 40 min
        t_fast_end = T0 + 40 * MIN
        pts += [(dev, "r.x", t, 7) for t in range(t_fast_end, t_fast_end + 14 * HOUR, 2 * MIN)]
        write_points(s, m, pts, chunk=4000)
        d = s.device(dev)
        check(d["bucket_changes"] >= 2, "learned changes: %r" % d)
        eq(d["pinned"], False)
        parts = s.partitions(dev, **{"from": T0, "to": T0 + DAY})
        seen = set(p["bucket"] for p in parts)
        check("15m" in seen and "6h" in seen, "sizes learned: %r" % sizes(parts))
        # Partitions tile the range: contiguous, no overlap, each aligned to its size.
        for a, b in zip(parts, parts[1:]):
            eq(a["end"], b["start"], "contiguous partitions")
        for p in parts:
            size = p["end"] - p["start"]
            eq(p["start"] % size, 0, "partition %r aligned" % p)
        ranges = [(T0 - HOUR, T0 + 2 * DAY), (T0 + 20 * MIN, T0 + 5 * HOUR)]
        ranges += [(p["start"] - 1000, p["start"] + 1000) for p in parts[::3]]
        check_ranges(s, m, dev, ranges, "learned, head")
        s.flush()
        s.restart()
        check_ranges(s, m, dev, ranges, "learned, after flush and restart")
        eq(sizes(s.partitions(dev, **{"from": T0, "to": T0 + DAY})), sizes(parts))


@suite.test
def learned_class_survives_a_restart():
    """A device's learned reporting class is kept across restarts (issue 18: it was
    "unknown" again after one): a clean restart, and kill -9 after a flush."""
    with Server() as s:
        s.write(["m,device=slow v=%d %d" % (i, T0 + i * 5 * MIN) for i in range(36)],
                precision="ms")
        eq(s.device("slow")["class"], "low")
        s.restart()
        eq(s.device("slow")["class"], "low", "after a restart")
        s.flush()
        s.kill()
        s.start()
        eq(s.device("slow")["class"], "low", "after kill -9 and a restart")


@suite.test
def a_fleet_of_new_devices_is_not_a_line_each():
    """60 new devices learnt at once: at most 20 "reporting class" lines a minute at
    the default level (XL wrote a million for a million devices), every change still
    counted in bucketdb_bucket_changes_total and shown by each device."""
    n = 60
    with Server() as s:
        lines = ["m,device=f%02d v=%d %d" % (d, i, T0 + i * 5 * MIN)
                 for i in range(36) for d in range(n)]
        s.write(lines, precision="ms")
        for d in (0, n // 2, n - 1):
            eq(s.device("f%02d" % d)["class"], "low")
        said = [ln for ln in s.log().splitlines() if "reporting class" in ln]
        check(1 <= len(said) <= 20, "%d class lines at INFO: %r" % (len(said), said[:3]))
        changes = [ln for ln in s.metrics_text().splitlines()
                   if ln.startswith("bucketdb_bucket_changes_total ")]
        eq(len(changes), 1, "bucket_changes_total exported")
        eq(int(float(changes[0].split()[1])), n, "every change counted")


@suite.test
def out_of_order_and_duplicates_latest_write_wins():
    m = Model()
    dev = "ooo"
    with Server(args=["--block-window-ms", "1h"]) as s:
        # One body: out of order, with a duplicate timestamp (the later line wins).
        body = [lp(dev, "x.v", T0 + 3000, 3), lp(dev, "x.v", T0 + 1000, 1),
                lp(dev, "x.v", T0 + 2000, 2), lp(dev, "x.v", T0 + 1000, 11),
                lp(dev, "x.v", T0 + 2 * HOUR, 20)]
        s.write(body, precision="ms")
        for p in [(dev, "x.v", T0 + 3000, 3), (dev, "x.v", T0 + 1000, 11),
                  (dev, "x.v", T0 + 2000, 2), (dev, "x.v", T0 + 2 * HOUR, 20)]:
            m.put(*p)
        rng = (T0 - DAY, T0 + DAY)
        check_ranges(s, m, dev, [rng], "one body")
        # Across requests, still in the head.
        write_points(s, m, [(dev, "x.v", T0 + 2000, 22), (dev, "x.v", T0 + 500, 5)])
        check_ranges(s, m, dev, [rng], "head duplicates")
        s.flush()
        check_ranges(s, m, dev, [rng], "after first flush")
        # Overwrite flushed samples (head over block), add older ones, flush again.
        write_points(s, m, [(dev, "x.v", T0 + 1000, 111), (dev, "x.v", T0 + 2 * HOUR, 200),
                            (dev, "x.v", T0 - HOUR, -1), (dev, "x.v", T0 + 3000, 33)])
        check_ranges(s, m, dev, [rng], "head over block")
        s.flush()
        check_ranges(s, m, dev, [rng], "after second flush")
        # And a third layer, then kill -9: the WAL brings back the newest values.
        write_points(s, m, [(dev, "x.v", T0 + 1000, 1111), (dev, "x.v", T0 + 500, 55)])
        s.kill()
        s.start()
        check_ranges(s, m, dev, [rng], "after kill -9")
        s.flush()
        s.restart()
        check_ranges(s, m, dev, [rng], "after flush and restart")
        eq(s.values(device=dev, **{"from": T0 + 1000, "to": T0 + 1001}),
           [(T0 + 1000, "x.v", 1111)])
        # Duplicate timestamps across a metric list stay one row per metric.
        write_points(s, m, [(dev, "x.w", T0 + 1000, 9)])
        eq(s.values(device=dev, **{"from": T0 + 1000, "to": T0 + 1001}),
           [(T0 + 1000, "x.v", 1111), (T0 + 1000, "x.w", 9)])


suite.main()
