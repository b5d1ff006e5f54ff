#!/usr/bin/env python3
"""Tenancy: the admin API and `bucketdb tenant`, tokens (shown once, hashed on disk,
rotation), authentication (401) and isolation (403) on every API, Influx u/p and
Basic credentials, write-rate and device quotas (429 with Retry-After and a JSON
body, nothing of a refused request written, counters in /metrics), the refusal to
start on a non-loopback address without auth, and the registry across restarts."""

import base64
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import (Server, Suite, check, contains, eq, path_with, run_bin,  # noqa: E402
                     tmpdir)

suite = Suite("tenancy")
T0 = 1705327200000  # 2024-01-15T14:00:00Z


def tok(t):
    return {"Authorization": "Token " + t}


def admin(s, method, path, doc=None, token=None, raw=None):
    body = raw if raw is not None else (json.dumps(doc) if doc is not None else None)
    hdrs = tok(token if token is not None else s.token)
    if body is not None:
        hdrs["Content-Type"] = "application/json"
    return s.request(method, "/api/v1/admin" + path, body, hdrs)


def create(s, name, **quotas):
    r = admin(s, "POST", "/tenants", {"name": name, "quotas": quotas})
    eq(r.status, 201, "create %s (%r)" % (name, r.body[:300]))
    doc = r.json()
    eq(doc["name"], name)
    check(re.fullmatch(r"[0-9a-f]{64}", doc["token"]), "token format %r" % doc["token"])
    return doc["token"]


def write(s, lines, token=None, expect=204, **params):
    if isinstance(lines, (list, tuple)):
        lines = "\n".join(lines) + "\n"
    params.setdefault("precision", "ms")
    r = s.request("POST", path_with("/write", params), lines, tok(token) if token else None)
    if expect is not None:
        eq(r.status, expect, "POST /write %r (%r)" % (params, r.body[:300]))
    return r


def write_json(s, doc, token=None, expect=204, **params):
    hdrs = {"Content-Type": "application/json"}
    if token:
        hdrs.update(tok(token))
    r = s.request("POST", path_with("/api/v1/write/json", params), json.dumps(doc), hdrs)
    if expect is not None:
        eq(r.status, expect, "POST /api/v1/write/json (%r)" % r.body[:300])
    return r


def get(s, path, token=None, **params):
    return s.request("GET", path_with(path, params), None, tok(token) if token else None)


def count(s, token, device, **params):
    r = get(s, "/api/v1/query", token, device=device, **dict({"from": T0, "to": T0 + 10**7},
                                                                **params))
    if r.status == 404:
        return 0
    eq(r.status, 200, "query %s (%r)" % (device, r.body[:300]))
    return r.json()["count"]


def quota_metric(text, tenant, limit):
    m = re.search(r'^bucketdb_quota_rejections_total\{tenant="%s",limit="%s"\} (\d+)$'
                  % (re.escape(tenant), limit), text, re.M)
    return int(m.group(1)) if m else None


# ------------------------------------------------------------------ admin API


@suite.test
def admin_crud_and_token_shown_once():
    with Server() as s:
        # The admin API needs the admin token, even on loopback where data does not.
        eq(s.get("/api/v1/admin/tenants").status, 401)
        eq(admin(s, "GET", "/tenants", token="f" * 48).status, 401)
        eq(admin(s, "GET", "/tenants").json(), {"tenants": [], "count": 0})
        token = create(s, "acme", writes_per_second=500, burst=2000, max_devices=10)
        r = admin(s, "GET", "/tenants/acme")
        eq(r.status, 200)
        doc = r.json()
        check("token" not in doc, "the token is shown only once: %r" % doc)
        eq(doc["quotas"], {"writes_per_second": 500, "burst": 2000, "effective_burst": 2000,
                           "max_devices": 10, "storage_bytes": 0})
        eq((doc["usage"]["devices"], doc["usage"]["storage_bytes"]), (0, 0))
        eq(doc["not_enforced"], [])  # storage_bytes: test_storage_quota.py
        lst = admin(s, "GET", "/tenants").json()
        eq((lst["count"], [t["name"] for t in lst["tenants"]]), (1, ["acme"]))
        check(token not in admin(s, "GET", "/tenants").text, "token in the list")
        # Only its hash is on disk.
        with open(os.path.join(s.data, "tenants")) as f:
            reg = f.read()
        check(token not in reg, "the token itself is stored")
        contains(reg, "tenant acme sha256=")
        eq(os.stat(os.path.join(s.data, "tenants")).st_mode & 0o777, 0o600)
        # PATCH changes what it names only.
        r = admin(s, "PATCH", "/tenants/acme", {"quotas": {"max_devices": 3},
                                                "retention_ms": "3650d"})
        eq(r.status, 200, r.text)
        eq((r.json()["quotas"]["max_devices"], r.json()["quotas"]["writes_per_second"],
            r.json()["retention_ms"]), (3, 500, 3650 * 86400000))
        # Errors.
        eq(admin(s, "POST", "/tenants", {"name": "acme"}).status, 409)
        eq(admin(s, "POST", "/tenants", {"name": "no spaces"}).status, 400)
        r = admin(s, "POST", "/tenants", {"name": "x", "quotas": {"writes_per_sec": 1}})
        eq(r.status, 400)
        contains(r.json()["error"], "writes_per_sec")
        eq(admin(s, "POST", "/tenants", {"name": "x", "quotas": {"burst": -1}}).status, 400)
        eq(admin(s, "POST", "/tenants", {"name": "x", "colour": 1}).status, 400)
        eq(admin(s, "POST", "/tenants", raw="{not json").status, 400)
        eq(admin(s, "POST", "/tenants", {"quotas": {}}).status, 400)
        eq(admin(s, "PATCH", "/tenants/acme", {"name": "other"}).status, 400)
        eq(admin(s, "GET", "/tenants/ghost").status, 404)
        eq(admin(s, "PATCH", "/tenants/ghost", {"quotas": {}}).status, 404)
        eq(admin(s, "POST", "/tenants/ghost/token").status, 404)
        eq(admin(s, "PUT", "/tenants/acme").status, 405)
        eq(admin(s, "GET", "/tenants/acme/nope").status, 404)
        # A tenant token cannot administer.
        r = admin(s, "GET", "/tenants", token=token)
        eq(r.status, 403)
        contains(r.json()["error"], "admin token")
        eq(admin(s, "POST", "/tenants/acme/token", token=token).status, 403)
        # Delete: the token stops working, the data goes with the tenant
        # (test_tenant_delete.py).
        write(s, "m,device=d1 v=1 %d" % T0, token)
        eq(admin(s, "DELETE", "/tenants/acme").status, 204)
        eq(admin(s, "GET", "/tenants/acme").status, 404)
        eq(admin(s, "DELETE", "/tenants/acme").status, 404)
        # Where auth is optional a token that matches nothing is no token (issue 19):
        # the write goes to the default tenant, never to the deleted one, whose data
        # is unreachable at once (issue 18).
        write(s, "m,device=d1 v=2 %d" % T0, token)
        eq(count(s, s.token, "d1", tenant="acme"), 0)
        eq(count(s, None, "d1"), 1)


@suite.test
def rotation_invalidates_the_old_token():
    with Server(args=["--auth", "on"]) as s:
        old = create(s, "acme")
        write(s, "m,device=r v=1 %d" % T0, old)
        r = admin(s, "POST", "/tenants/acme/token")
        eq(r.status, 200, r.text)
        new = r.json()["token"]
        check(re.fullmatch(r"[0-9a-f]{64}", new) and new != old, "new token %r" % new)
        r = write(s, "m,device=r v=2 %d" % (T0 + 1), old, expect=401)
        contains(r.json()["error"], "wrong token")
        write(s, "m,device=r v=2 %d" % (T0 + 1), new)
        eq(count(s, new, "r"), 2)
        check("token" not in admin(s, "GET", "/tenants/acme").json(), "token shown again")


# ------------------------------------------------------------------ isolation


@suite.test
def tenant_token_cannot_touch_another_tenant():
    with Server(args=["--auth", "on"]) as s:
        ta = create(s, "alpha")
        tb = create(s, "beta")
        write(s, "m,device=a1 v=1 %d" % T0, ta)                  # the token's tenant
        write(s, "m,device=a2 v=1 %d" % T0, ta, db="alpha")      # named, same tenant
        write(s, "m,device=b1 v=1 %d" % T0, tb)
        write_json(s, {"device": "b2", "time": T0, "metrics": {"v": 1}}, tb)
        before = count(s, tb, "b1")
        # Tenant A naming B anywhere: 403, and nothing written.
        for params in ({"db": "beta"}, {"tenant": "beta"}):
            r = write(s, "m,device=b1 v=9 %d" % (T0 + 5), ta, expect=403, **params)
            contains(r.json()["error"], "tenant 'alpha'")
            contains(r.json()["error"], "'beta'")
            eq(r.headers.get("x-influxdb-error", "")[:9], "forbidden")
        write_json(s, {"device": "b1", "time": T0 + 6, "metrics": {"v": 9}}, ta, expect=403,
                   tenant="beta")
        eq(count(s, tb, "b1"), before, "nothing of the refused writes")
        for path, extra in (("/api/v1/query", {"device": "b1"}), ("/api/v1/devices", {}),
                            ("/api/v1/devices/b1", {}), ("/api/v1/export", {})):
            for key in ("tenant", "db"):
                r = get(s, path, ta, **dict(extra, **{key: "beta"}))
                eq(r.status, 403, "%s %s=beta with alpha's token" % (path, key))
                contains(r.json()["error"], "forbidden")
        eq(s.request("PUT", "/api/v1/devices/b9/profile?tenant=beta&bucket=1h", None,
                     tok(ta)).status, 403)
        r = s.request("POST", "/query?db=beta&q=CREATE+DATABASE+beta", None, tok(ta))
        eq(r.status, 403)
        # Each token sees only its own tenant.
        devs = get(s, "/api/v1/devices", ta).json()
        eq((devs["tenant"], sorted(d["device"] for d in devs["devices"])), ("alpha", ["a1", "a2"]))
        devs = get(s, "/api/v1/devices", tb).json()
        eq((devs["tenant"], sorted(d["device"] for d in devs["devices"])), ("beta", ["b1", "b2"]))
        eq(get(s, "/api/v1/query", ta, device="b1").status, 404, "b1 is not in alpha")
        exp = get(s, "/api/v1/export", ta)
        eq(exp.status, 200)
        check("b1" not in exp.text and "a1" in exp.text, "alpha's export: %r" % exp.text)
        # Operator-wide operations need the admin token.
        eq(s.request("POST", "/internal/flush", b"", tok(ta)).status, 403)
        eq(s.request("POST", "/internal/flush", b"", tok(s.token)).status, 204)
        # The admin token acts on any tenant, registered or not.
        eq(count(s, s.token, "b1", tenant="beta"), before)
        write(s, "m,device=z v=1 %d" % T0, s.token, db="unregistered")
        eq(count(s, s.token, "z", db="unregistered"), 1)
        # Without a token, only registered tenants and the admin can write: an
        # unregistered name gets 401 like anything else without a token.
        eq(write(s, "m,device=z v=1 %d" % T0, None, expect=None, db="unregistered").status, 401)
        m = s.metrics_text()
        check(int(re.search(r"^bucketdb_forbidden_total (\d+)$", m, re.M).group(1)) >= 14,
              "403s counted")


@suite.test
def wrong_credentials_are_ignored_without_auth():
    # InfluxDB with auth off ignores credentials, and python3-influxdb sends root/root
    # by default: where no token is required, one that matches nothing is served as
    # no token at all (issue 19, item 2). Before, each of these was 401 "wrong token".
    with Server() as s:  # loopback, auth auto: no token required
        contains(s.ready_text, "auth optional")
        # The README quick start: no token at all.
        write(s, "env,device=sensor-1 temp=21.5 %d" % T0)
        eq(count(s, None, "sensor-1"), 1)
        bad = "0" * 64
        basic = {"Authorization": "Basic " + base64.b64encode(("x:" + bad).encode()).decode()}
        for r in (write(s, "m,device=x v=1 %d" % T0, bad, expect=None),
                  write_json(s, {"device": "x", "metrics": {"v": 2}, "time": T0 + 1}, bad,
                             expect=None),
                  s.request("POST", "/write?u=x&p=%s&precision=ms" % bad,
                            "m,device=x v=3 %d" % (T0 + 2)),
                  s.request("POST", "/write?precision=ms", "m,device=x v=4 %d" % (T0 + 3),
                            basic)):
            eq(r.status, 204, "wrong token served as none (%r)" % r.body[:200])
        for r in (get(s, "/api/v1/query", bad, device="sensor-1"),
                  get(s, "/api/v1/devices", bad), get(s, "/api/v1/export", bad)):
            eq(r.status, 200, "wrong token served as none (%r)" % r.body[:200])
        eq(count(s, None, "x"), 4, "every write stored")
        # What needs a token even here says the one sent was wrong.
        r = s.request("GET", "/api/v1/admin/tenants", None, tok(bad))
        eq(r.status, 401)
        contains(r.json()["error"], "wrong token")
        # A registered tenant is protected by its token even where auth is optional.
        ta = create(s, "acme")
        r = write(s, "m,device=x v=1 %d" % T0, None, expect=401, db="acme")
        contains(r.json()["error"], "registered")
        eq(get(s, "/api/v1/devices", None, tenant="acme").status, 401)
        r = write(s, "m,device=x v=1 %d" % T0, bad, expect=401, db="acme")
        contains(r.json()["error"], "wrong token")
        contains(r.json()["error"], "registered")
        write(s, "m,device=x v=1 %d" % T0, ta)
        # /ping and /health need no token; /metrics names the registered tenants, so
        # with one registered it takes the admin token (metrics_auth = auto).
        eq(s.get("/ping").status, 204)
        eq(s.get("/health").status, 200)
        eq(s.get("/metrics").status, 401)
        eq(get(s, "/metrics", ta).status, 403)
        eq(get(s, "/metrics", s.token).status, 200)


@suite.test
def missing_token_is_401_when_auth_is_on():
    with Server(args=["--auth", "on"]) as s:
        contains(s.ready_text, "auth required")
        ta = create(s, "acme")
        checks = [
            s.request("POST", "/write?precision=ms", "m,device=x v=1 %d" % T0),
            s.request("POST", "/api/v1/write/json", json.dumps({"device": "x",
                                                                "metrics": {"v": 1}})),
            s.get("/api/v1/query", device="x"), s.get("/api/v1/devices"),
            s.get("/api/v1/export"), s.post("/query", q="CREATE DATABASE x"),
            s.post("/internal/flush"),
            s.request("POST", "/write?db=acme&u=acme&p=", "m,device=x v=1"),  # empty p
        ]
        for r in checks:
            eq(r.status, 401, "no token (%r)" % r.body[:200])
            contains(r.json()["error"], "missing token")
        eq(get(s, "/api/v1/devices", ta).json()["count"], 0, "nothing written")
        m = s.metrics_text()
        check(int(re.search(r"^bucketdb_auth_failures_total (\d+)$", m, re.M).group(1)) >= 8,
              "401s counted")


@suite.test
def influx_credentials_and_basic_auth():
    with Server(args=["--auth", "on"]) as s:
        ta = create(s, "acme")
        basic = base64.b64encode(("acme:" + ta).encode()).decode()
        ways = [
            ("/write?db=acme&u=acme&p=%s&precision=ms" % ta, None),  # Influx 1.x params
            ("/write?u=anything&p=%s&precision=ms" % ta, None),      # u is not checked
            ("/write?db=acme&precision=ms", {"Authorization": "Basic " + basic}),
            ("/write?precision=ms", {"Authorization": "Bearer " + ta}),
            ("/api/v2/write?precision=ms", {"Authorization": "Token " + ta}),
        ]
        for i, (path, hdrs) in enumerate(ways):
            r = s.request("POST", path, "m,device=inf v=%d %d" % (i, T0 + i), hdrs)
            eq(r.status, 204, "%s %r (%r)" % (path, hdrs, r.body[:200]))
        eq(count(s, ta, "inf"), len(ways))
        # Telegraf's start-up CREATE DATABASE with its credentials.
        r = s.request("POST", "/query?db=acme&u=acme&p=%s" % ta, "q=CREATE+DATABASE+acme",
                      {"Content-Type": "application/x-www-form-urlencoded"})
        eq(r.status, 200, r.text)
        r = s.request("POST", "/write?db=telegraf&u=acme&p=%s" % ta, "m,device=inf v=1")
        eq(r.status, 403, "db names another tenant")


# ------------------------------------------------------------------ quotas


@suite.test
def write_rate_quota_429_with_retry_after_and_nothing_written():
    with Server() as s:
        # 1 sample/s with room for 1000: the first 1000 samples pass, the next request
        # needs far more refill than the test takes.
        tq = create(s, "rq", writes_per_second=1, burst=1000)
        write(s, ["m,device=q%d a=%d,b=%d %d" % (i % 5, i, i, T0 + i) for i in range(500)], tq)
        before = sum(count(s, tq, "q%d" % d) for d in range(5))
        eq(before, 1000)
        lines = ["m,device=q%d a=1 %d" % (i % 7, T0 + 100000 + i) for i in range(600)]
        r = write(s, lines, tq, expect=429)
        ra = r.headers.get("retry-after")
        check(ra is not None and ra.isdigit() and 1 <= int(ra) <= 600,
              "Retry-After %r" % ra)
        doc = r.json()
        eq((doc["tenant"], doc["limit"], doc["value"]), ("rq", "writes_per_second", 1))
        contains(doc["error"], "quota exceeded")
        contains(doc["error"], "nothing of it was written")
        eq(doc["retry_after"], int(ra))
        contains(r.headers.get("x-influxdb-error", ""), "quota exceeded")
        # Partly bad bodies are refused whole too (the good lines are not written).
        r = write(s, lines[:300] + ["bad line"], tq, expect=429)
        # JSON ingestion is under the same quota.
        r = write_json(s, {"reports": [{"device": "q9", "time": T0 + i, "metrics": {"v": i}}
                                       for i in range(50)]}, tq, expect=429)
        eq(r.json()["limit"], "writes_per_second")
        check(r.headers.get("retry-after", "").isdigit(), "JSON 429 Retry-After")
        # Nothing of any refused request was written.
        eq(sum(count(s, tq, "q%d" % d) for d in range(10)), before)
        eq(sorted(d["device"] for d in get(s, "/api/v1/devices", tq).json()["devices"]),
           ["q0", "q1", "q2", "q3", "q4"])
        # A request larger than the burst can never pass: 413, not 429.
        r = write(s, ["m,device=q0 v=%d %d" % (i, T0 + i) for i in range(1001)], tq,
                  expect=413)
        eq((r.json()["limit"], r.json()["value"]), ("burst", 1000))
        check("retry-after" not in r.headers, "no Retry-After on 413")
        # The admin token writing into the tenant is under the tenant's quota too (300
        # samples: more than the bucket refills in the time the test takes, even slowed).
        eq(write(s, ["m,device=q0 v=1 %d" % (T0 + i) for i in range(300)], s.token,
                 expect=None, tenant="rq").status, 429)
        # Other tenants are not affected.
        write(s, ["m,device=o v=%d %d" % (i, T0 + i) for i in range(2000)])
        m = s.metrics_text()
        eq(quota_metric(m, "rq", "writes_per_second"), 4)
        eq(quota_metric(m, "rq", "burst"), 1)
        eq(quota_metric(m, "rq", "max_devices"), 0)
        eq(quota_metric(m, "default", "writes_per_second"), None, "unregistered: no labels")
        rej = admin(s, "GET", "/tenants/rq").json()["rejections"]
        eq(rej, {"writes_per_second": 4, "burst": 1, "max_devices": 0, "storage_bytes": 0})
        # Raising the quota takes effect for the next request.
        eq(admin(s, "PATCH", "/tenants/rq", {"quotas": {"writes_per_second": 0}}).status, 200)
        write(s, lines, tq)
        eq(sum(count(s, tq, "q%d" % d) for d in range(7)), before + 600)


@suite.test
def device_quota_refuses_whole_requests():
    with Server(args=["--auth", "on"]) as s:
        td = create(s, "dq", max_devices=3)
        write(s, ["m,device=d1 v=1 %d" % T0, "m,device=d2 v=1 %d" % T0], td)
        # d3 and d4 would make 4: refused whole, d3 not written either.
        r = write(s, ["m,device=d3 v=1 %d" % T0, "m,device=d4 v=1 %d" % T0,
                      "m,device=d1 v=2 %d" % (T0 + 1)], td, expect=429)
        doc = r.json()
        eq((doc["tenant"], doc["limit"], doc["value"]), ("dq", "max_devices", 3))
        check(r.headers.get("retry-after", "").isdigit(), "Retry-After on a device 429")
        eq(get(s, "/api/v1/query", td, device="d3").status, 404, "d3 not created")
        eq(count(s, td, "d1"), 1, "d1's sample of the refused request not written")
        # Exactly up to the limit, and existing devices keep writing.
        write(s, ["m,device=d3 v=1 %d" % T0, "m,device=d3 v=2 %d" % (T0 + 1)], td)
        write(s, ["m,device=d%d v=3 %d" % (i, T0 + 2) for i in (1, 2, 3)], td)
        write_json(s, {"device": "d5", "time": T0, "metrics": {"v": 1}}, td, expect=429)
        # A profile would create a device too.
        r = s.request("PUT", "/api/v1/devices/d6/profile?bucket=1h", None, tok(td))
        eq(r.status, 429)
        eq(r.json()["limit"], "max_devices")
        eq(get(s, "/api/v1/devices", td).json()["count"], 3)
        eq(admin(s, "GET", "/tenants/dq").json()["usage"]["devices"], 3)
        eq(quota_metric(s.metrics_text(), "dq", "max_devices"), 3)
        # Raising the limit lets the next device in.
        eq(admin(s, "PATCH", "/tenants/dq", {"quotas": {"max_devices": 4}}).status, 200)
        write_json(s, {"device": "d5", "time": T0, "metrics": {"v": 1}}, td)
        eq(get(s, "/api/v1/devices", td).json()["count"], 4)


def parallel(fn, n):
    """Runs fn(i) for i in range(n) on n threads at once; returns the results."""
    import threading
    out = [None] * n
    errs = []
    start = threading.Barrier(n)

    def run(i):
        try:
            start.wait(timeout=60)
            out[i] = fn(i)
        except Exception as e:  # reported below
            errs.append(e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
    check(not errs, "errors in threads: %r" % errs)
    return out


@suite.test
def quotas_hold_under_concurrent_requests():
    with Server() as s:
        # 12 requests at once, each adding one new device, under max_devices = 5:
        # exactly 5 are accepted, whatever the interleaving.
        td = create(s, "cdev", max_devices=5)
        st = parallel(lambda i: write(s, "m,device=n%d v=1 %d" % (i, T0), td,
                                      expect=None).status, 12)
        eq(sorted(st), [204] * 5 + [429] * 7)
        eq(get(s, "/api/v1/devices", td).json()["count"], 5)
        # 16 requests of 100 samples at once against a full bucket of 1000 that refills
        # at 1 sample/s: exactly 10 are accepted.
        tr = create(s, "crate", writes_per_second=1, burst=1000)
        st = parallel(lambda i: write(s, ["m,device=r%d v=%d %d" % (i, j, T0 + j)
                                          for j in range(100)], tr, expect=None).status, 16)
        eq(sorted(st), [204] * 10 + [429] * 6)
        eq(sum(count(s, tr, "r%d" % i) for i in range(16)), 1000)


# ------------------------------------------------------------------ start-up rule


@suite.test
def non_loopback_without_auth_is_refused_at_start():
    d = tmpdir()
    data = os.path.join(d, "data")
    # Refused before anything is opened or bound (0.0.0.0 is never actually bound here).
    for extra in ([], ["--check-config"]):
        rc, out, err = run_bin(["serve", "--data", data, "--listen", "0.0.0.0:0", "--auth",
                                "off"] + extra)
        eq(rc, 2, "exit code (%s)" % err)
        contains(err, "not a loopback address")
        contains(err, "--allow-insecure-listen")
        check("ready" not in out, "no ready block")
        check(not os.path.exists(data), "the data directory was not even created")
    rc, out, err = run_bin(["serve", "--listen", ":0", "--auth", "off", "--check-config"])
    eq(rc, 2, "an empty host is every address")
    # The explicit override, as a bare flag or in a file, passes the check.
    rc, out, err = run_bin(["serve", "--listen", "0.0.0.0:0", "--auth", "off",
                            "--allow-insecure-listen", "--check-config"])
    eq((rc, out.strip()), (0, "configuration ok"), err)
    conf = os.path.join(d, "c.conf")
    with open(conf, "w") as f:
        f.write("listen = 0.0.0.0:0\nauth = off\nallow_insecure_listen = true\n")
    rc, out, err = run_bin(["serve", "--config", conf, "--check-config"])
    eq(rc, 0, err)
    rc, out, err = run_bin(["serve", "--config", conf, "--print-config"])
    contains(out, "allow_insecure_listen = true")
    rc, out, err = run_bin(["serve", "--allow-insecure-listen=maybe", "--check-config"])
    eq(rc, 2)
    contains(err, "allow_insecure_listen")
    # With auth (auto or on) a non-loopback address is fine.
    for auth in ("auto", "on"):
        rc, out, err = run_bin(["serve", "--listen", "0.0.0.0:0", "--auth", auth,
                                "--check-config"])
        eq(rc, 0, "auth %s: %s" % (auth, err))
    # Loopback with auth off stays allowed.
    rc, out, err = run_bin(["serve", "--listen", "127.0.0.1:0", "--auth", "off",
                            "--check-config"])
    eq(rc, 0, err)


# ------------------------------------------------------------------ persistence


@suite.test
def registry_survives_restart_and_corruption_is_refused():
    s = Server(args=["--auth", "on"])
    with s:
        ta = create(s, "acme", writes_per_second=50, max_devices=7)
        tb = create(s, "beta")
        r = admin(s, "POST", "/tenants/beta/token")
        tb2 = r.json()["token"]
        write(s, "m,device=p v=1 %d" % T0, ta)
        s.restart()
        doc = admin(s, "GET", "/tenants/acme").json()
        eq((doc["quotas"]["writes_per_second"], doc["quotas"]["max_devices"]), (50, 7))
        eq(admin(s, "GET", "/tenants").json()["count"], 2)
        write(s, "m,device=p v=2 %d" % (T0 + 1), ta)
        eq(count(s, ta, "p"), 2)
        eq(write(s, "m,device=p v=1 %d" % T0, tb, expect=None).status, 401, "rotated away")
        write(s, "m,device=p v=1 %d" % T0, tb2)
    # A damaged registry stops the start with a message, rather than dropping tokens.
    path = os.path.join(s.data, "tenants")
    with open(path, "rb") as f:
        good = f.read()
    with open(path, "wb") as f:
        f.write(good.replace(b"acme", b"acmf", 1))
    rc, out, err = run_bin(["serve", "--data", s.data, "--listen", "127.0.0.1:0"])
    eq(rc, 1, "start with a damaged registry (stdout %r)" % out)
    contains(err, "tenant registry")
    contains(err, "checksum")
    check("ready" not in out, "no ready block")
    with open(path, "wb") as f:
        f.write(good)
    with s:
        write(s, "m,device=p v=3 %d" % (T0 + 2), ta)


# ------------------------------------------------------------------ CLI


@suite.test
def tenant_command():
    with Server() as s:
        url = "http://127.0.0.1:%d" % s.port
        base = ["--server", url, "--admin-token", s.token]
        rc, out, err = run_bin(["tenant", "create", "cli1", "--writes-per-second", "100",
                                "--max-devices", "5", "--retention", "3650d"] + base)
        eq(rc, 0, err)
        doc = json.loads(out)
        token = doc["token"]
        eq((doc["name"], doc["quotas"]["writes_per_second"], doc["quotas"]["max_devices"],
            doc["quotas"]["effective_burst"], doc["retention_ms"]),
           ("cli1", 100, 5, 1000, 3650 * 86400000))
        contains(err, "shown only once")
        write(s, "m,device=c v=1 %d" % T0, token)
        env = dict(os.environ, BUCKETDB_ADMIN_TOKEN=s.token)
        rc, out, err = run_bin(["tenant", "list", "--server", url], env=env)
        eq(rc, 0, err)
        eq([t["name"] for t in json.loads(out)["tenants"]], ["cli1"])
        check(token not in out, "list shows no token")
        rc, out, err = run_bin(["tenant", "show", "cli1"] + base)
        eq((rc, json.loads(out)["usage"]["devices"]), (0, 1), err)
        rc, out, err = run_bin(["tenant", "update", "cli1", "--burst", "300"] + base)
        eq((rc, json.loads(out)["quotas"]["burst"]), (0, 300), err)
        rc, out, err = run_bin(["tenant", "rotate-token", "cli1"] + base)
        eq(rc, 0, err)
        new = json.loads(out)["token"]
        # the old token is no token now: the registered tenant refuses it
        r = write(s, "m,device=c v=1 %d" % T0, token, expect=401, db="cli1")
        contains(r.json()["error"], "wrong token")
        write(s, "m,device=c v=2 %d" % T0, new)
        rc, out, err = run_bin(["tenant", "delete", "cli1"] + base)
        eq(rc, 0, err)
        contains(out, "deleted")
        # Errors: server-side (exit 1) and usage (exit 2).
        rc, out, err = run_bin(["tenant", "show", "cli1"] + base)
        eq(rc, 1)
        contains(err, "no tenant")
        rc, out, err = run_bin(["tenant", "list", "--server", url, "--admin-token", "nope"])
        eq(rc, 1)
        contains(err, "wrong token")
        env_no = {k: v for k, v in os.environ.items() if k != "BUCKETDB_ADMIN_TOKEN"}
        rc, out, err = run_bin(["tenant", "list", "--server", url], env=env_no)
        eq(rc, 2)
        contains(err, "admin token")
        eq(run_bin(["tenant", "create"] + base)[0], 2)
        eq(run_bin(["tenant", "create", "bad name"] + base)[0], 2)
        eq(run_bin(["tenant", "frob", "x"] + base)[0], 2)
        eq(run_bin(["tenant", "update", "x"] + base)[0], 2)
        eq(run_bin(["tenant", "create", "x", "--burst", "-1"] + base)[0], 2)
        eq(run_bin(["tenant", "show", "x", "--max-devices", "1"] + base)[0], 2)
        rc, out, err = run_bin(["tenant", "--help"])
        eq(rc, 0)
        contains(out, "rotate-token")


suite.main()
