#!/usr/bin/env python3
"""Limits: every documented limit (docs/CONFIG.md, docs/API.md) at its value and one
past it. At the limit the request is accepted and the data is there; one past it
the request is refused with the documented status and a message naming the limit,
and nothing of the refused point is stored. Body size counts after decompression;
gzip bodies of several members are read whole."""

import gzip
import json
import os
import sys
import urllib.parse
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, now_ms  # noqa: E402

suite = Suite("limits")

SMALL = ["--max-body-bytes", "2048", "--max-line-bytes", "100", "--max-tags", "3",
         "--max-fields", "4", "--max-key-bytes", "16", "--max-tag-value-bytes", "20"]


def lp(s, body, status, *needles, **params):
    params.setdefault("precision", "ms")
    r = s.write(body, expect=None, **params)
    eq(r.status, status, "POST /write %r -> %r" % (body[:80], r.body[:300]))
    for n in needles:
        contains(r.text, n)
    return r


def devices(s, **params):
    return sorted(d["device"] for d in s.devices(**params)["devices"])


def pad_line(total, dev, t):
    """A line of exactly `total` bytes (no newline) for device dev."""
    head = "m,device=%s v=" % dev
    tail = " %d" % t
    n = total - len(head) - len(tail)
    check(n >= 1)
    return head + "1" * n + tail


@suite.test
def line_length_at_and_past_limit():
    t = now_ms()
    with Server(args=SMALL) as s:
        lp(s, pad_line(100, "at", t), 204)
        lp(s, pad_line(100, "atnl", t) + "\n", 204)  # the newline is not part of the line
        lp(s, pad_line(101, "past", t), 400, "line length 101 exceeds max-line-bytes 100",
           '"rejected":1')
        eq(devices(s), ["at", "atnl"])


@suite.test
def tag_field_and_key_counts():
    t = now_ms()
    with Server(args=SMALL) as s:
        # max_tags counts the device tag too
        lp(s, "m,device=t3,a=1,b=2 v=1 %d" % t, 204)
        lp(s, "m,device=t4,a=1,b=2,c=3 v=1 %d" % t, 400, "tag count exceeds max-tags 3")
        lp(s, "m,device=f4 a=1,b=2,c=3,d=4 %d" % t, 204)
        lp(s, "m,device=f5 a=1,b=2,c=3,d=4,e=5 %d" % t, 400, "field count exceeds max-fields 4")
        k16, k17 = "k" * 16, "k" * 17
        lp(s, "%s,device=m16 v=1 %d" % (k16, t), 204)
        lp(s, "%s,device=m17 v=1 %d" % (k17, t), 400, "measurement length 17 exceeds max-key-bytes 16")
        lp(s, "m,device=tk16,%s=1 v=1 %d" % (k16, t), 204)
        lp(s, "m,device=tk17,%s=1 v=1 %d" % (k17, t), 400, "tag key length 17 exceeds max-key-bytes 16")
        lp(s, "m,device=fk16 %s=1 %d" % (k16, t), 204)
        lp(s, "m,device=fk17 %s=1 %d" % (k17, t), 400, "field key length 17 exceeds max-key-bytes 16")
        lp(s, "m,device=%s v=1 %d" % ("d" * 16, t), 204)
        lp(s, "m,device=%s v=1 %d" % ("d" * 17, t), 400, "device name must be 1..16 bytes")
        lp(s, "m,device=tv20,k=%s v=1 %d" % ("x" * 20, t), 204)
        lp(s, "m,device=tv21,k=%s v=1 %d" % ("x" * 21, t), 400,
           "tag value length 21 exceeds max-tag-value-bytes 20")
        eq(devices(s), sorted(["t3", "f4", "m16", "tk16", "fk16", "d" * 16, "tv20"]))
        d = s.device("fk16")
        eq(d["metrics"], ["m." + k16])


@suite.test
def device_names_on_the_profile_endpoint():
    # PUT .../profile may create a device, so it takes the device names ingestion takes
    # and no others: it once created an empty name, control characters and names over
    # max_key_bytes.
    q = urllib.parse.quote
    with Server(args=SMALL) as s:
        def put(dev, status, *needles):
            r = s.request("PUT", "/api/v1/devices/%s/profile?bucket=1h" % q(dev, safe=""))
            eq(r.status, status, "PUT profile of %r -> %r" % (dev, r.body[:200]))
            for n in needles:
                contains(r.text, n)
        put("d" * 16, 200)
        put("e" * 17, 400, "device name must be 1..16 bytes of UTF-8 without control characters")
        put("", 400, "device name must be 1..16 bytes")
        put("a\x01b", 400, "control characters")
        put("a\x7fb", 400, "control characters")
        put("site/line/1", 200)  # a '/' inside a device id stays allowed
        eq(devices(s), ["d" * 16, "site/line/1"])


@suite.test
def long_device_ids_are_not_cut():
    # The device endpoint once copied the id into 1,024 bytes: with max_key_bytes above
    # that, GET of a 1,100-byte device answered for its 1,023-byte prefix, another device.
    t = now_ms()
    with Server(args=["--max-key-bytes", "2000", "--max-tag-value-bytes", "2000"]) as s:
        short, longer = "p" * 1023, "p" * 1100
        lp(s, "m,device=%s v=1 %d" % (short, t), 204)
        lp(s, "m,device=%s v=2 %d" % (longer, t + 1), 204)
        eq(s.device(longer)["device"], longer)
        eq(s.device(short)["device"], short)
        eq(s.device("p" * 1500, expect=404)["error"], "device not found")
        r = s.get("/api/v1/devices/%s/partitions" % longer)
        eq(r.status, 200, "partitions of the 1,100-byte device (%r)" % r.body[:200])
        eq(r.json()["count"], 1)


@suite.test
def state_string_limits():
    # A line-protocol string field is the state or an attribute; both are bounded by
    # max_tag_value_bytes, and by the parser's fixed 65536-byte string limit when
    # max_tag_value_bytes is set higher.
    t = now_ms()
    with Server(args=SMALL) as s:
        lp(s, 'm,device=s1 state="%s" %d' % ("a" * 20, t), 204)
        lp(s, 'm,device=s2 state="%s" %d' % ("a" * 21, t), 400,
           "state length 21 exceeds max-tag-value-bytes 20")
        lp(s, 'm,device=s3 note="x" %d' % t, 204)  # an attribute
        lp(s, 'm,device=s4 note="%s" %d' % ("a" * 21, t), 400,
           "no field could be stored: string field 'note'")
        eq(devices(s), ["s1", "s3"])
    with Server(args=["--max-line-bytes", "200000", "--max-tag-value-bytes", "100000"]) as s:
        lp(s, 'm,device=s1 state="%s" %d' % ("a" * 65536, t), 204)
        lp(s, 'm,device=s2 state="%s" %d' % ("a" * 65537, t), 400, "65536")
        eq(devices(s), ["s1"])


@suite.test
def body_size_counted_after_decompression():
    t = now_ms()
    body = b""
    while len(body) < 2048 - 90:
        body += b"m,device=b v=1 %d\n" % t
    body += pad_line(2048 - len(body), "b2", t).encode()  # 60..90 bytes
    eq(len(body), 2048)
    with Server(args=SMALL) as s:
        lp(s, body, 204)
        r = s.request("POST", "/write?precision=ms", body + b"\n", {})
        eq(r.status, 413)
        contains(r.text, "body exceeds max-body-bytes 2048")
        gz = {"Content-Encoding": "gzip"}
        eq(s.request("POST", "/write?precision=ms", gzip.compress(body), gz).status, 204)
        r = s.request("POST", "/write?precision=ms", gzip.compress(body + b"\n"), gz)
        eq(r.status, 413, repr(r))
        contains(r.text, "decompressed body exceeds max-body-bytes 2048")
        # a small compressed body that inflates far past the limit
        bomb = gzip.compress(b"\n" * 1_000_000)
        check(len(bomb) < 2048)
        eq(s.request("POST", "/write", bomb, gz).status, 413)
        r = s.request("POST", "/write?precision=ms", zlib.compress(body + b"\n"),
                      {"Content-Encoding": "deflate"})
        eq(r.status, 413)
        eq(devices(s), ["b", "b2"])
        # the JSON endpoint and /api/v2/write have the same limit
        doc = json.dumps([{"device": "j", "time": t, "metrics": {"v": 1}}])
        doc = doc[:-1] + " " * (2048 - len(doc)) + "]"
        eq(len(doc), 2048)
        eq(s.write_json(doc, expect=None).status, 204)
        eq(s.write_json(doc[:-1] + " ]", expect=None).status, 413)
        eq(s.request("POST", "/api/v2/write?precision=ms", body + b"\n", {}).status, 413)


@suite.test
def gzip_members_all_read_and_junk_refused():
    # gzip(1) and InfluxDB (Go's reader) read every member of a gzip body; an
    # acknowledged body must not lose its second member.
    t = now_ms()
    gz = {"Content-Encoding": "gzip"}
    with Server() as s:
        body = gzip.compress(b"m,device=g1 v=1 %d\n" % t) + gzip.compress(b"m,device=g2 v=2 %d\n" % t)
        eq(s.request("POST", "/write?precision=ms", body, gz).status, 204)
        eq(devices(s), ["g1", "g2"])
        r = s.request("POST", "/write?precision=ms",
                      gzip.compress(b"m,device=g3 v=1 %d\n" % t) + b"junk", gz)
        eq(r.status, 400)
        contains(r.text, "invalid gzip data")
        r = s.request("POST", "/write?precision=ms", gzip.compress(b"m,device=g4 v=1\n")[:-6], gz)
        eq(r.status, 400, "truncated gzip")
        eq(devices(s), ["g1", "g2"])


@suite.test
def future_timestamps():
    with Server(args=["--max-future-ms", "1h"]) as s:
        t = now_ms()
        # a minute of margin either side: the server clock moves between our two reads
        lp(s, "m,device=f1 v=1 %d" % (t + 3600_000 - 60_000), 204)
        lp(s, "m,device=f2 v=1 %d" % (t + 3600_000 + 60_000), 400, "more than max-future-ms 3600000")
        r = s.write_json([{"device": "j1", "time": t + 3600_000 - 60_000, "metrics": {"v": 1}}],
                         expect=None)
        eq(r.status, 204, repr(r))
        r = s.write_json([{"device": "j2", "time": t + 3600_000 + 60_000, "metrics": {"v": 1}}],
                         expect=None)
        eq(r.status, 400, repr(r))
        eq(devices(s), ["f1", "j1"])


# The stored time range: int64 nanoseconds, 1677-09-21..2262-04-11 (docs/API.md).
TS_MIN_MS, TS_MAX_MS = -9223372036854, 9223372036854


@suite.test
def timestamp_range():
    # Retention 0 and no future limit, so that only the range decides. A time past it
    # once made every flush of the server fail ("invalid argument", retried forever).
    with Server(args=["--retention-ms", "0", "--max-future-ms", "0"]) as s:
        lp(s, "m,device=lo v=1 %d" % TS_MIN_MS, 204)
        lp(s, "m,device=hi v=2 %d" % TS_MAX_MS, 204)
        lp(s, "m,device=lo2 v=1 %d" % (TS_MIN_MS - 1), 400, "outside the supported range",
           "1677-09-21T00:12:43.146Z..2262-04-11T23:47:16.854Z")
        lp(s, "m,device=hi2 v=1 %d" % (TS_MAX_MS + 1), 400, "outside the supported range")
        lp(s, "m,device=lo3 v=1 -9223372036854775000", 400, "outside the supported range")
        lp(s, "m,device=h1 v=1 2562048", 400, "outside the supported range", precision="h")
        for dev, t in (("j1", TS_MIN_MS - 1), ("j2", TS_MAX_MS + 1)):
            r = s.write_json([{"device": dev, "time": t, "metrics": {"v": 1}}], expect=None)
            eq(r.status, 400, repr(r))
            contains(r.json()["error"],
                     'field "time": timestamp %d ms is outside the supported range' % t)
        s.write_json([{"device": "j3", "time": TS_MIN_MS, "metrics": {"v": 3}}])
        s.flush()  # was a 500 for every flush after such a point
        eq(devices(s), ["hi", "j3", "lo"])
        for dev, metric, t, v in (("lo", "m.v", TS_MIN_MS, 1), ("hi", "m.v", TS_MAX_MS, 2),
                                  ("j3", "v", TS_MIN_MS, 3)):
            q = s.query(device=dev, metric=metric, **{"from": t, "to": t + 1})
            eq(q["values"], [[t, metric, v]], "%s after the flush" % dev)
        check("flush failed" not in s.log(), "a flush failed: " + s.log()[-500:])


@suite.test
def json_report_limits():
    t = now_ms()
    with Server(args=SMALL[2:]) as s:  # default body limit, small key/tag limits
        def one(dev, status, needle=None, **rep):
            doc = dict({"device": dev, "time": t, "metrics": {"v": 1}}, **rep)
            r = s.write_json([doc], expect=None)
            eq(r.status, status, "%r -> %r" % (doc, r.body[:300]))
            if needle:
                contains(r.text, needle)
        one("m4", 204, metrics={"a": 1, "b": 2, "c": 3, "d": 4})
        one("m5", 400, "max", metrics={"a": 1, "b": 2, "c": 3, "d": 4, "e": 5})
        one("tg3", 204, tags={"a": "1", "b": "2", "c": "3"})
        one("tg4", 400, "max", tags={"a": "1", "b": "2", "c": "3", "d": "4"})
        one("d" * 16, 204)
        one("d" * 17, 400, "16")
        one("mk16", 204, metrics={"k" * 16: 1})
        one("mk17", 400, "16", metrics={"k" * 17: 1})
        one("tk16", 204, tags={"k" * 16: "x"})
        one("tk17", 400, "16", tags={"k" * 17: "x"})
        one("tv20", 204, tags={"k": "x" * 20})
        one("tv21", 400, "20", tags={"k": "x" * 21})
        one("st20", 204, state="s" * 20)
        one("st21", 400, "20", state="s" * 21)
        eq(devices(s), sorted(["m4", "tg3", "d" * 16, "mk16", "tk16", "tv20", "st20"]))


@suite.test
def json_reports_per_body():
    t = now_ms()
    with Server() as s:
        rep = {"device": "r", "time": t, "metrics": {"v": 1}}
        eq(s.write_json([rep] * 100000, expect=None).status, 204)
        r = s.write_json([dict(rep, device="r2")] * 100001, expect=None)
        eq(r.status, 413, repr(r))
        contains(r.text, "100000")
        eq(devices(s), ["r"])


@suite.test
def query_limits():
    t0 = 1705327200000
    with Server(args=["--max-query-samples", "10"]) as s:
        lp(s, "\n".join("m,device=q v=%d %d" % (i, t0 + i * 1000) for i in range(10)), 204)
        rng = {"from": t0, "to": t0 + 3600_000}
        eq(s.query(device="q", **rng)["count"], 10)
        lp(s, "m,device=q v=10 %d" % (t0 + 10_000), 204)
        r = s.query(expect=422, device="q", **rng)
        contains(r.text, "more than max-query-samples 10")
        eq(s.query(device="q", limit=10, **rng)["count"], 10)
        # metric lists: 256 names are answered, 257 refused rather than cut short
        names = ["m.v"] + ["m.x%d" % i for i in range(255)]
        eq(s.query(device="q", metric=",".join(names), limit=5, **rng)["count"], 5)
        r = s.query(expect=400, device="q", metric=",".join(names + ["m.y"]), **rng)
        contains(r.text, "more than 256")


@suite.test
def partitions_per_query():
    # A query is planned over the device's partitions between its first and last
    # event, so the device needs events far apart: 10-minute buckets over ~3.8 years.
    ta = 1577836800000  # 2020-01-01
    tb = ta + 200000 * 600_000
    with Server() as s:
        lp(s, "m,device=p v=1 %d" % ta, 204)
        s.set_bucket("p", "10m")
        lp(s, "m,device=p v=2 %d" % tb, 204)
        parts = s.partitions("p", **{"from": ta, "to": tb})
        check(len(parts) >= 100000, "%d partitions" % len(parts))
        to = parts[99999]["end"]  # [ta, to) covers exactly 100000 partitions
        eq(to - parts[99999]["start"], 600_000, "10m partitions at the end")
        q = s.query(device="p", **{"from": ta, "to": to})
        eq((q["count"], q["partitions"]), (1, 100000))
        r = s.query(expect=400, device="p", **{"from": ta, "to": to + 1})
        contains(r.text, "more than 100000 partitions")


@suite.test
def devices_per_tenant_quota():
    t = now_ms()
    with Server() as s:
        hdr = {"Authorization": "Token " + s.token, "Content-Type": "application/json"}
        r = s.request("POST", "/api/v1/admin/tenants",
                      json.dumps({"name": "acme", "quotas": {"max_devices": 3}}), hdr)
        eq(r.status, 201, repr(r))
        tok = {"Authorization": "Token " + r.json()["token"]}
        body = "\n".join("m,device=d%d v=1 %d" % (i, t) for i in range(3))
        eq(s.request("POST", "/write?precision=ms", body, tok).status, 204)
        r = s.request("POST", "/write?precision=ms", "m,device=d3 v=1 %d" % t, tok)
        eq(r.status, 429, repr(r))
        eq(r.json()["limit"], "max_devices")
        check("retry-after" in r.headers)
        eq(s.request("POST", "/write?precision=ms", "m,device=d0 v=2 %d" % (t + 1), tok).status,
           204, "an existing device still writes")
        r = s.request("GET", "/api/v1/devices", None, tok)
        eq(sorted(d["device"] for d in r.json()["devices"]), ["d0", "d1", "d2"])


@suite.test
def names_and_strings_must_be_utf8():
    # Names and strings reach JSON answers and Cassandra text columns, which take UTF-8
    # only: one device name with a 0xff byte once made /api/v1/devices invalid JSON for
    # every client. Such lines are refused (line and column named); the others stay.
    t = now_ms()
    dev, town = "Pumpe-Gr\u00f6\u00dfe \U0001f525", "K\u00f6ln"
    with Server() as s:
        body = ("m,device=%s,ort=%s v=1,state=\"l\u00e4uft\" %d\n"
                % (dev.replace(" ", "\\ "), town, t)).encode()
        body += b"m,device=a\xffb v=2 %d\n" % t
        body += b"m,device=ok,site=x\xc3 v=3 %d\n" % t
        body += b"m,device=ok v=4,state=\"\xed\xa0\x80\" %d\n" % (t + 1)
        body += b"m,device=ok v=5 %d\n" % (t + 2)
        r = lp(s, body, 400, "invalid UTF-8 at column 11 (byte 0xff)", "line 2")
        eq(r.json()["accepted"], 2)
        eq(r.json()["rejected"], 3)
        s.flush()
        eq(devices(s), sorted([dev, "ok"]))  # the listing parses: r.json() decodes strictly
        d = s.device(dev)
        eq(d["tags"], {"ort": town})
        eq(d["state"], "l\u00e4uft")
        eq([v[2] for v in s.query(device=dev, **{"from": 0, "to": t + 10})["values"]], [1])
        eq([v[2] for v in s.query(device="ok", **{"from": 0, "to": t + 10})["values"]], [5])
        # JSON bodies: the JSON library refuses bytes that are not UTF-8
        r = s.write_json(b'{"device":"j\xff","time":%d,"metrics":{"v":1}}' % t, expect=400)
        contains(r.text, "unable to decode byte 0xff")
        # the profile endpoint takes the names ingestion takes
        r = s.request("PUT", "/api/v1/devices/a%FFb/profile?bucket=1h")
        eq(r.status, 400, repr(r.body[:200]))
        contains(r.text, "of UTF-8 without control characters")
        # an answer that echoes such a name is still JSON (U+FFFD in place of the byte)
        r = s.request("GET", "/api/v1/query?device=a%%FFb&from=0&to=%d" % (t + 10))
        eq(r.status, 404, repr(r.body[:200]))
        contains(r.json()["error"], "device 'a\ufffdb' not found")
        eq(devices(s), sorted([dev, "ok"]))


if __name__ == "__main__":
    suite.main()
