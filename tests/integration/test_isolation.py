#!/usr/bin/env python3
"""Isolation: tenant B sees nothing of tenant A through any endpoint, parameter or
header; every endpoint except /ping, /health and /metrics refuses a request without
a valid token; tokens never appear in the server's log or data files.

Tenant A writes data whose every name (devices, metrics, tag values, states) carries
a marker. Then tenant B's token is used against every route registered in
src/server/server.c with every way of naming a tenant (tenant, db, u/p, Basic user,
Influx q with a database) and every answer is checked: a refusal, or an answer about
B's own data, never a byte of A's markers; and A's data is unchanged afterwards."""

import base64
import json
import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, eq  # noqa: E402

suite = Suite("isolation")
T0 = 1705327200000  # 2024-01-15T14:00:00Z
MARK = "zqalpha"  # in every name tenant A writes
DEV = MARK + "-dev"


def tok(t):
    return {"Authorization": "Token " + t}


def make_tenant(s, name):
    r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name, "quotas": {}}),
                  dict(tok(s.token), **{"Content-Type": "application/json"}))
    eq(r.status, 201, "create %s: %r" % (name, r))
    return r.json()["token"]


def seed_alpha(s, ta):
    lines = ["%senv,device=%s,site=%ssite %stemp=%d,state=\"%sstate\" %d"
             % (MARK, DEV, MARK, MARK, i, MARK, T0 + i * 1000) for i in range(5)]
    r = s.request("POST", "/write?precision=ms", "\n".join(lines), tok(ta))
    eq(r.status, 204, repr(r))
    doc = [{"device": DEV + "2", "time": T0, "metrics": {MARK + "m": 1},
            "tags": {"k": MARK + "tag"}, "state": MARK + "state"}]
    r = s.request("POST", "/api/v1/write/json", json.dumps(doc),
                  dict(tok(ta), **{"Content-Type": "application/json"}))
    eq(r.status, 204, repr(r))
    eq(s.request("POST", "/internal/flush", b"", tok(s.token)).status // 100, 2)
    # some of it in the head as well as in blocks
    r = s.request("POST", "/write?precision=ms",
                  "%senv,device=%s %stemp=9 %d" % (MARK, DEV, MARK, T0 + 3600_000), tok(ta))
    eq(r.status, 204)


def alpha_view(s, ta):
    """Everything A can see of its own data, to compare before and after."""
    q = s.request("GET", "/api/v1/query?device=%s&from=0&to=4102444800000" % DEV, None, tok(ta))
    d = s.request("GET", "/api/v1/devices", None, tok(ta))
    eq(q.status, 200)
    eq(d.status, 200)
    devs = d.json()["devices"]
    for x in devs:  # the activity counters move with every write; names and tags do not
        x.pop("samples", None)
    return q.json()["values"], [(x["device"], x.get("tags"), x.get("bucket")) for x in devs]


def attempts(tb):
    """(method, path, body, headers) with B's credentials naming A in every way."""
    B = tok(tb)
    basic = {"Authorization": "Basic " + base64.b64encode(("alpha:" + tb).encode()).decode()}
    rng = "from=0&to=4102444800000"
    dev = urllib.parse.quote(DEV)
    namings = ["", "tenant=alpha&", "db=alpha&", "tenant=beta&db=alpha&", "db=beta&tenant=alpha&",
               "tenant=ALPHA&", "tenant=alpha%00&", "tenant=alpha&tenant=beta&",
               "tenant=beta&tenant=alpha&"]
    gets = ["/api/v1/query?{n}device=%s&%s" % (dev, rng),
            "/api/v1/query?{n}device=%s&%s&resolution=1m" % (dev, rng),
            "/api/v1/query?{n}device=%s&%s&format=csv" % (dev, rng),
            "/api/v1/devices?{n}",
            "/api/v1/devices/%s?{n}" % dev,
            "/api/v1/devices/%s/partitions?{n}%s" % (dev, rng),
            "/api/v1/export?{n}%s" % rng,
            "/api/v1/state/latest?{n}device=%s" % dev,
            "/api/v1/state/devices?{n}state=%sstate" % MARK,
            "/api/v1/state/counts?{n}",
            "/api/v1/partitions/hot?{n}",
            "/api/v1/telemetry_by_tenant?{n}bucket=2024-01-15T14:00:00Z",
            "/api/v1/fleet?{n}metric=%senv.%stemp&%s" % (MARK, MARK, rng),
            "/api/v1/fleet/query?{n}metric=%senv.%stemp&%s" % (MARK, MARK, rng),
            "/query?{n}q=" + urllib.parse.quote("SELECT * FROM %senv" % MARK),
            "/query?{n}q=" + urllib.parse.quote("SHOW DATABASES"),
            "/query?{n}q=" + urllib.parse.quote("SHOW MEASUREMENTS ON alpha")]
    out = []
    for n in namings:
        for g in gets:
            out.append(("GET", g.format(n=n), None, B))
    # the same with the tenant in credentials instead of parameters
    for g in gets:
        out.append(("GET", g.format(n=""), None, basic))
        out.append(("GET", g.format(n="u=alpha&p=%s&" % tb), None, {}))
    for n in namings[1:]:
        # B's own names: landing in A would show in A's view, compared at the end
        line = "bwrite,device=%s btemp=666 %d" % (DEV, T0 + 2000)
        out.append(("POST", "/write?%sprecision=ms" % n, line, B))
        out.append(("POST", "/api/v2/write?%sprecision=ms&org=alpha&bucket=alpha" % n, line, B))
        out.append(("POST", "/api/v1/write/json?" + n,
                    json.dumps([{"device": DEV, "time": T0 + 2000, "metrics": {"x": 666}}]),
                    dict(B, **{"Content-Type": "application/json"})))
        out.append(("PUT", "/api/v1/devices/%s/profile?%sbucket=1d" % (dev, n), None, B))
        out.append(("PUT", "/api/v1/devices/%s/profile?%smax_rps=0" % (dev, n), None, B))
    for m, p in [("GET", "/api/v1/admin/tenants"), ("GET", "/api/v1/admin/tenants/alpha"),
                 ("POST", "/api/v1/admin/tenants/alpha/token"),
                 ("DELETE", "/api/v1/admin/tenants/alpha"),
                 ("PATCH", "/api/v1/admin/tenants/alpha"), ("PUT", "/api/v1/admin/tenants/alpha"),
                 ("POST", "/internal/flush")]:
        out.append((m, p, b"{}", B))
    return out


@suite.test
def tenant_b_sees_nothing_of_tenant_a():
    with Server(args=["--auth", "on"]) as s:
        ta = make_tenant(s, "alpha")
        tb = make_tenant(s, "beta")
        seed_alpha(s, ta)
        # B has data of its own with the same device id: answers about it are fine
        r = s.request("POST", "/write?precision=ms", "benv,device=%s btemp=1 %d" % (DEV, T0),
                      tok(tb))
        eq(r.status, 204)
        before = alpha_view(s, ta)
        check(len(before[0]) == 6, "alpha rows %r" % (before[0],))
        leaks = []
        tried = attempts(tb)
        for method, path, body, hdrs in tried:
            r = s.request(method, path, body, hdrs)
            text = r.body.decode("utf-8", "replace")
            asked = urllib.parse.unquote(path) + str(body)
            # B's own rows for DEV are named benv/btemp; a marker beyond the device id
            # (which B chose too) is A's, unless B's own request named it (echoed back).
            for m in (MARK + "env", MARK + "site", MARK + "state", MARK + "tag", MARK + "m\"",
                      DEV + "2"):
                if m in text and m not in asked:
                    leaks.append((method, path, r.status, text[:200]))
                    break
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and doc.get("tenant") not in (None, "beta"):
                leaks.append((method, path, r.status, "answered for tenant %r" % doc["tenant"]))
        eq(leaks, [], "%d of %d attempts leaked" % (len(leaks), len(tried)))
        after = alpha_view(s, ta)
        eq(after, before, "tenant A's data or settings changed by tenant B's requests")
        print("isolation: 0 of %d attempts by tenant B saw or changed tenant A's data" % len(tried))
        # the unauthenticated endpoints name no device, metric, tag or state of A
        for p in ("/health", "/metrics", "/ping"):
            text = s.get(p).body.decode()
            for m in (DEV, MARK + "env", MARK + "site", MARK + "state", MARK + "tag"):
                check(m not in text, "%s shows %r" % (p, m))


def routes():
    """Every route of dispatch() in src/server/server.c that needs a token."""
    return [("POST", "/write"), ("POST", "/api/v2/write"), ("POST", "/api/v1/write/json"),
            ("GET", "/query?q=SHOW+DATABASES"), ("GET", "/api/v1/query?device=d"),
            ("GET", "/api/v1/devices"), ("GET", "/api/v1/devices/d"),
            ("GET", "/api/v1/devices/d/partitions"), ("PUT", "/api/v1/devices/d/profile?bucket=1h"),
            ("GET", "/api/v1/state/latest?device=d"), ("GET", "/api/v1/state/devices?state=on"),
            ("GET", "/api/v1/state/counts"), ("GET", "/api/v1/fleet?metric=m.v"),
            ("GET", "/api/v1/fleet/query?metric=m.v"), ("GET", "/api/v1/export"),
            ("GET", "/api/v1/admin/tenants"), ("POST", "/api/v1/admin/tenants"),
            ("GET", "/api/v1/partitions/hot"), ("GET", "/api/v1/telemetry_by_tenant"),
            ("POST", "/internal/flush")]


@suite.test
def no_valid_token_no_answer():
    with Server(args=["--auth", "on"]) as s:
        make_tenant(s, "alpha")
        bad = [{}, tok("0" * 64), tok(s.token[:-1]), {"Authorization": "Bearer nope"},
               {"Authorization": "Basic " + base64.b64encode(b"alpha:nope").decode()},
               {"Authorization": "Token " + s.token + " "}, {"Authorization": "Token"}]
        n = 0
        wrong = []
        for method, path in routes():
            probe = s.request(method, path, None, tok(s.token))
            if probe.status == 404 and b"no such endpoint" in probe.body:
                continue  # a route this build does not have (e.g. fleet before it lands)
            for h in bad:
                r = s.request(method, path, b"m,device=d v=1" if method == "POST" else None, h)
                n += 1
                if r.status != 401:
                    wrong.append((method, path, h, r.status, r.body[:120]))
            r = s.request(method, path + ("&" if "?" in path else "?") + "u=x&p=wrong", None, {})
            n += 1
            if r.status != 401:
                wrong.append((method, path, "p=wrong", r.status, r.body[:120]))
        eq(wrong, [], "requests without a valid token answered")
        print("auth: %d of %d requests without a valid token refused with 401" % (n, n))
        for p in ("/ping", "/health", "/metrics"):
            check(s.get(p).status in (200, 204), p + " needs no token")
        eq(s.request("GET", "/api/v1/devices", None, tok(s.token)).status, 200)


@suite.test
def tokens_never_logged_or_stored():
    with Server(args=["--auth", "on"]) as s:
        ta = make_tenant(s, "alpha")
        seed_alpha(s, ta)
        # rotate: the old and the new token must not be logged either
        r = s.request("POST", "/api/v1/admin/tenants/alpha/token", b"", tok(s.token))
        eq(r.status, 200, repr(r))
        ta2 = r.json()["token"]
        for t in (ta, ta2, "0" * 64):
            s.request("GET", "/api/v1/devices", None, tok(t))
            s.request("GET", "/api/v1/devices?u=alpha&p=" + t, None, {})
            s.request("GET", "/api/v1/devices?tenant=beta", None, tok(t))
        s.stop()
        log = s.all_logs()
        check("authorization failed" in log or len(log) > 0, "the server logged something")
        for t in (ta, ta2, s.token):
            check(t not in log, "a token appears in the server log")
        # on disk only the admin token file holds a token in clear
        for root, _, files in os.walk(s.data):
            for f in files:
                if f == "token":
                    continue
                with open(os.path.join(root, f), "rb") as fh:
                    data = fh.read()
                for t in (ta, ta2):
                    check(t.encode() not in data, "tenant token in clear in %s" % f)
        print("tokens: 0 of 3 tokens found in the server log or the data files")


if __name__ == "__main__":
    suite.main()
