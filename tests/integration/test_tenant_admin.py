#!/usr/bin/env python3
"""The admin API's bounds and JSON rules (issue 18, Tenants): a tenant's retention_ms
and tier retention are bounded (0..36500d, as quotas are 0..10^12), and a JSON body
with a duplicate key (or retention_ms and its alias retention together) is refused
instead of taking the last value silently."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, contains, eq, run_bin  # noqa: E402

suite = Suite("tenant_admin")
MAX_MS = 36500 * 86400000  # 3153600000000


def admin(s, method, path, raw):
    return s.request(method, "/api/v1/admin" + path, raw,
                     {"Authorization": "Token " + s.token, "Content-Type": "application/json"})


def names(s):
    r = s.request("GET", "/api/v1/admin/tenants", None, {"Authorization": "Token " + s.token})
    eq(r.status, 200, r.text)
    return sorted(t["name"] for t in r.json()["tenants"])


def refused(r, needle):
    eq(r.status, 400, "%r" % r.body[:300])
    contains(r.json()["error"], needle)


@suite.test
def retention_is_bounded():
    with Server() as s:
        for v in (9223372036854775807, MAX_MS + 1, "99999999999d", "36501d", -1, "x"):
            body = json.dumps({"name": "t1", "retention_ms": v})
            refused(admin(s, "POST", "/tenants", body), "36500d")
            body = json.dumps({"name": "t1", "tier_retention": {"1h": v}})
            if v != -1:  # -1 is "forever" for a tier
                refused(admin(s, "POST", "/tenants", body), "36500d")
        eq(names(s), [])
        for i, (v, want) in enumerate(((MAX_MS, MAX_MS), ("36500d", MAX_MS),
                                       ("30d", 30 * 86400000), (0, 0))):
            r = admin(s, "POST", "/tenants", json.dumps({"name": "ok%d" % i,
                                                         "retention_ms": v}))
            eq(r.status, 201, r.text)
            eq(r.json()["retention_ms"], want)
        r = admin(s, "PATCH", "/tenants/ok3", json.dumps({"retention_ms": "99999999999d"}))
        refused(r, "36500d")
        r = admin(s, "PATCH", "/tenants/ok3",
                  json.dumps({"tier_retention": {"1d": 9223372036854775807}}))
        refused(r, "36500d")
        r = s.request("GET", "/api/v1/admin/tenants/ok3", None,
                      {"Authorization": "Token " + s.token})
        eq((r.json()["retention_ms"], r.json()["tier_retention"]["1d"]), (0, 0))
        # The CLI passes the server's refusal on (exit 1).
        base = ["--server", "http://127.0.0.1:%d" % s.port, "--admin-token", s.token]
        rc, out, err = run_bin(["tenant", "update", "ok3", "--retention", "99999999999d"] + base)
        eq(rc, 1, "%r %r" % (out, err))
        contains(err, "36500d")


@suite.test
def duplicate_keys_are_refused():
    with Server() as s:
        for raw in ('{"name":"a1","name":"b1"}',
                    '{"name":"a1","quotas":{"burst":5,"burst":0}}',
                    '{"name":"a1","retention_ms":1,"retention_ms":2}',
                    '{"name":"a1","retention_ms":1,"retention":"2d"}',
                    '{"name":"a1","tier_retention":{"1h":"2d","1h":"forever"}}',
                    '{"name":"a1","quotas":{"max_devices":5},"quotas":{}}'):
            r = admin(s, "POST", "/tenants", raw)
            eq(r.status, 400, "%s: %r" % (raw, r.body[:300]))
            err = r.json()["error"]
            eq("duplicate" in err or "give it once" in err, True, "%s: %s" % (raw, err))
        eq(names(s), [])
        eq(admin(s, "POST", "/tenants", '{"name":"a1","quotas":{"max_devices":5}}').status, 201)
        for raw in ('{"quotas":{"max_devices":1,"max_devices":9}}',
                    '{"retention":"1d","retention_ms":"9d"}'):
            r = admin(s, "PATCH", "/tenants/a1", raw)
            eq(r.status, 400, "%s: %r" % (raw, r.body[:300]))
        r = s.request("GET", "/api/v1/admin/tenants/a1", None,
                      {"Authorization": "Token " + s.token})
        eq((r.json()["quotas"]["max_devices"], r.json()["retention_ms"]), (5, 0))


if __name__ == "__main__":
    suite.main()
