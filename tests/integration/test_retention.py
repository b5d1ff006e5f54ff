#!/usr/bin/env python3
"""Per-tenant raw-data retention over HTTP: a point older than its tenant's TTL is
refused as "beyond retention policy" on /write and /api/v1/write/json (line protocol
keeps the other lines of the body), the TTL is the tenant's own or the server's, a
changed TTL applies to the next write, and accepted data survives a restart.

Expiry itself (whole files deleted, the file grouping by TTL, regrouping after a TTL
change, reads stopping at the cutoff) is driven by an injected clock in
tests/unit/storage/embedded/retention_test.c."""

import json
import time

from bdbtest import Server, Suite, check, contains, eq, path_with

suite = Suite("retention")
DAY = 86400000


def now_ms():
    return int(time.time() * 1000)


def tok(t):
    return {"Authorization": "Token " + t} if t else None


def write(s, lines, token=None):
    body = "\n".join(lines) + "\n"
    return s.request("POST", path_with("/write", {"precision": "ms"}), body, tok(token))


def write_json(s, reports, token=None):
    hdrs = {"Content-Type": "application/json"}
    hdrs.update(tok(token) or {})
    return s.request("POST", "/api/v1/write/json", json.dumps({"reports": reports}), hdrs)


def count(s, device, token=None, tenant=None):
    params = {"device": device, "from": now_ms() - 400 * DAY, "to": now_ms() + DAY}
    if tenant:
        params["tenant"] = tenant
    r = s.request("GET", path_with("/api/v1/query", params), None, tok(token))
    if r.status == 404:
        return 0
    eq(r.status, 200, r.text)
    return r.json()["count"]


def admin(s, method, path, doc):
    return s.request(method, "/api/v1/admin" + path, json.dumps(doc),
                     {"Authorization": "Token " + s.token, "Content-Type": "application/json"})


@suite.test
def server_default_refuses_old_points():
    with Server(args=["--retention-ms", "30d"]) as s:
        t = now_ms()
        r = write(s, ["m,device=d v=1 %d" % (t - 40 * DAY), "m,device=d v=2 %d" % (t - DAY),
                      "m,device=d v=3 %d" % t])
        eq(r.status, 400, r.text)  # Influx: a partial write is a 400 naming the first bad line
        err = r.json()["error"]
        contains(err, "partial write")
        contains(err, "point beyond retention policy")
        contains(err, "2592000000 ms")  # the limit, in the message
        eq((r.json()["line"], r.json()["accepted"], r.json()["rejected"]), (1, 2, 1))
        eq(count(s, "d"), 2)
        r = write_json(s, [{"device": "j", "time": t - 31 * DAY, "metrics": {"v": 1}},
                           {"device": "j", "time": t - 29 * DAY, "metrics": {"v": 2}}])
        eq(r.status, 400, r.text)
        contains(r.json()["error"], "beyond retention policy")
        eq(count(s, "j"), 1)
        # Retention 0 keeps everything.
    with Server(args=["--retention-ms", "0"]) as s:
        eq(write(s, ["m,device=d v=1 %d" % (now_ms() - 4000 * DAY)]).status, 204)
        eq(count(s, "d"), 0)  # outside the query range, but stored:
        r = s.request("GET", path_with("/api/v1/query", {"device": "d", "from": 0,
                                                         "to": now_ms()}), None, None)
        eq(r.json()["count"], 1)


@suite.test
def tenant_ttl_overrides_and_changes():
    with Server(args=["--retention-ms", "30d"]) as s:
        ra = admin(s, "POST", "/tenants", {"name": "a", "retention_ms": "1d"})
        eq(ra.status, 201, ra.text)
        rb = admin(s, "POST", "/tenants", {"name": "b"})
        eq(rb.status, 201, rb.text)
        ta, tb = ra.json()["token"], rb.json()["token"]
        old = now_ms() - 2 * DAY
        r = write(s, ["m,device=d v=1 %d" % old], ta)
        eq(r.status, 400, r.text)
        contains(r.json()["error"], "86400000 ms")  # a's own TTL, not the server's
        eq(write(s, ["m,device=d v=1 %d" % old], tb).status, 204)  # b: server's 30 d
        eq(count(s, "d", ta), 0)
        eq(count(s, "d", tb), 1)
        # A longer TTL applies to the next write.
        eq(admin(s, "PATCH", "/tenants/a", {"retention_ms": "10d"}).status, 200)
        eq(write(s, ["m,device=d v=1 %d" % old], ta).status, 204)
        eq(count(s, "d", ta), 1)
        s.restart()
        eq(count(s, "d", ta), 1)
        eq(count(s, "d", tb), 1)
        # Shrinking it again hides a's older data at once; b is untouched.
        eq(admin(s, "PATCH", "/tenants/a", {"retention_ms": "1d"}).status, 200)
        eq(count(s, "d", ta), 0)
        eq(count(s, "d", tb), 1)
        check(len(s.metrics_text()) > 0, "metrics answer")  # with the admin token


if __name__ == "__main__":
    suite.main()
