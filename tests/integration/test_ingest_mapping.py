#!/usr/bin/env python3
"""The mapping rule (docs/API.md#mapping-rule): the device rule over Telegraf's own
output (tests/fixtures/telegraf, cpu, mem, disk, diskio, net, system and processes of two
hosts) stores every numeric field without two readings sharing a device and metric;
the same rule names a JSON report's device the same way; a string field other than
state costs a line nothing but itself and is reported in X-Bucketdb-Not-Stored; a bad
rule is refused at start naming the problem."""

import json
import os
import re
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import (Server, Suite, check, contains, eq, run_bin)  # noqa: E402

suite = Suite("test_ingest_mapping")
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "telegraf")
TELEGRAF_RULE = "host+device,host+name,host+interface,host+cpu,host"
SPAN = {"from": 0, "to": 4102444800000}


def parse_lp(line):
    """(measurement, tags, fields, ms) of the fixtures' simple lines (no escapes)."""
    head, rest = line.split(" ", 1)
    fields_text, ts = rest.rsplit(" ", 1)
    parts = head.split(",")
    tags = dict(p.split("=", 1) for p in parts[1:])
    fields = {}
    for m in re.finditer(r'([^=,]+)=("(?:[^"\\]|\\.)*"|[^,]+)', fields_text):
        k, v = m.group(1), m.group(2)
        if v.startswith('"'):
            fields[k] = v[1:-1]
        else:
            fields[k] = float(v.rstrip("iu"))
    return parts[0], tags, fields, int(ts) // 1000000


def esc(v):
    return v.replace("\\", "\\\\").replace("/", "\\/")


def device_of(rule, tags):
    """The rule as docs/API.md#mapping-rule states it."""
    alts = [a.split("+") for a in rule.split(",")]
    composite = any(len(a) > 1 for a in alts)
    for a in alts:
        if all(k in tags for k in a):
            vals = [esc(tags[k]) if composite else tags[k] for k in a]
            return "/".join(vals), set(a)
    return None, None


def fixture_lines():
    out = []
    for name in sorted(os.listdir(FIX)):
        with open(os.path.join(FIX, name)) as f:
            out += [l for l in f.read().splitlines() if l and not l.startswith("#")]
    return out


@suite.test
def telegraf_output_as_it_is():
    lines = fixture_lines()
    want = {}  # device -> {metric: value}
    want_tags = {}
    for l in lines:
        meas, tags, fields, ms = parse_lp(l)
        dev, used = device_of(TELEGRAF_RULE, tags)
        check(dev is not None, "fixture line has a device under the rule: " + l)
        for k, v in fields.items():
            if isinstance(v, float):
                key = meas + "." + k
                check(key not in want.get(dev, {}), "fixture collision %s %s" % (dev, key))
                want.setdefault(dev, {})[key] = (ms, v)
        # every tag but `device` where the rule named the device by it: host, cpu,
        # path stay tags, so that a query filters and groups on them
        want_tags[dev] = {k: v for k, v in tags.items() if not (k == "device" and k in used)}
    eq(len(want), 2 * 8, "devices of the fixture: per host 2 cpus, 3 disks, diskio, eth0, itself")
    with Server(args=["--device-rule", TELEGRAF_RULE]) as s:
        body = "\n".join(lines) + "\n"
        r = s.write(body, expect=204)
        eq(r.headers.get("x-bucketdb-not-stored"), None, "uptime_format is an attribute")
        for host in ("web-01", "db-02"):
            got = s.get("/api/v1/state/latest", device=host).json()["attributes"]
            eq(got, {"system.uptime_format": {"value": "1 day,  0:00",
                                              "time": 1705327200000}}, "attribute of " + host)
        devs = {d["device"]: d for d in s.devices(limit=1000)["devices"]}
        eq(sorted(devs), sorted(want), "one device per host and disk, cpu, interface")
        check("web-01/mapper\\/vg-root" in devs, "a '/' in a value is escaped")
        for dev, metrics in want.items():
            rows = s.values(device=dev, limit=10000, **SPAN)
            got = {m: (t, v) for t, m, v in rows}
            eq(got, metrics, "every numeric field of %s" % dev)
            eq(devs[dev].get("tags") or {}, want_tags[dev], "device tags of %s" % dev)
        text = s.metrics_text()
        check(re.search(r'^bucketdb_string_fields_not_stored_total\{protocol="line"\} 0$', text,
                        re.M), "counter of string fields not stored")
        # Grafana's Telegraf panels: a host's series by its tags, through InfluxQL
        def influx(q):
            r = s.request("GET", "/query?" + urllib.parse.urlencode({"q": q, "epoch": "ms"}))
            eq(r.status, 200, r.body[:300])
            return [(ser.get("tags"), ser["values"])
                    for ser in r.json()["results"][0].get("series", [])]
        eq(influx("SELECT mean(usage_idle) FROM cpu WHERE host = 'web-01' GROUP BY cpu"),
           [({"cpu": "cpu-total"}, [[0, 92.25]]), ({"cpu": "cpu0"}, [[0, 91.5]])])
        vals = influx("SHOW TAG VALUES FROM disk WITH KEY = host")
        eq(vals, [(None, [["host", "db-02"], ["host", "web-01"]])])
        got = influx("SELECT last(free) FROM disk WHERE host = 'db-02' AND path = '/' GROUP BY host")
        eq(len(got), 1, "db-02's root disk")
        eq(got[0][0], {"host": "db-02"})


@suite.test
def default_rule_unchanged():
    with Server() as s:
        r = s.write(fixture_lines(), expect=400)
        contains(r.text, "missing device tag 'device'")
        # the disk lines carry device=: stored under the bare tag value, as before
        check(s.values(device="sda1", **SPAN), "disk line under the default rule")


@suite.test
def same_name_over_json():
    with Server(args=["--device-rule", "host+device,host,device"]) as s:
        s.write("disk,host=h1,device=sda1,path=/ used=1 1705327200000000000\n")
        s.write_json({"device": "sda1", "time": 1705327201000, "tags": {"host": "h1"},
                      "metrics": {"disk.used": 2}})
        s.write_json({"time": 1705327202000, "tags": {"host": "h2", "site": "x"},
                      "metrics": {"cpu.load": 3}})
        s.write_json({"device": "solo", "time": 1705327203000, "metrics": {"m": 4}})
        eq(s.values(device="h1/sda1", **SPAN),
           [(1705327200000, "disk.used", 1.0), (1705327201000, "disk.used", 2.0)])
        eq(s.values(device="h2", **SPAN), [(1705327202000, "cpu.load", 3.0)])
        eq(s.values(device="solo", **SPAN), [(1705327203000, "m", 4.0)])
        devs = {d["device"]: d for d in s.devices()["devices"]}
        eq(devs["h2"].get("tags"), {"host": "h2", "site": "x"},
           "the rule's keys other than device stay device tags")
        # the JSON report's tags replaced the line's (tags are the device's newest)
        eq(devs["h1/sda1"].get("tags"), {"host": "h1"}, "device is the name's")
        r = s.write_json({"time": 1705327204000, "tags": {"site": "y"}, "metrics": {"m": 1}},
                         expect=400)
        contains(r.text, "device rule 'host+device,host,device' matches none of the tags")


@suite.test
def string_fields_keep_the_line():
    # a string field is an attribute; one over max_tag_value_bytes is not stored and
    # costs the line nothing else
    with Server(args=["--max-tag-value-bytes", "8"]) as s:
        r = s.write("sys,device=d1 up=5i,fw=\"1.2.3\",notes=\"123456789\",state=\"ok\" "
                    "1705327200000000000\n")
        contains(r.headers.get("x-bucketdb-not-stored", ""), "line 1: string field 'notes'")
        eq(s.values(device="d1", **SPAN), [(1705327200000, "sys.up", 5.0)])
        eq(s.get("/api/v1/state/latest", device="d1").json()["attributes"],
           {"sys.fw": {"value": "1.2.3", "time": 1705327200000}})
        r = s.write("sys,device=d1 up=6i 1705327201000000000\n")
        eq(r.headers.get("x-bucketdb-not-stored"), None, "no warning when all was stored")


def admin(s, method, path, doc=None, expect=200):
    r = s.request(method, "/api/v1/admin/tenants" + path,
                  json.dumps(doc) if doc is not None else None,
                  {"Authorization": "Token " + s.token, "Content-Type": "application/json"})
    eq(r.status, expect, "%s %s (%r)" % (method, path, r.body[:300]))
    return r.json() if r.body else None


@suite.test
def json_string_metrics_keep_the_report():
    with Server(args=["--max-tag-value-bytes", "8"]) as s:
        r = s.write_json({"device": "j1", "time": 1705327200000,
                          "metrics": {"up": 5, "fw": "1.2.3", "notes": "123456789"},
                          "state": "ok"})
        contains(r.headers.get("x-bucketdb-not-stored", ""),
                 "1 string metric value(s); first: report 0: string metric 'notes'")
        eq(s.values(device="j1", **SPAN), [(1705327200000, "up", 5.0)])
        eq(s.get("/api/v1/state/latest", device="j1").json()["attributes"],
           {"fw": {"value": "1.2.3", "time": 1705327200000}})
        s.write_json({"device": "j2", "time": 1705327200000, "metrics": {"fw": "1.2.3"}})
        eq(s.get("/api/v1/state/latest", device="j2").json()["attributes"]["fw"]["value"],
           "1.2.3", "a report of attributes only is stored")
        r = s.write_json({"device": "j3", "metrics": {"notes": "123456789"}}, expect=400)
        contains(r.text, "a string is not stored")
        check(re.search(r'^bucketdb_string_fields_not_stored_total\{protocol="json"\} 1$',
                        s.metrics_text(), re.M), "counted")


@suite.test
def tenant_device_rule_overrides_the_servers():
    line = "disk,host=h1,device=sda1 used=1 1705327200000000000\n"
    with Server(args=["--auth", "on"]) as s:
        t = admin(s, "POST", "", {"name": "tele", "device_rule": " host + device , host"},
                  expect=201)
        eq(t["device_rule"], "host+device,host", "stored in canonical form")
        other = admin(s, "POST", "", {"name": "plain"}, expect=201)
        eq(other["device_rule"], "", "no rule of its own: the server's")
        hdr = {"Authorization": "Token " + t["token"]}
        eq(s.request("POST", "/write", line, hdr).status, 204)
        ohdr = {"Authorization": "Token " + other["token"]}
        eq(s.request("POST", "/write", line, ohdr).status, 204)
        q = dict(SPAN, device="h1/sda1")
        eq(s.request("GET", "/api/v1/query?" + "&".join("%s=%s" % kv for kv in q.items()),
                     None, hdr).json()["values"], [[1705327200000, "disk.used", 1]])
        q["device"] = "sda1"
        eq(s.request("GET", "/api/v1/query?" + "&".join("%s=%s" % kv for kv in q.items()),
                     None, ohdr).json()["values"], [[1705327200000, "disk.used", 1]])
        # bad rules are refused naming the problem; nothing changes
        r = admin(s, "PATCH", "/tele", {"device_rule": "a++b"}, expect=400)
        contains(r["error"], "device_rule: device rule 'a++b': empty tag key")
        r = admin(s, "PATCH", "/tele", {"device_rule": 5}, expect=400)
        contains(r["error"], "'device_rule' must be a string")
        # kept across a restart (the registry file), and "" goes back to the server's
        s.restart()
        eq(admin(s, "GET", "/tele")["device_rule"], "host+device,host")
        eq(admin(s, "PATCH", "/tele", {"device_rule": ""})["device_rule"], "")
        # the CLI sets it too, JSON-escaped; the server checks it
        url = "http://127.0.0.1:%d" % s.port
        rc, out, err = run_bin(["tenant", "update", "plain", "--server", url, "--admin-token",
                                s.token, "--device-rule", "host + \"x\""])
        eq(rc, 0, "bucketdb tenant update: %s" % err)
        eq(json.loads(out)["device_rule"], 'host+"x"')
        rc, out, err = run_bin(["tenant", "update", "plain", "--server", url, "--admin-token",
                                s.token, "--device-rule", "a,"])
        check(rc != 0, "a bad rule is refused")
        contains(out + err, "empty alternative")
        r = s.request("POST", "/write", "cpu,host=h2 load=1 1705327200000000000\n", hdr)
        eq(r.status, 400)
        contains(r.text, "missing device tag 'device'")


@suite.test
def bad_rules_refused():
    for rule, why in [("host+", "empty tag key"), ("a,,b", "empty tag key"),
                      ("a+a", "key 'a' repeated"), ("a+b+c+d+e", "more than 4 keys"),
                      (",".join("k%d" % i for i in range(9)), "more than 8 alternatives"),
                      ("a,", "empty alternative")]:
        rc, out, err = run_bin(["serve", "--device-rule", rule, "--check-config"])
        check(rc != 0, "rule %r refused" % rule)
        contains(out + err, "device_rule", "rule %r" % rule)
        contains(out + err, why, "rule %r" % rule)


if __name__ == "__main__":
    suite.main()
