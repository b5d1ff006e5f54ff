#!/usr/bin/env python3
"""String fields other than `state` are the device's latest attributes
(docs/API.md#mapping-rule): from line protocol and JSON, newest event wins per name,
shown by /api/v1/state/latest and listed by InfluxQL's SHOW FIELD KEYS with type
string; what breaks the limits is reported as not stored; a clean restart, a restart
after a flush and a kill -9 keep every acknowledged attribute. MQTT payloads:
test_mqtt_gateways.py."""

import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, contains, eq  # noqa: E402


def metric(s, name):
    for line in s.metrics_text().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


suite = Suite("test_attributes")
T0 = 1705327200000  # 2024-01-15T14:00:00Z
NS = 1000000


def attrs(s, dev):
    r = s.get("/api/v1/state/latest", device=dev)
    eq(r.status, 200, "latest of %s (%r)" % (dev, r.body[:300]))
    return {k: (v["value"], v["time"]) for k, v in r.json()["attributes"].items()}


@suite.test
def line_protocol_and_json_newest_wins():
    with Server() as s:
        r = s.write(["sys,device=d1 up=5i,fw=\"1.2\",site=\"berlin\",state=\"ok\" %d" % (T0 * NS),
                     "sys,device=d1 fw=\"1.1\",mode=\"eco\" %d" % ((T0 - 1000) * NS),
                     "sys,device=d1 site=\"paris\" %d" % ((T0 + 1000) * NS)])
        eq(r.headers.get("x-bucketdb-not-stored"), None, "every string stored")
        eq(attrs(s, "d1"), {"sys.fw": ("1.2", T0), "sys.mode": ("eco", T0 - 1000),
                            "sys.site": ("paris", T0 + 1000)})
        doc = s.get("/api/v1/state/latest", device="d1").json()
        eq(doc["state"], "ok", "the state field stays the state")
        eq(doc["time"], T0 + 1000, "a report of attributes only is an event")
        s.write_json({"device": "j1", "time": T0, "metrics": {"t": 1, "fw": "2.0"}})
        s.write_json([{"device": "j1", "time": T0 - 5, "metrics": {"fw": "1.9"}},
                      {"device": "j1", "time": T0, "metrics": {"fw": "2.1"}}])
        eq(attrs(s, "j1"), {"fw": ("2.1", T0)}, "older loses, equal time: the later write")


@suite.test
def limits_say_what_was_not_stored():
    with Server(args=["--max-tag-value-bytes", "8"]) as s:
        r = s.write("sys,device=d1 up=1,fw=\"12345678\",notes=\"123456789\" %d" % (T0 * NS))
        contains(r.headers.get("x-bucketdb-not-stored", ""),
                 "1 string field(s) other than state; first: line 1: string field 'notes'")
        eq(attrs(s, "d1"), {"sys.fw": ("12345678", T0)})
        fields = ",".join("a%02d=\"x\"" % i for i in range(70))
        r = s.write("many,device=d2 %s %d" % (fields, T0 * NS))
        contains(r.headers.get("x-bucketdb-not-stored", ""), "6 string field(s)")
        eq(len(attrs(s, "d2")), 64, "64 attributes per report")
        # the device limit: 64 names; a new one beyond it is not kept
        s.write("many,device=d2 zz=\"x\" %d" % ((T0 + 1) * NS))
        got = attrs(s, "d2")
        eq(len(got), 64)
        eq("many.zz" in got, False, "beyond the device limit")
        eq(metric(s, "bucketdb_attributes_not_kept_total"), 1)
        s.write("many,device=d2 a00=\"y\" %d" % ((T0 + 2) * NS))
        eq(attrs(s, "d2")["many.a00"], ("y", T0 + 2), "a known name still updates")


@suite.test
def restart_flush_and_kill_keep_them():
    with Server() as s:
        s.write("sys,device=d1 fw=\"1.0\" %d" % (T0 * NS))
        s.write_json({"device": "j1", "time": T0, "metrics": {"fw": "A"}})
        want = {"d1": attrs(s, "d1"), "j1": attrs(s, "j1")}
        s.kill()  # from the WAL
        s.start()
        eq({d: attrs(s, d) for d in want}, want, "after kill -9")
        s.flush()  # the latest file
        s.write("sys,device=d1 fw=\"1.1\",up=1 %d" % ((T0 + 1) * NS))
        want["d1"] = {"sys.fw": ("1.1", T0 + 1)}
        s.restart()
        eq({d: attrs(s, d) for d in want}, want, "after a flush and a restart")
        s.kill()
        s.start()
        eq({d: attrs(s, d) for d in want}, want, "after a second kill -9")


def influxql(s, q, db="default"):
    r = s.get("/query?" + urllib.parse.urlencode({"q": q, "db": db, "epoch": "ms"}))
    eq(r.status, 200, "%s (%r)" % (q, r.body[:300]))
    return r.json()["results"][0]


@suite.test
def show_field_keys_lists_them():
    with Server() as s:
        s.write(["sys,device=d1 up=5i,fw=\"1.2\" %d" % (T0 * NS),
                 "sys,device=d2 up=6i,loc=\"hall\" %d" % (T0 * NS),
                 "cpu,device=d1 load=1 %d" % (T0 * NS)])
        res = influxql(s, "SHOW FIELD KEYS FROM sys")
        eq(res["series"], [{"name": "sys", "columns": ["fieldKey", "fieldType"],
                            "values": [["fw", "string"], ["loc", "string"],
                                       ["up", "float"]]}])
        res = influxql(s, "SHOW FIELD KEYS")
        eq([x["name"] for x in res["series"]], ["cpu", "sys"])
        eq(res["series"][0]["values"], [["load", "float"]])
        # a raw SELECT of a string field: each device's latest value at its time
        # (docs/INFLUX.md), beside the float fields of the same time in one row
        res = influxql(s, "SELECT fw FROM sys")
        eq(res["series"], [{"name": "sys", "columns": ["time", "fw"], "values": [[T0, "1.2"]]}])
        res = influxql(s, "SELECT up, fw FROM sys WHERE device = 'd1'")
        eq(res["series"][0]["columns"], ["time", "up", "fw"])
        eq(res["series"][0]["values"], [[T0, 5, "1.2"]])
        res = influxql(s, "SELECT fw, loc FROM sys")
        eq(res["series"][0]["values"], [[T0, "1.2", None], [T0, None, "hall"]], "two devices")
        res = influxql(s, "SELECT fw FROM sys GROUP BY device")
        eq([(x["tags"], x["values"]) for x in res["series"]],
           [({"device": "d1"}, [[T0, "1.2"]])], "GROUP BY device")
        # outside the range, or beside a row a field condition drops: no value
        eq(influxql(s, "SELECT fw FROM sys WHERE time > %dms" % T0).get("series"), None,
           "after its time")
        eq(influxql(s, "SELECT up, fw FROM sys WHERE up > 5 AND device = 'd1'").get("series"),
           None, "a row the condition drops")
        res = influxql(s, "SELECT up, fw FROM sys WHERE up >= 5 AND device = 'd1'")
        eq(res["series"][0]["values"], [[T0, 5, "1.2"]], "a row the condition keeps")
        # a newer value replaces the older: the attribute is the latest only
        s.write("sys,device=d1 fw=\"1.3\" %d" % ((T0 + 5) * NS))
        res = influxql(s, "SELECT up, fw FROM sys WHERE device = 'd1'")
        eq(res["series"][0]["values"], [[T0, 5, None], [T0 + 5, None, "1.3"]], "the latest")
        # functions see float fields only
        eq(influxql(s, "SELECT count(fw) FROM sys").get("series"), None, "count of a string")


if __name__ == "__main__":
    suite.main()
