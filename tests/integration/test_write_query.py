#!/usr/bin/env python3
"""Writes through every ingestion path and reads back through the query API:
precisions, server-assigned times, gzip, partial writes, body and line limits, value
and timestamp validation, the JSON endpoint, Influx compatibility endpoints, tenant
isolation, query options and the device registry."""

import gzip
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import (HOUR, MIN, Server, Suite, check, contains, eq, now_ms)  # noqa: E402

suite = Suite("test_write_query")
BASE = 1700000000000  # 2023-11-14T22:13:20Z, whole second


def span(**kw):
    """Query params covering all test data unless overridden."""
    p = {"from": 0, "to": 4102444800000}  # 2100-01-01
    p.update(kw)
    return p


@suite.test
def precision_floor_conversion():
    # (precision, timestamp written, expected ms): sub-ms units floor, also below 0.
    cases = [
        ("ns", "1700000000123999999", 1700000000123),
        ("ns", "1700000000000000000", 1700000000000),
        ("ns", "-1", -1),
        ("ns", "-1000000", -1),
        ("ns", "-1000001", -2),
        ("n", "1700000000456000001", 1700000000456),
        ("u", "1700000000789999", 1700000000789),
        ("u", "-1", -1),
        ("us", "1700000000001000", 1700000000001),
        ("ms", "1700000000321", 1700000000321),
        ("ms", "-5", -5),
        ("s", "1700000000", 1700000000000),
        ("s", "-2", -2000),
        ("m", "28333333", 28333333 * 60000),
        ("h", "472222", 472222 * 3600000),
    ]
    with Server() as s:
        for i, (prec, ts, want) in enumerate(cases):
            dev = "p%d" % i
            s.write("m,device=%s v=%d %s" % (dev, i, ts), precision=prec)
            rows = s.values(device=dev, **{"from": want - 10 * HOUR, "to": want + 10 * HOUR})
            eq(rows, [(want, "m.v", i)], "precision %s ts %s" % (prec, ts))
        # No precision parameter means nanoseconds.
        s.write("m,device=dflt v=1 1700000000999999999")
        eq(s.values(device="dflt", **span()), [(1700000000999, "m.v", 1)])
        # An unknown precision is refused and stores nothing.
        r = s.write("m,device=badprec v=1 1", precision="fortnight", expect=400)
        contains(r.json()["error"], "precision")
        eq(s.get("/api/v1/devices/badprec").status, 404)


@suite.test
def missing_timestamp_gets_server_time():
    with Server() as s:
        before = now_ms()
        s.write(["m,device=nots a=1", "m,device=nots b=2"])
        after = now_ms()
        rows = s.values(device="nots", **{"from": before - 1000, "to": after + 1000})
        eq(len(rows), 2, "rows %r" % rows)
        for ts, _, _ in rows:
            check(before <= ts <= after, "server time %d not in [%d, %d]" % (ts, before, after))
        eq(sorted(r[1] for r in rows), ["m.a", "m.b"])


@suite.test
def gzip_body_and_bad_gzip():
    with Server() as s:
        lines = ["cpu,device=gz,host=h1 user=%d,sys=%d.5 %d" % (i, i, BASE + i * 1000)
                 for i in range(500)]
        s.write(lines, gz=True, precision="ms")
        rows = s.values(device="gz", metric="cpu.user", **span())
        eq(len(rows), 500)
        eq(rows[0], (BASE, "cpu.user", 0))
        eq(rows[-1], (BASE + 499000, "cpu.user", 499))
        eq(s.values(device="gz", metric="cpu.sys", limit=1, **span()), [(BASE, "cpu.sys", 0.5)])
        # Truncated gzip: refused as unparseable, nothing from it is stored.
        body = gzip.compress(b"cpu,device=gz2 user=1 1\n" * 100)[:-12]
        r = s.post("/write", body, {"Content-Encoding": "gzip"}, precision="ms")
        eq(r.status, 400)
        contains(r.json()["error"], "unable to parse")
        eq(s.get("/api/v1/devices/gz2").status, 404)
        r = s.post("/write", b"x", {"Content-Encoding": "br"})
        eq(r.status, 415)


@suite.test
def partial_write_reports_first_bad_line():
    with Server() as s:
        body = "\n".join([
            "# a comment counts as a line",
            "m,device=pw v=1 %d" % BASE,
            "m,device=pw v=oops %d" % (BASE + 1),
            "",
            "m,device=pw v=3 %d" % (BASE + 3),
            "this is not line protocol",
            "m,device=pw v=5 %d" % (BASE + 5),
        ]) + "\n"
        r = s.write(body, precision="ms", expect=400)
        doc = r.json()
        eq(doc["line"], 3, "first bad line (1-based, comment and blank lines count)")
        eq(doc["accepted"], 3)
        eq(doc["rejected"], 2)
        contains(doc["error"], "partial write")
        contains(doc["error"], "unable to parse")
        contains(doc["error"], "line 3")
        contains(r.headers.get("x-influxdb-error", ""), "partial write")
        eq(s.values(device="pw", **span()),
           [(BASE, "m.v", 1), (BASE + 3, "m.v", 3), (BASE + 5, "m.v", 5)])

        # Nothing valid: an error without "partial write", nothing stored.
        r = s.write("garbage\nm,device=pw2 v=\nm,device=pw2 =1 5\n", precision="ms",
                    expect=400)
        doc = r.json()
        contains(doc["error"], "unable to parse")
        check("partial write" not in doc["error"], "all-bad body says partial: %r" % doc)
        eq((doc["line"], doc["accepted"], doc["rejected"]), (1, 0, 3))
        eq(s.get("/api/v1/devices/pw2").status, 404)
        # An empty body is fine (Influx clients send them).
        s.write("", precision="ms")


@suite.test
def body_limit_413_plain_gzip_and_chunked():
    with Server(args=["--max-body-bytes", "4096"]) as s:
        line = "m,device=big v=1 %d\n"
        small = "".join(line % (BASE + i) for i in range(40))  # ~1.1 KB
        check(len(small) < 4096)
        s.write(small, precision="ms")
        eq(len(s.values(device="big", **span())), 40)

        large = "".join(line % (BASE + 1000 + i) for i in range(400))  # ~12 KB
        r = s.write(large, precision="ms", expect=413)
        contains(r.json()["error"], "max-body-bytes")
        # A small gzip body that inflates past the limit is refused too.
        bomb = gzip.compress(large.encode() * 10)
        check(len(bomb) < 4096, "compressed size %d" % len(bomb))
        r = s.write(bomb, precision="ms", expect=413, headers={"Content-Encoding": "gzip"})
        contains(r.json()["error"], "max-body-bytes")
        # Chunked upload (no Content-Length) over the limit.
        chunks = [large[i:i + 1000].encode() for i in range(0, len(large), 1000)]
        conn_r = chunked_post(s.port, "/write?precision=ms", chunks)
        eq(conn_r[0], 413, "chunked body over the limit")
        # None of the refused bodies left anything behind.
        eq(len(s.values(device="big", **span())), 40)
        # The JSON endpoint has the same limit.
        doc = {"reports": [{"device": "bigj", "time": BASE + i, "metrics": {"x": i}}
                           for i in range(300)]}
        s.write_json(doc, expect=413)
        eq(s.get("/api/v1/devices/bigj").status, 404)
        m = s.metrics_text()
        check("bucketdb_body_too_large_total 4" in m, "413 counter: %s" %
              [ln for ln in m.splitlines() if "too_large" in ln])


def chunked_post(port, path, chunks):
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", path, body=iter(chunks), encode_chunked=True)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@suite.test
def line_tag_field_key_limits():
    args = ["--max-line-bytes", "200", "--max-tags", "3", "--max-fields", "2",
            "--max-key-bytes", "16", "--max-tag-value-bytes", "20"]
    with Server(args=args) as s:
        ok = "m,device=lim,a=1,b=2 f1=1,f2=2 %d" % BASE
        s.write(ok, precision="ms")
        cases = [
            ("m,device=lim v=1,pad=1%s %d" % ("0" * 200, BASE), "max-line", "200"),
            ("m,device=lim,a=1,b=2,c=3 v=1 %d" % BASE, "max-tags", "3"),
            ("m,device=lim f1=1,f2=2,f3=3 %d" % BASE, "max-fields", "2"),
            ("m,device=lim,%s=1 v=1 %d" % ("k" * 17, BASE), "max-key", "16"),
            ("m,device=lim %s=1 %d" % ("f" * 17, BASE), "max-key", "16"),
            ("%s,device=lim v=1 %d" % ("M" * 17, BASE), "max-key", "16"),
            ("m,device=lim,a=%s v=1 %d" % ("x" * 21, BASE), "max-tag-value", "20"),
            ("m,device=%s v=1 %d" % ("d" * 17, BASE), "16", "16"),
        ]
        for line, limit, value in cases:
            r = s.write(line, precision="ms", expect=400)
            err = r.json()["error"]
            contains(err, limit, "limit named for %r" % line[:60])
            contains(err, value, "limit value for %r" % line[:60])
            check("partial write" not in err, err)
        # Exactly at the limits is accepted.
        s.write("m,device=lim,a=%s,b=1 %s=7 %d" % ("x" * 20, "f" * 16, BASE + 1), precision="ms")
        rows = s.values(device="lim", **span())
        eq(rows, [(BASE, "m.f1", 1), (BASE, "m.f2", 2), (BASE + 1, "m." + "f" * 16, 7)])


@suite.test
def nan_inf_rejected():
    with Server() as s:
        for v in ["NaN", "nan", "Inf", "+Inf", "-Inf", "inf", "1e999", "-1e999"]:
            r = s.write("m,device=nan v=%s %d" % (v, BASE), precision="ms", expect=400)
            contains(r.json()["error"], "unable to parse", v)
        eq(s.get("/api/v1/devices/nan").status, 404)
        # A good field next to a NaN does not sneak in: the whole line is rejected.
        s.write("m,device=nan a=1,b=NaN %d\nm,device=nan a=2 %d" % (BASE, BASE + 1),
                precision="ms", expect=400)
        eq(s.values(device="nan", **span()), [(BASE + 1, "m.a", 2)])
        # Integer, unsigned and boolean fields become doubles.
        s.write("m,device=types i=-7i,u=9u,t=true,f=F,x=1.5e3 %d" % (BASE + 2), precision="ms")
        eq(s.values(device="types", **span()),
           [(BASE + 2, "m.f", 0), (BASE + 2, "m.i", -7), (BASE + 2, "m.t", 1),
            (BASE + 2, "m.u", 9), (BASE + 2, "m.x", 1500)])


@suite.test
def future_timestamps_rejected():
    with Server(args=["--max-future-ms", "10m"]) as s:
        now = now_ms()
        r = s.write("m,device=fut v=1 %d" % (now + HOUR), precision="ms", expect=400)
        contains(r.json()["error"], "future")
        s.write("m,device=fut v=2 %d" % (now + MIN), precision="ms")
        eq([v for _, _, v in s.values(device="fut", **span())], [2])
        # JSON reports obey the same limit.
        r = s.write_json({"reports": [{"device": "futj", "time": now + HOUR,
                                       "metrics": {"x": 1}}]}, expect=400)
        contains(r.json()["error"], "future")
        eq(s.get("/api/v1/devices/futj").status, 404)


@suite.test
def string_fields_and_device_tag():
    with Server() as s:
        # a string other than state is an attribute; one that cannot be stored costs
        # the line nothing else (docs/API.md#mapping-rule)
        r = s.write('m,device=str v=1,msg="hello" %d' % BASE, precision="ms")
        eq(r.headers.get("x-bucketdb-not-stored"), None)
        long = "x" * 1025  # over max_tag_value_bytes
        r = s.write('m,device=str v=1,msg2="%s" %d' % (long, BASE), precision="ms")
        contains(r.headers.get("x-bucketdb-not-stored", ""), "string field 'msg2'")
        r = s.write('m,device=str2 msg="%s" %d' % (long, BASE), precision="ms", expect=400)
        contains(r.json()["error"], "msg")
        contains(r.json()["error"], "state")
        r = s.write("m,host=x v=1 %d" % BASE, precision="ms", expect=400)
        contains(r.json()["error"], "missing device tag")
        eq(s.devices()["count"], 1)
        # state is the one string field; it never becomes a metric.
        s.write('m,device=str v=1,state="on" %d' % BASE, precision="ms")
        d = s.device("str")
        eq(d["state"], "on")
        eq(d["metrics"], ["m.v"])


@suite.test
def json_endpoint_valid_partial_invalid():
    with Server() as s:
        doc = {"reports": [
            {"device": "j1", "time": BASE, "metrics": {"temp": 21.5, "ok": True},
             "tags": {"site": "berlin"}, "state": "on"},
            {"device": "j1", "time": "2023-11-14T22:13:21.250Z", "metrics": {"temp": 22}},
            {"device": "j2", "time": BASE, "metrics": {"x": -1e20}},
        ]}
        s.write_json(doc)
        eq(s.values(device="j1", **span()),
           [(BASE, "ok", 1), (BASE, "temp", 21.5), (BASE + 1250, "temp", 22)])
        eq(s.values(device="j2", **span()), [(BASE, "x", -1e20)])
        d = s.device("j1")
        eq((d["tags"], d["state"], d["state_time"]), ({"site": "berlin"}, "on", BASE))

        # Partial: the bad report is named, the good ones are stored.
        doc = {"reports": [
            {"device": "j3", "time": BASE, "metrics": {"a": 1}},
            {"device": "j3", "time": BASE + 1, "metrics": {"a": "t" * 1025}},  # not storable
            {"time": BASE + 2, "metrics": {"a": 3}},
            {"device": "j3", "time": BASE + 3, "metrics": {"a": 4}},
        ]}
        doc_r = s.write_json(doc, expect=400).json()
        contains(doc_r["error"], "partial write")
        eq((doc_r["index"], doc_r["accepted"], doc_r["rejected"]), (1, 2, 2))
        eq(s.values(device="j3", **span()), [(BASE, "a", 1), (BASE + 3, "a", 4)])

        # All bad: no "partial write".
        doc_r = s.write_json({"reports": [{"device": "j4"}]}, expect=400).json()
        check("partial write" not in doc_r["error"], doc_r)
        eq(doc_r["accepted"], 0)
        # Invalid JSON: nothing stored, a parse error.
        r = s.write_json(b'{"reports":[{"device":"j5","time":1,"metrics":{"a":1}}', expect=400)
        contains(r.json()["error"], "unable to parse")
        r = s.write_json(b'"just a string"', expect=400)
        contains(r.json()["error"], "unable to parse")
        eq(s.get("/api/v1/devices/j5").status, 404)
        eq(s.get("/api/v1/devices/j4").status, 404)
        # GET is not a write.
        eq(s.get("/api/v1/write/json").status, 405)


@suite.test
def ping_and_create_database():
    with Server() as s:
        for method in ("GET", "HEAD"):
            r = s.request(method, "/ping")
            eq(r.status, 204, method)
            check(r.headers.get("x-influxdb-version"), "X-Influxdb-Version on %s" % method)
            eq(r.body, b"")
        r = s.get("/ping", verbose="true")
        eq(r.status, 200)
        check("version" in r.json())
        r = s.post("/query", q="CREATE DATABASE telegraf")
        eq(r.status, 200)
        eq(r.json(), {"results": [{"statement_id": 0}]})
        r = s.post("/query", b"q=CREATE+DATABASE+x",
                   {"Content-Type": "application/x-www-form-urlencoded"})
        eq(r.status, 200)
        r = s.post("/query", b"q=CREATE+DATABASE+y")  # a form body without its type
        eq(r.status, 200)
        r = s.post("/query", b"db=other&q=SHOW+MEASUREMENTS")
        eq(r.json(), {"results": [{"statement_id": 0}]})
        # InfluxQL reads (docs/INFLUX.md, test_influxql.py): nothing written, no series
        r = s.get("/query", q="SELECT * FROM cpu")
        eq(r.status, 200)
        eq(r.json(), {"results": [{"statement_id": 0}]})
        r = s.get("/query", q="DROP DATABASE x")
        eq(r.status, 400)
        contains(r.json()["error"], "error parsing query")
        eq(s.get("/no/such/thing").status, 404)


@suite.test
def tenants_are_isolated():
    with Server() as s:
        s.write("m,device=da v=1 %d" % BASE, precision="ms", tenant="a")
        s.write("m,device=db v=2 %d" % BASE, precision="ms", tenant="b")
        s.write("m,device=shared v=10 %d" % BASE, precision="ms", tenant="a")
        s.write("m,device=shared v=20 %d" % BASE, precision="ms", db="b")  # db= is a tenant
        names = lambda doc: sorted(d["device"] for d in doc["devices"])  # noqa: E731
        eq(names(s.devices(tenant="a")), ["da", "shared"])
        eq(names(s.devices(tenant="b")), ["db", "shared"])
        eq(names(s.devices(db="b")), ["db", "shared"])
        eq(names(s.devices()), [], "default tenant")
        eq(s.values(device="shared", tenant="a", **span()), [(BASE, "m.v", 10)])
        eq(s.values(device="shared", db="b", **span()), [(BASE, "m.v", 20)])
        s.query(device="db", tenant="a", expect=404, **span())
        s.query(device="da", tenant="b", expect=404, **span())
        eq(s.get("/api/v1/devices/da", tenant="b").status, 404)
        eq(s.get("/api/v1/export", tenant="b", device="da").body, b"")
        # Invalid tenant names are refused.
        s.write("m,device=x v=1 1", precision="ms", tenant="a/b", expect=400)
        eq(s.get("/api/v1/devices", tenant="sp ace").status, 400)


@suite.test
def query_options():
    with Server() as s:
        lines = []
        for i in range(10):
            t = BASE + i * 1000
            lines.append("env,device=q temp=%d,hum=%d.25,co2=%d %d" % (i, i, 400 + i, t))
        s.write(lines, precision="ms")
        allrows = s.values(device="q", **span())
        eq(len(allrows), 30)
        # Ascending by time, ties by metric name.
        eq(allrows[:3], [(BASE, "env.co2", 400), (BASE, "env.hum", 0.25), (BASE, "env.temp", 0)])
        eq(allrows, sorted(allrows, key=lambda r: (r[0], r[1])))
        # Metric filter (in any order, unknown names ignored).
        rows = s.values(device="q", metric="env.temp,env.hum", **span())
        eq(rows, [r for r in allrows if r[1] in ("env.temp", "env.hum")])
        rows = s.values(device="q", metric="env.hum,env.temp,env.hum,nope", **span())
        eq(rows, [r for r in allrows if r[1] in ("env.temp", "env.hum")],
           "unsorted list with a duplicate and an unknown metric")
        eq(s.values(device="q", metric="nope", **span()), [])
        # Range: from inclusive, to exclusive.
        rows = s.values(device="q", metric="env.temp", **{"from": BASE + 2000, "to": BASE + 5000})
        eq([r[0] for r in rows], [BASE + 2000, BASE + 3000, BASE + 4000])
        rows = s.values(device="q", metric="env.temp", **{"from": "2023-11-14T22:13:22Z",
                                                         "to": "2023-11-14T23:13:25+01:00"})
        eq([r[0] for r in rows], [BASE + 2000, BASE + 3000, BASE + 4000])
        # Only `from`: everything after it. Only `to`: the hour before it.
        eq(len(s.values(device="q", metric="env.temp", **{"from": BASE + 8000})), 2)
        rows = s.values(device="q", metric="env.temp", to=BASE + 1001)
        eq([r[0] for r in rows], [BASE, BASE + 1000])
        rows = s.values(device="q", metric="env.temp", to=BASE + HOUR + 2000)
        eq([r[0] for r in rows], [BASE + 2000 + i * 1000 for i in range(8)])
        # Limit and order.
        eq(s.values(device="q", metric="env.temp", limit=3, **span()),
           [(BASE, "env.temp", 0), (BASE + 1000, "env.temp", 1), (BASE + 2000, "env.temp", 2)])
        eq(s.values(device="q", metric="env.temp", limit=2, order="desc", **span()),
           [(BASE + 9000, "env.temp", 9), (BASE + 8000, "env.temp", 8)])
        desc = s.values(device="q", order="desc", **span())
        eq(sorted(desc), sorted(allrows))
        eq([r[0] for r in desc], sorted((r[0] for r in allrows), reverse=True))
        # CSV.
        r = s.get("/api/v1/query", device="q", metric="env.hum", format="csv", limit=2, **span())
        eq(r.status, 200)
        contains(r.headers.get("content-type", ""), "csv")
        eq(r.text, "time,metric,value\n%d,env.hum,0.25\n%d,env.hum,1.25\n" % (BASE, BASE + 1000))
        # Bad parameters.
        for bad in [dict(order="sideways"), dict(format="xml"), dict(limit="-1"),
                    dict(limit="ten"), {"from": "yesterday"}, {"from": BASE + 10, "to": BASE}]:
            p = span(device="q")
            p.update(bad)
            eq(s.get("/api/v1/query", **p).status, 400, "params %r" % bad)
        eq(s.get("/api/v1/query", **span()).status, 400, "missing device")
        doc = s.query(device="q", **span())
        eq((doc["tier"], doc["columns"]), ("raw", ["time", "metric", "value"]))
        check(doc["partitions"] >= 1)
        # max-query-samples refuses rather than truncating silently.
    with Server(args=["--max-query-samples", "5"]) as s2:
        s2.write(["m,device=mq v=%d %d" % (i, BASE + i) for i in range(6)], precision="ms")
        eq(s2.get("/api/v1/query", device="mq", **span()).status, 422)
        eq(len(s2.values(device="mq", limit=5, **span())), 5)


@suite.test
def devices_tags_state_and_404():
    with Server() as s:
        s.write(['m,device=d1,site=a,rack=r1 v=1,state="on" %d' % (BASE + 5000),
                 'm,device=d2 v=2 %d' % BASE], precision="ms")
        # An older event does not replace the state.
        s.write('m,device=d1 v=0,state="off" %d' % (BASE + 1000), precision="ms")
        eq((s.device("d1")["state"], s.device("d1")["state_time"]), ("on", BASE + 5000))
        s.write_json({"reports": [{"device": "d1", "time": BASE + 2000, "state": "fault"}]})
        eq(s.device("d1")["state"], "on")
        # A newer one does.
        s.write_json({"reports": [{"device": "d1", "time": BASE + 9000, "state": "fault"}]})
        d = s.device("d1")
        eq((d["state"], d["state_time"]), ("fault", BASE + 9000))
        eq(d["tags"], {"site": "a", "rack": "r1"})
        eq((d["first_time"], d["last_time"]), (BASE + 1000, BASE + 9000))
        eq(d["metrics"], ["m.v"])
        lst = s.devices()
        eq(lst["count"], 2)
        byname = {x["device"]: x for x in lst["devices"]}
        eq(sorted(byname), ["d1", "d2"])
        eq(byname["d2"]["state"], None)
        eq(byname["d2"]["tags"], {})
        # The state survives a restart (WAL replay and catalog) unchanged.
        s.flush()
        s.restart()
        d = s.device("d1")
        eq((d["state"], d["state_time"], d["tags"]), ("fault", BASE + 9000,
                                                      {"site": "a", "rack": "r1"}))
        s.write('m,device=d1 v=0,state="stale" %d' % (BASE + 100), precision="ms")
        eq(s.device("d1")["state"], "fault", "older state after restart")
        # Unknown device: 404 everywhere.
        eq(s.get("/api/v1/devices/nope").status, 404)
        eq(s.get("/api/v1/devices/nope/partitions").status, 404)
        r = s.get("/api/v1/query", device="nope", **span())
        eq(r.status, 404)
        contains(r.json()["error"], "not found")
        # A device id with characters that need URL escaping.
        s.write("m,device=a\\ b/c v=1 %d" % BASE, precision="ms")
        eq(s.device("a b/c")["device"], "a b/c")
        eq(s.values(device="a b/c", **span()), [(BASE, "m.v", 1)])


@suite.test
def concurrent_writers_and_readers():
    """Eight writers (line protocol and JSON, shared and own devices) and a reader at
    once; afterwards every acknowledged sample is there exactly once."""
    import threading
    errors = []
    nthreads, nreq, nlines = 8, 25, 20
    with Server() as s:
        def writer(k):
            try:
                for r in range(nreq):
                    base = BASE + (r * nlines) * 1000
                    if k % 2:
                        s.write(["cw,device=own%d,w=%d v=%d,shared=%d %d"
                                 % (k, k, r * nlines + i, k, base + i * 1000)
                                 for i in range(nlines)], precision="ms")
                    else:
                        s.write_json({"reports": [
                            {"device": "own%d" % k, "time": base + i * 1000,
                             "metrics": {"cw.v": r * nlines + i}} for i in range(nlines)]})
                    # Everyone also writes its own metric of one shared device.
                    s.write("cw,device=shared k%d=%d %d" % (k, r, BASE + r), precision="ms")
            except Exception as e:  # reported by the main thread
                errors.append("writer %d: %r" % (k, e))

        stop = threading.Event()

        def reader():
            try:
                while not stop.is_set():
                    r = s.get("/api/v1/query", device="shared", **span())
                    if r.status not in (200, 404):
                        errors.append("reader: status %d" % r.status)
                        return
            except Exception as e:
                errors.append("reader: %r" % e)

        threads = [threading.Thread(target=writer, args=(k,)) for k in range(nthreads)]
        rd = threading.Thread(target=reader)
        rd.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stop.set()
        rd.join(timeout=60)
        check(not any(t.is_alive() for t in threads + [rd]), "threads did not finish")
        eq(errors, [])
        for k in range(nthreads):
            rows = s.values(device="own%d" % k, metric="cw.v", **span())
            eq([v for _, _, v in rows], list(range(nreq * nlines)), "device own%d" % k)
        rows = s.values(device="shared", **span())
        eq(len(rows), nthreads * nreq)
        eq(sorted(set(m for _, m, _ in rows)), sorted("cw.k%d" % k for k in range(nthreads)))
        s.flush()
        eq(len(s.values(device="shared", **span())), nthreads * nreq)


suite.main()
