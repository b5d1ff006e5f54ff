#!/usr/bin/env python3
"""PromQL answers equal to the real Prometheus' for the same samples.

The same counter and gauge samples (two devices, irregular intervals, counter resets,
a gap longer than the 5 minute lookback) are written to bucketdb and backfilled into
a Prometheus data directory with `promtool tsdb create-blocks-from openmetrics`
(Debian's `prometheus` package, installed by scripts/setup.sh --test); Prometheus is
then started on that directory. Each expression of EXPRS is asked of both as an
instant query at several times and as a range query, and the answers must have the
same result type, the same series (label sets) and the same points, values equal
within a relative 1e-9. Missing prometheus or promtool is a failure that says how
to install them, never a skip. The equality covers PromQL's semantics, not the
storage backend: the data is written once, read back through the same query path
on every backend.
"""

import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import ON_CASSANDRA, Server, Suite, TestFailure, check, eq, tmpdir  # noqa: E402

suite = Suite("promql_equality")
WAIT = float(os.environ.get("BDB_PROM_WAIT", "45"))  # bound of every wait
HINT = ("run scripts/setup.sh --test, which installs Debian's 'prometheus' package "
        "(apt-get install prometheus)")
# seconds: three days ago, 20 s past an hour; recent enough for the 1m rollup tier
# (kept 90 days against the wall clock) to hold the data
T0 = (int(time.time()) // 3600 - 72) * 3600 + 20

EXPRS = [
    "1+1",
    "2 * 3 - 1",
    "env_temp",
    "env_cnt",
    'env_temp{device="d1"}',
    'env_temp{site=~"a|b"}',
    'env_temp{device!="d1"}',
    '{__name__=~"env_.*", device="d2"}',
    "env_temp offset 1m",
    "rate(env_cnt[1m])",
    "rate(env_cnt[5m])",
    "increase(env_cnt[2m])",
    "increase(env_cnt[10m])",
    "rate(env_cnt[3m] offset 2m)",
    "avg_over_time(env_temp[2m])",
    "min_over_time(env_temp[2m])",
    "max_over_time(env_temp[5m])",
    "sum_over_time(env_temp[90s])",
    "count_over_time(env_temp[3m])",
    "last_over_time(env_temp[4m])",
    "quantile_over_time(0.9, env_temp[5m])",
    "quantile_over_time(0.5, env_cnt[2m])",
    "sum(env_temp)",
    "sum by (site) (env_temp)",
    "avg by (site) (rate(env_cnt[5m]))",
    "max without (device) (env_temp)",
    "min(env_temp)",
    "count(env_cnt)",
    "min by (site) (env_temp)",
    "count by (site) (avg_over_time(env_temp[5m]))",
    "sum(increase(env_cnt[5m])) by (site)",
    "env_temp * 2 + 1",
    "-env_temp",
    "100 / env_temp",
    "env_temp % 7",
    "env_temp ^ 2",
    "avg(rate(env_cnt[2m]))",
    "sum without (site) (env_temp)",
    "count_over_time(env_temp[1h])",
    "avg_over_time(env_temp[1h])",
    "max_over_time(env_cnt[1h])",
    "min_over_time(env_cnt[1h])",
    # binary operators between two vectors, comparisons, set operators
    "env_temp - env_cnt",
    "env_cnt % env_temp",
    "sum(env_temp) / count(env_temp)",
    "env_temp / on(device) env_cnt",
    "env_temp / ignoring(site) env_cnt",
    "rate(env_cnt[5m]) / on(device, site) env_temp",
    "env_temp > 22",
    "env_temp > bool 22",
    "22 < env_temp",
    "30 - env_temp <= 8",
    "1 < bool 2",
    "env_temp >= env_cnt",
    "env_temp == bool env_temp",
    "env_temp != on(device) group_left env_cnt",
    "env_temp and env_cnt > 100",
    "env_temp or env_cnt",
    "env_temp offset 10m or env_temp",
    "env_temp unless env_cnt > 150",
    "env_temp and on(site) env_cnt offset 5m",
    "env_temp * on(site) group_left sum by (site) (env_cnt)",
    "sum by (site) (env_cnt) - on(site) group_right env_temp",
    "env_cnt * on(device) group_left(site) max by (device, site) (env_temp)",
    "env_temp + on() group_left sum(env_temp)",
    "2 ^ 3 ^ 2 - env_temp % 3 * 2",
    "-env_temp ^ 2 + env_cnt / 2 > bool 100 or env_temp",
]


def tool(name):
    path = shutil.which(name) or ("/usr/bin/" + name if os.path.exists("/usr/bin/" + name)
                                  else None)
    if not path:
        raise TestFailure("%s not found: %s" % (name, HINT))
    return path


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def samples():
    """[(name, labels, t_ms, value)]: d1 every ~15 s, d2 every ~20 s with a 7 minute gap;
    the counters reset (d1 twice, d2 once)."""
    out = []
    cnt = 0.0
    t = T0 * 1000
    for i in range(120):
        t += 15000 + (i * 37) % 900  # irregular intervals
        cnt = cnt + 3 + i % 4 if i not in (40, 85) else 2.0
        out.append(("temp", {"device": "d1", "site": "a"}, t, 20 + (i * 7) % 11 + 0.25))
        out.append(("cnt", {"device": "d1", "site": "a"}, t, cnt))
    cnt = 0.0
    t = T0 * 1000 + 5000
    for i in range(80):
        t += 20000 + (i * 53) % 1500
        if i == 50:
            t += 7 * 60000  # a gap: instant selectors go stale
        cnt = cnt + 1.5 * (1 + i % 3) if i != 30 else 0.5
        out.append(("temp", {"device": "d2", "site": "b"}, t, 15 + (i * 5) % 13 - 0.5))
        out.append(("cnt", {"device": "d2", "site": "b"}, t, cnt))
    return out


def fmt(v):
    return repr(float(v))


class Prometheus:
    """prometheus on a backfilled data directory, 127.0.0.1 only."""

    def __init__(self, data):
        self.dir = tmpdir("bdbpromeq-")
        self.data = data
        self.proc = None
        self.log_path = os.path.join(self.dir, "prometheus.log")

    def backfill(self, rows):
        om = os.path.join(self.dir, "data.om")
        with open(om, "w") as f:
            for name in ("env_temp", "env_cnt"):  # OpenMetrics: a metric's lines together
                for n, labels, t, v in rows:
                    if "env_" + n != name:
                        continue
                    ls = ",".join('%s="%s"' % kv for kv in sorted(labels.items()))
                    f.write("%s{%s} %s %.3f\n" % (name, ls, fmt(v), t / 1000.0))
            f.write("# EOF\n")
        r = subprocess.run([tool("promtool"), "tsdb", "create-blocks-from", "openmetrics", om,
                            self.data], capture_output=True, timeout=120)
        if r.returncode != 0:
            raise TestFailure("promtool backfill failed: %s" % r.stderr.decode()[-2000:])

    def start(self):
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1h\n")
        for _ in range(3):  # the port is picked free, but may be taken meanwhile
            self.port = free_port()
            cmd = [tool("prometheus"), "--config.file=" + config,
                   "--storage.tsdb.path=" + self.data,
                   "--web.listen-address=127.0.0.1:%d" % self.port,
                   "--storage.tsdb.retention.time=10y", "--log.level=warn"]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen(self.url("/-/ready"), timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
                time.sleep(0.1)
            self.stop()
        raise TestFailure("prometheus did not become ready:\n" + self.log())

    def url(self, path, **params):
        q = urllib.parse.urlencode(params)
        return "http://127.0.0.1:%d%s%s" % (self.port, path, "?" + q if q else "")

    def get(self, path, **params):
        try:
            with urllib.request.urlopen(self.url(path, **params), timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return json.loads(e.read())

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None


def canon(doc):
    """(resultType, {labels: [(t, value)]}) of a query answer."""
    eq(doc.get("status"), "success", "answer %r" % (doc,))
    d = doc["data"]
    rt = d["resultType"]
    if rt == "scalar":
        return rt, {(): [(d["result"][0], d["result"][1])]}
    series = {}
    for r in d["result"]:
        key = tuple(sorted(r["metric"].items()))
        check(key not in series, "two series with labels %r" % (key,))
        series[key] = [tuple(r["value"])] if "value" in r else [tuple(p) for p in r["values"]]
    return rt, series


def same(a, b):
    x, y = float(a), float(b)
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))


POINTS = [0]  # points compared, so that a run comparing empty answers fails


def compare(what, ours, theirs):
    ot, os_ = canon(ours)
    tt, ts = canon(theirs)
    eq(ot, tt, "%s: result type" % what)
    eq(sorted(os_), sorted(ts), "%s: series" % what)
    for k in ts:
        p, q = os_[k], ts[k]
        eq([t for t, _ in p], [t for t, _ in q], "%s %r: timestamps" % (what, k))
        POINTS[0] += len(q)
        for (t, a), (_, b) in zip(p, q):
            check(same(a, b), "%s %r at %s: bucketdb %s, Prometheus %s" % (what, k, t, a, b))


@suite.test
def promql_equals_prometheus():
    tool("prometheus")
    tool("promtool")
    rows = samples()
    prom = Prometheus(None)
    prom.data = os.path.join(prom.dir, "data")
    prom.backfill(rows)
    with Server() as s:
        lines = ["env,device=%s,site=%s %s=%s %d" % (lb["device"], lb["site"], n, fmt(v), t)
                 for n, lb, t, v in rows]
        for i in range(0, len(lines), 200):
            s.write(lines[i:i + 200], precision="ms")
        try:
            prom.start()
            last = max(t for _, _, t, _ in rows) // 1000
            times = [T0 + 100, T0 + 600.5, T0 + 1234.567, T0 + 1700, T0 + 2000, last,
                     last + 200, last + 400]
            # minute-aligned steps of whole minutes: *_over_time over whole minutes is
            # answered from the 1m tier (no sample lies exactly on a minute)
            a0 = T0 - T0 % 60
            check(all(t % 60000 for _, _, t, _ in rows), "a sample on a minute boundary")
            times += [a0 + 600, a0 + 1800]
            # and whole hours at hour-aligned steps: the 1h tier
            h0 = T0 - T0 % 3600
            times += [h0 + 3600]
            ranges = [(T0, last + 400, 30), (T0 + 61.5, T0 + 1500, 47), (T0, last, 300),
                      (a0, a0 + 2400, 60), (a0 + 120, a0 + 2400, 180),
                      (h0, h0 + 3 * 3600, 3600)]
            for e in EXPRS:
                for t in times:
                    ours = s.get("/prometheus/api/v1/query", query=e, time=t).json()
                    theirs = prom.get("/api/v1/query", query=e, time=t)
                    compare("%s @%s" % (e, t), ours, theirs)
                for a, b, step in ranges:
                    theirs = prom.get("/api/v1/query_range", query=e, start=a, end=b, step=step)
                    # three times: the third answer comes from kept steps (the group
                    # cache, docs/PROMQL.md#query-cache) where the query reads enough
                    for rep in range(3):
                        ours = s.get("/prometheus/api/v1/query_range", query=e, start=a, end=b,
                                     step=step).json()
                        compare("%s [%s..%s/%s] #%d" % (e, a, b, step, rep + 1), ours, theirs)
            check(POINTS[0] > 5000, "only %d points compared" % POINTS[0])
            hits = [ln for ln in s.get("/metrics").text.splitlines()
                    if ln.startswith("bucketdb_group_cache_hits_total ")]
            check(hits and int(hits[0].split()[1]) > 20 or ON_CASSANDRA,
                  "range queries answered from kept steps: %r" % hits)
            # a raw range selector at an instant: the samples themselves
            for t in times[:4]:
                compare("env_cnt[2m] @%s" % t,
                        s.get("/prometheus/api/v1/query", query="env_cnt[2m]", time=t).json(),
                        prom.get("/api/v1/query", query="env_cnt[2m]", time=t))
            # the same refusals: Prometheus' error JSON and status class
            for q, status in (("rate(env_cnt)", 400), ("sum(env_cnt[5m])", 400),
                              ("env_cnt{", 400), ("{}", 400),
                              ('rate({__name__=~"env_.*"}[5m])', 422),
                              ('-{__name__=~"env_.*"}', 422),
                              ('env_temp + {__name__=~"env_.*"}', 422),
                              ('{__name__=~"env_.*"} + env_temp', 422),
                              ("env_temp * on() group_left env_cnt", 422),
                              ('{__name__=~"env_.*"} * on(site) group_left sum by (site) (env_cnt)', 422),
                              ("1 > 2", 400), ("env_temp and 1", 400),
                              ("env_temp + bool env_cnt", 400),
                              ("env_temp + on(site) 2", 400),
                              ("env_temp or on(site) group_left env_cnt", 400)):
                ours = s.get("/prometheus/api/v1/query", query=q, time=T0 + 600)
                theirs = prom.get("/api/v1/query", query=q, time=T0 + 600)
                eq(ours.status, status, "%s: status (%r)" % (q, ours.body[:200]))
                eq(ours.json()["errorType"], theirs["errorType"], "%s: errorType" % q)
                if status == 422:
                    eq(ours.json()["error"], theirs["error"], "%s: error" % q)
            # query_range's step limit: (end - start) / step up to 11,000, not beyond
            compare("11,001 points",
                    s.get("/prometheus/api/v1/query_range", query="env_cnt", start=T0,
                          end=T0 + 11000, step=1).json(),
                    prom.get("/api/v1/query_range", query="env_cnt", start=T0, end=T0 + 11000,
                             step=1))
            ours = s.get("/prometheus/api/v1/query_range", query="env_cnt", start=T0,
                         end=T0 + 11001, step=1)
            theirs = prom.get("/api/v1/query_range", query="env_cnt", start=T0, end=T0 + 11001,
                              step=1)
            eq(ours.status, 400)
            eq(ours.json()["error"], theirs["error"], "11,000 points message")
        except TestFailure:
            print(prom.log()[-3000:])
            raise
        finally:
            prom.stop()


if __name__ == "__main__":
    suite.main()
