#!/usr/bin/env python3
"""The PromQL API under /prometheus (docs/PROMQL.md) against a server.

- grafana_replay: the requests of Grafana's Prometheus data source in
  tests/fixtures/grafana/prometheus.json (health check, buildinfo, labels, label
  values, series, metadata, query_range panels; and the data source URL set to the
  server root) answer with the status and the shape Grafana expects.
- The mapping: metric "env.temp" is env_temp, device and tags are labels, a tag key
  that would clash gets tag_, two metrics of a device mapping to one name are told
  apart by bdb_metric.
- Tenants: a query sees only its tenant's series (tenant parameter, tenant token);
  a token naming another tenant is refused.
- Errors in Prometheus' JSON: bad times, steps and ranges, unknown endpoints, the
  max-query-samples limit (422 execution), POST without a form.
- The native GET /api/v1/query: Prometheus' parameters get Prometheus' error JSON
  naming /prometheus; native queries are unchanged.
- The same answers after the head is flushed to blocks (or to Cassandra).
"""

import json
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq  # noqa: E402

suite = Suite("promql")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "grafana", "prometheus.json")
T0 = 1700000000
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def write_env(s, **params):
    """d1 (site a) and d2 (site b): env.temp and env.cnt every 15 s for 20 minutes."""
    lines = []
    for i in range(80):
        t = (T0 + i * 15) * 1000
        lines.append("env,device=d1,site=a temp=%d,cnt=%d %d" % (20 + i % 7, i * 4, t))
        lines.append("env,device=d2,site=b temp=%d,cnt=%d %d" % (30 + i % 3, i * 2, t + 5000))
    s.write(lines, precision="ms", **params)


def prom(s, path, expect=200, headers=None, **params):
    r = s.request("GET", "/prometheus/api/v1/" + path + "?" + urllib.parse.urlencode(params),
                  headers=headers)
    eq(r.status, expect, "%s %r (%r)" % (path, params, r.body[:300]))
    doc = r.json()
    eq(doc["status"], "success" if expect == 200 else "error", path)
    return doc


@suite.test
def grafana_replay():
    with open(FIXTURE) as f:
        fx = json.load(f)
    with Server() as s:
        write_env(s)
        for rq in fx["requests"]:
            what = rq["name"]
            path = ("" if rq.get("root") else fx["data_source_url"]) + rq["path"]
            if rq["method"] == "POST":
                r = s.request("POST", path, urllib.parse.urlencode(rq["form"]), FORM)
            else:
                r = s.request("GET", path + ("?" + urllib.parse.urlencode(rq["params"])
                                             if rq.get("params") else ""))
            x = rq["expect"]
            eq(r.status, x["status"], "%s (%r)" % (what, r.body[:300]))
            eq(r.headers.get("content-type"), "application/json", what)
            doc = r.json()
            if x["status"] != 200:
                eq(doc["status"], "error", what)
                eq(doc["errorType"], x["errorType"], what)
                check(isinstance(doc["error"], str) and doc["error"], what)
                if "error_contains" in x:
                    contains(doc["error"], x["error_contains"], what)
                continue
            eq(doc["status"], "success", what)
            data = doc["data"]
            if "resultType" in x:
                eq(data["resultType"], x["resultType"], what)
            if "scalar" in x:
                eq(len(data["result"]), 2, what)
                check(isinstance(data["result"][0], (int, float)), what)
                eq(data["result"][1], x["scalar"], what)
            if "data_keys" in x:
                eq(sorted(data), sorted(x["data_keys"]), what)
            if "data_list" in x:
                eq(data, x["data_list"], what)
            if "series_count" in x:
                res = data["result"] if isinstance(data, dict) else data
                eq(len(res), x["series_count"], what)
            if "points_per_series" in x:
                for ser in data["result"]:
                    eq(len(ser["values"]), x["points_per_series"], what)
                    for t, v in ser["values"]:
                        check(isinstance(t, (int, float)) and isinstance(v, str), what)
                        float(v)
            if x.get("resultType") == "vector":
                for ser in data["result"]:
                    check(isinstance(ser["metric"], dict) and len(ser["value"]) == 2, what)


@suite.test
def mapping_of_names_and_tags():
    with Server() as s:
        t = T0 * 1000
        s.write(["env,device=m1,site=x temp=1 %d" % t,
                 "env,device=m1,site=x temp_c=9 %d" % t,  # "env.temp_c"
                 "a.b,device=m2,__x=1,device2=z v=2 %d" % t,
                 "a_b,device=m2 v=3 %d" % t,  # "a_b.v" vs "a.b.v": both a_b_v
                 "9lives,device=m3 v=4 %d" % t], precision="ms")
        names = prom(s, "label/__name__/values")["data"]
        eq(names, ["_9lives_v", "a_b_v", "env_temp", "env_temp_c"])
        r = prom(s, "query", query="a_b_v", time=T0 + 1)["data"]["result"]
        got = sorted((x["metric"].get("bdb_metric"), x["value"][1]) for x in r)
        eq(got, [("a.b.v", "2"), ("a_b.v", "3")])
        m = [x["metric"] for x in r if x["metric"]["bdb_metric"] == "a.b.v"][0]
        eq(m["tag___x"], "1")  # a reserved "__" name gets tag_
        eq(m["device2"], "z")
        eq(m["device"], "m2")
        r = prom(s, "query", query="env_temp", time=T0 + 1)["data"]["result"]
        eq(r, [{"metric": {"__name__": "env_temp", "device": "m1", "site": "x"},
                "value": [T0 + 1, "1"]}])
        # the metric name also matches by regex, and label values list per label
        r = prom(s, "query", query='{__name__=~"env_.*"}', time=T0 + 1)["data"]["result"]
        eq(len(r), 2)
        eq(prom(s, "label/site/values")["data"], ["x"])
        series = prom(s, "series", **{"match[]": '{device="m2"}'})["data"]
        eq(len(series), 2)
        # device="x" reads that device alone: with the other matchers still applied,
        # a device that does not exist is no series, "" matches no device label
        def q(sel):
            return prom(s, "query", query=sel, time=T0 + 1)["data"]["result"]
        eq([x["metric"]["device"] for x in q('env_temp{device="m1"}')], ["m1"])
        eq(q('env_temp{device="m1", site="y"}'), [])
        eq(q('env_temp{device="nosuch"}'), [])
        eq(q('env_temp{device=""}'), [])
        eq(len(q('{device="m2", __name__=~"a_b_v"}')), 2)


@suite.test
def tenants_are_apart():
    with Server() as s:
        write_env(s, db="north")
        s.write("env,device=s1 temp=5 %d" % (T0 * 1000), precision="ms", db="south")
        r = prom(s, "query", query="env_temp", time=T0 + 60, tenant="south")["data"]["result"]
        eq([x["metric"]["device"] for x in r], ["s1"])
        r = prom(s, "query", query="env_temp", time=T0 + 60, db="north")["data"]["result"]
        eq(sorted(x["metric"]["device"] for x in r), ["d1", "d2"])
        eq(prom(s, "label/device/values", tenant="south")["data"], ["s1"])
        # a registered tenant: its token decides, naming another tenant is refused
        r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": "acme"}),
                      {"Authorization": "Token " + s.token})
        eq(r.status, 201, "create tenant (%r)" % r.body[:200])
        acme = {"Authorization": "Bearer " + r.json()["token"]}
        s.request("POST", "/write?precision=ms", "env,device=a1 temp=7 %d" % (T0 * 1000), acme)
        r = prom(s, "query", headers=acme, query="env_temp", time=T0 + 60)["data"]["result"]
        eq([x["metric"]["device"] for x in r], ["a1"])
        r = s.request("GET", "/prometheus/api/v1/query?query=env_temp&tenant=north", headers=acme)
        eq(r.status, 403)
        # without its token, the registered tenant's data is not readable
        r = s.get("/prometheus/api/v1/query", query="env_temp", tenant="acme")
        eq(r.status, 401)


@suite.test
def errors_have_prometheus_shape():
    with Server(args=["--max-query-samples", "50"]) as s:
        write_env(s)
        cases = [
            ("query", {"query": "env_temp", "time": "yesterday"}, 400, "bad_data",
             'invalid parameter "time"'),
            ("query", {}, 400, "bad_data", "no expression found"),
            ("query", {"query": "rate(env_cnt)"}, 400, "bad_data", "expected type range vector"),
            ("query", {"query": "irate(env_cnt[1m])"}, 400, "bad_data", "irate"),
            ("query", {"query": 'env_temp{a=~"("}'}, 400, "bad_data",
             "invalid regular expression"),
            ("query_range", {"query": "1", "start": T0, "end": T0 - 1, "step": 1}, 400,
             "bad_data", "end timestamp must not be before start time"),
            ("query_range", {"query": "1", "start": T0, "end": T0 + 60, "step": 0}, 400,
             "bad_data", "zero or negative query resolution step"),
            ("query_range", {"query": "1", "start": T0, "end": T0 + 60, "step": "fast"}, 400,
             "bad_data", 'invalid parameter "step"'),
            ("query_range", {"query": "1", "end": T0 + 60, "step": 1}, 400, "bad_data",
             'invalid parameter "start"'),
            ("query_range", {"query": "1", "start": T0, "end": T0 + 20000, "step": 1}, 400,
             "bad_data", "exceeded maximum resolution of 11,000 points"),
            ("query_range", {"query": "env_temp", "start": T0, "end": T0 + 1200, "step": 15},
             422, "execution", "max-query-samples 50"),
            ("series", {}, 400, "bad_data", "no match[] parameter provided"),
            ("series", {"match[]": "rate(x[5m])"}, 400, "bad_data", "vector selector"),
            ("query", {"query": "1", "time": "1e300"}, 400, "bad_data", "valid timestamp"),
            ("status/config", {}, 404, "not_found", "not part of bucketdb's Prometheus API"),
            ("targets", {}, 404, "not_found", "not part of bucketdb's Prometheus API"),
        ]
        for path, params, status, etype, msg in cases:
            doc = prom(s, path, expect=status, **params)
            eq(doc["errorType"], etype, "%s %r" % (path, params))
            contains(doc["error"], msg, "%s %r" % (path, params))
        # RFC 3339 times and duration steps are accepted, as by Prometheus
        doc = prom(s, "query_range", query="1", start="2023-11-14T22:13:20Z",
                   end="2023-11-14T22:14:20.000Z", step="30s")
        eq([p[0] for p in doc["data"]["result"][0]["values"]], [T0, T0 + 30, T0 + 60])
        r = s.request("POST", "/prometheus/api/v1/query", "query=1", {"Content-Type": "text/plain"})
        eq(r.status, 405)
        eq(r.json()["status"], "error")


@suite.test
def extreme_parameters_never_5xx():
    """Times, steps, ranges and offsets at and past their limits: 200 or 400, never a
    5xx (and, under the sanitizers, no overflow anywhere in between)."""
    times = ["-9223372036854775808", "9223372036854775807", "-9223372036.854", "9223372036.854",
             "-9223372036.855", "9223372036.855", "1e18", "-1e18", "0", "-0.0001", "nan",
             "inf", "0x10", " 1", "1677-09-21T00:12:43.146Z", "2262-04-11T23:47:16.854Z",
             "9999-12-31T23:59:59Z", ""]
    steps = ["1", "0.001", "0.0001", "3153600000", "3153600001", "100y", "101y", "1e300", "-1"]
    exprs = ["env_temp", "rate(env_cnt[100y] offset 100y)", "env_temp offset -100y",
             "count_over_time(env_temp[1d] offset 1d)", "sum(env_temp) ^ 1e308"]
    with Server() as s:
        write_env(s)
        n = 0
        for e in exprs:
            for t in times:
                r = s.get("/prometheus/api/v1/query", query=e, time=t)
                check(r.status in (200, 400), "query %r time %r: %r" % (e, t, r))
                n += 1
            for a in times[:8]:
                for b in times[:8]:
                    for st in steps:
                        r = s.get("/prometheus/api/v1/query_range", query=e, start=a, end=b,
                                  step=st)
                        check(r.status in (200, 400), "range %r %s..%s/%s: %r" % (e, a, b, st, r))
                        eq(r.json()["status"], "success" if r.status == 200 else "error")
                        n += 1
        check(n > 2500, "only %d requests" % n)
        # times before 1970 with a fraction are written as Prometheus writes them
        for t in ("-0.5", "-1.5", "-1", "-0.001", "-9223372036.854"):
            doc = prom(s, "query", query="1", time=t)
            eq(doc["data"]["result"], [float(t), "1"], "time %s" % t)


def write_fleet(s):
    """d1 and d2 in site a, d3 in site b: power.used and power.cap at T0, +60 s, +120 s."""
    used = {"d1": [10, 20, 30], "d2": [50, 60, 70], "d3": [5, 5, 5]}
    cap = {"d1": 100, "d2": 80, "d3": 10}
    site = {"d1": "a", "d2": "a", "d3": "b"}
    s.write(["power,device=%s,site=%s used=%d,cap=%d %d" % (d, site[d], used[d][i], cap[d],
                                                            (T0 + 60 * i) * 1000)
             for d in used for i in range(3)], precision="ms")


def vector(doc):
    """{(sorted label pairs): value} of an instant query's vector answer."""
    eq(doc["data"]["resultType"], "vector")
    return {tuple(sorted(r["metric"].items())): float(r["value"][1])
            for r in doc["data"]["result"]}


def near(got, want, what):
    eq(sorted(got), sorted(want), what + ": series")
    for k in want:
        check(abs(got[k] - want[k]) <= 1e-12 * max(1, abs(want[k])),
              "%s %r: %r, want %r" % (what, k, got[k], want[k]))


@suite.test
def binary_operators_on_a_fleet():
    """Answers computed by hand from the fleet's samples at T0 + 120 s (used 30, 70, 5;
    cap 100, 80, 10)."""
    D = {d: (("device", d), ("site", "a" if d != "d3" else "b")) for d in ("d1", "d2", "d3")}

    def nm(name, d):
        return (("__name__", name),) + D[d]

    cases = [
        ("power_used / power_cap", {D["d1"]: 0.3, D["d2"]: 0.875, D["d3"]: 0.5}),
        ("sum(power_used) / count(power_used)", {(): 35}),
        ("power_used > 25", {nm("power_used", "d1"): 30, nm("power_used", "d2"): 70}),
        ("25 < power_used", {nm("power_used", "d1"): 30, nm("power_used", "d2"): 70}),
        ("power_used > bool 25", {D["d1"]: 1, D["d2"]: 1, D["d3"]: 0}),
        ("power_used / on(site) group_left sum by (site) (power_used)",
         {D["d1"]: 0.3, D["d2"]: 0.7, D["d3"]: 1}),
        ("power_used and power_cap > 50", {nm("power_used", "d1"): 30,
                                           nm("power_used", "d2"): 70}),
        ("power_used unless power_cap > 50", {nm("power_used", "d3"): 5}),
        ("power_used or power_cap", {nm("power_used", d): v
                                     for d, v in (("d1", 30), ("d2", 70), ("d3", 5))}),
        ("power_used - on(device) power_cap", {(("device", "d1"),): -70,
                                               (("device", "d2"),): -10,
                                               (("device", "d3"),): -5}),
        # filtering with group_right: the left ("one") side's value, the right side's labels
        ("sum by (site) (power_used) > on(site) group_right power_cap",
         {nm("power_cap", "d2"): 100}),
        ("power_cap - power_used * 2 ^ 2 / 4", {D["d1"]: 70, D["d2"]: 10, D["d3"]: 5}),
    ]
    with Server() as s:
        write_fleet(s)
        for q, want in cases:
            near(vector(prom(s, "query", query=q, time=T0 + 120)), want, q)
        # a range query matches step by step
        doc = prom(s, "query_range", query="power_used > bool 15", start=T0, end=T0 + 120,
                   step=60)
        got = {r["metric"]["device"]: [float(v) for _, v in r["values"]]
               for r in doc["data"]["result"]}
        eq(got, {"d1": [0, 1, 1], "d2": [1, 1, 1], "d3": [0, 0, 0]})
        # Prometheus' refusals: many-to-many at evaluation (422), the rest at parse (400)
        doc = prom(s, "query", expect=422, query="power_used + on(site) power_cap",
                   time=T0 + 120)
        eq(doc["errorType"], "execution")
        eq(doc["error"], 'found duplicate series for the match group {site="a"} on the right '
           'hand-side of the operation: [{__name__="power_cap", device="d2", site="a"}, '
           '{__name__="power_cap", device="d1", site="a"}];many-to-many matching not '
           'allowed: matching labels must be unique on one side')
        for q, msg in (("1 > 2", "1:3: parse error: comparisons between scalars must use BOOL"),
                       ("power_used + bool power_cap", "1:12: parse error: bool modifier"),
                       ("power_used and 1", "set operator \"and\" not allowed"),
                       ("power_used * group_left power_cap", "1:14: parse error: unexpected")):
            doc = prom(s, "query", expect=400, query=q, time=T0 + 120)
            eq(doc["errorType"], "bad_data", q)
            contains(doc["error"], msg, q)
    # both operands count against max-query-samples: 9 samples each, 18 together
    with Server(args=["--max-query-samples", "15"]) as s:
        write_fleet(s)
        prom(s, "query", query="power_used", time=T0 + 120)
        doc = prom(s, "query", expect=422, query="power_used / power_cap", time=T0 + 120)
        contains(doc["error"], "max-query-samples 15")


@suite.test
def tiers_answer_aligned_window_functions():
    """Recent data (inside the 1m tier's 90 days): an aligned quantile_over_time over one
    minute is the sketch's (within 1 % of an order statistic), one 1 ms off is raw
    (interpolated); count_over_time at an aligned t leaves out a sample exactly at t
    from the tier, raw counts it (docs/PROMQL.md#tiers)."""
    import time as _time
    a0 = (int(_time.time()) // 3600 - 48) * 3600  # an hour two days ago, in seconds
    vals = [float(v) for v in range(1, 121)]  # 120 samples in the minute before a0 + 60
    with Server() as s:
        lines = ["env,device=q1 lat=%r %d" % (v, (a0 * 1000) + i * 500)
                 for i, v in enumerate(vals)]
        lines.append("env,device=q1 lat=7 %d" % ((a0 + 60) * 1000))  # exactly at t
        s.write(lines, precision="ms")
        t = a0 + 60
        doc = prom(s, "query", query="quantile_over_time(0.95, env_lat[1m])", time=t)
        tier = float(doc["data"]["result"][0]["value"][1])
        exact = sorted(vals)
        check(any(abs(tier - x) <= 0.01 * x for x in exact[110:116]),
              "tier p95 %r not within 1%% of an order statistic near rank 114" % tier)
        doc = prom(s, "query", query="quantile_over_time(0.95, env_lat[1m])", time=t + 0.001)
        raw = float(doc["data"]["result"][0]["value"][1])
        # raw window [t + 1 ms - 60 s, t + 1 ms]: samples 2..120 and the 7 at t
        w = sorted(vals[1:] + [7.0])
        rank = 0.95 * (len(w) - 1)
        lo = int(rank)
        want = w[lo] + (w[lo + 1] - w[lo]) * (rank - lo)
        check(abs(raw - want) < 1e-9, "raw p95 %r, want %r" % (raw, want))
        c = prom(s, "query", query="count_over_time(env_lat[1m])", time=t)
        eq(c["data"]["result"][0]["value"][1], "120", "tier: the sample at t is not in [t-1m, t)")
        c = prom(s, "query", query="count_over_time(env_lat[1m])", time=t + 0.001)
        eq(c["data"]["result"][0]["value"][1], "120", "raw: [t+1ms-1m, t+1ms]")
        c = prom(s, "query", query="count_over_time(env_lat[90s])", time=t)
        eq(c["data"]["result"][0]["value"][1], "121", "raw (90 s is no whole minute)")


@suite.test
def tier_windows_count_against_the_limit():
    """A window function from a tier reads windows, and each counts against
    max-query-samples as a sample would: 2 devices x 180 minutes are 360 windows."""
    import time as _time
    a0 = (int(_time.time()) // 3600 - 48) * 3600
    lines = ["env,device=w%d lat=%d %d" % (d, i, (a0 + i * 60 + 7) * 1000)
             for d in (1, 2) for i in range(180)]
    params = {"query": "count_over_time(env_lat[1m])", "start": a0 + 60, "end": a0 + 180 * 60,
              "step": 60}
    with Server(args=["--max-query-samples", "300"]) as s:
        s.write(lines, precision="ms")
        doc = prom(s, "query_range", expect=422, **params)
        contains(doc["error"], "more than max-query-samples 300 tier windows")
    with Server(args=["--max-query-samples", "360"]) as s:
        s.write(lines, precision="ms")
        r = s.request("GET", "/prometheus/api/v1/query_range?" + urllib.parse.urlencode(params))
        eq(r.status, 200, r.body[:300])
        res = r.json()["data"]["result"]
        eq(len(res), 2)
        for ser in res:
            eq([v for _, v in ser["values"]], ["1"] * 180, ser["metric"])


@suite.test
def native_query_api_points_to_prefix():
    with Server() as s:
        write_env(s)
        r = s.get("/api/v1/query", query="1+1")
        eq(r.status, 400)
        doc = r.json()
        eq(doc["status"], "error")
        eq(doc["errorType"], "bad_data")
        contains(doc["error"], "/prometheus")
        # the native API itself is unchanged
        r = s.get("/api/v1/query")
        eq(r.status, 400)
        eq(r.json(), {"error": "missing parameter 'device'"})
        rows = s.values(device="d1", metric="env.temp", **{"from": T0 * 1000,
                                                            "to": (T0 + 30) * 1000})
        eq(rows, [(T0 * 1000, "env.temp", 20), ((T0 + 15) * 1000, "env.temp", 21)])


@suite.test
def same_answers_after_flush():
    with Server() as s:
        write_env(s)
        qs = [("query", {"query": "sum by (site) (rate(env_cnt[2m]))", "time": T0 + 600}),
              ("query_range", {"query": "max_over_time(env_temp[1m])", "start": T0,
                               "end": T0 + 1300, "step": 45}),
              ("query", {"query": "env_temp[1m]", "time": T0 + 300})]
        before = [prom(s, p, **q) for p, q in qs]
        check(all(b["data"]["result"] for b in before), "empty answers %r" % before)
        s.flush()
        eq([prom(s, p, **q) for p, q in qs], before)


@suite.test
def value_strings():
    """Sample values and times as Prometheus writes them (Go's FormatFloat 'f', -1): the
    fewest digits that read back, never an exponent; times as seconds with up to three
    decimals, no trailing zeros."""
    import decimal
    vals = [0.1, 21.37, -0.3, 1 / 3, 2e10 / 3, 123456.789, 1e-05, 0.0001, 1.5e16,
            99999999999999.98, 1e15, 7.0, -1234567890123456.8, 2.5e-7, 0.0, 1e300, -1.25e-300,
            123456789012345680000.0]
    lines = ["v,device=f%d x=%r %d" % (i, v, T0 * 1000 + 250) for i, v in enumerate(vals)]
    with Server() as s:
        s.write(lines, precision="ms")
        for i, v in enumerate(vals):
            r = s.request("GET", "/prometheus/api/v1/query?" + urllib.parse.urlencode(
                {"query": 'v_x{device="f%d"}' % i, "time": "%d.25" % T0}))
            eq(r.status, 200, r.body[:300])
            body = r.body.decode()
            want = format(decimal.Decimal(repr(v)), "f")
            if "." in want:
                want = want.rstrip("0").rstrip(".")
            contains(body, '"value":[%d.25,"%s"]' % (T0, want), repr(v))


if __name__ == "__main__":
    suite.main()
