#!/usr/bin/env python3
"""Isolation: tenant B sees nothing of tenant A through any endpoint, parameter or
header; every endpoint except /ping and /health refuses a request without a valid
token (/metrics takes the admin token, metrics_auth = auto); /health names no tenant
but to the admin token; tokens never appear in the server's log or data files.

Tenant A writes data whose every name (devices, metrics, tag values, states) carries
a marker. Then tenant B's token is used against every route registered in
src/server/server.c with every way of naming a tenant (tenant, db, u/p, Basic user,
Influx q with a database) and every answer is checked: a refusal, or an answer about
B's own data, never a byte of A's markers; and A's data is unchanged afterwards."""

import base64
import json
import os
import re
import socket
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq  # noqa: E402

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
        # without a token: /health, /ping and the 401 of /metrics name nothing of A
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
            ("POST", "/internal/flush"), ("GET", "/metrics")]


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
        for p in ("/ping", "/health"):
            check(s.get(p).status in (200, 204), p + " needs no token")
        eq(s.request("GET", "/api/v1/devices", None, tok(s.token)).status, 200)


def hold_write(port, token, n=4096):
    """A write of n bytes sent but for its last byte: it holds one of the tenant's
    in-flight writes until finished ((socket, rest) to finish it)."""
    body = ("m,device=held v=1 %d\n" % T0).encode()
    body += b"#" + b"x" * (n - len(body) - 2) + b"\n"
    so = socket.create_connection(("127.0.0.1", port), timeout=60)
    so.sendall(("POST /write?precision=ms HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Authorization: Token %s\r\nContent-Length: %d\r\n\r\n" % (token, n)).encode())
    so.sendall(body[:-1])
    return so, body[-1:]


def finish_write(so, rest):
    so.sendall(rest)
    data = b""
    deadline = time.monotonic() + 60
    while b"\r\n" not in data and time.monotonic() < deadline:
        part = so.recv(4096)
        if not part:
            break
        data += part
    so.close()
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else None


def wait_inflight_writes(s, n):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if re.search(r"^bucketdb_inflight_write_requests %d$" % n, s.metrics_text(), re.M):
            return
        time.sleep(0.02)
    check(False, "in-flight writes never became %d" % n)


def metric_lines(text, tenant):
    return [ln for ln in text.splitlines() if 'tenant="%s"' % tenant in ln]


@suite.test
def metrics_and_health_name_no_tenant_without_the_admin_token():
    """/metrics (per-tenant families) and /health (last_tenant_refusal) showed tenant
    A's name and figures to anyone; now only the admin token sees them."""
    # 2 writes server-wide, 50 %: each tenant may have one write in flight
    with Server(args=["--auth", "on", "--max-inflight-writes", "2",
                      "--tenant-inflight-share", "50"]) as s:
        ta = make_tenant(s, "alpha")
        tb = make_tenant(s, "beta")
        for t in (ta, tb):  # one write each (a write just answered may still hold its slot)
            deadline = time.monotonic() + 60
            while True:
                r = s.request("POST", "/write?precision=ms", "m,device=d v=1 %d" % T0, tok(t))
                if r.status != 429 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            eq(r.status, 204, repr(r))
        # a 429 of alpha: its one in-flight write is held, a second one is refused
        wait_inflight_writes(s, 0)  # the writes above have let go of their slots
        so, rest = hold_write(s.port, ta)
        wait_inflight_writes(s, 1)
        deadline = time.monotonic() + 60
        r = None
        while time.monotonic() < deadline:
            r = s.request("POST", "/write?precision=ms", "m,device=x v=2 %d" % T0, tok(ta))
            if r.status == 429:
                break
            time.sleep(0.05)
        eq(r.status, 429, "alpha's second write while one is held (%r)" % r)
        eq(finish_write(so, rest), 204, "the held write")
        n = refused = nameless = 0
        basic_b = {"Authorization": "Basic " + base64.b64encode(("alpha:" + tb).encode()).decode()}
        # /metrics: no token, wrong tokens 401; a tenant token (B's, A's own) 403
        tries = []
        for path in ("/metrics", "/metrics?tenant=alpha"):
            tries += [(path, {}, 401), (path, tok("0" * 64), 401),
                      (path, {"Authorization": "Bearer x"}, 401), (path, tok(tb), 403),
                      (path, {"Authorization": "Bearer " + tb}, 403), (path, basic_b, 403),
                      (path, tok(ta), 403)]
        tries += [("/metrics?u=alpha&p=" + tb, {}, 403), ("/metrics?u=alpha&p=nope", {}, 401)]
        for path, hdrs, want in tries:
            r = s.request("GET", path, None, hdrs)
            n += 1
            eq(r.status, want, "GET %s with %r (%r)" % (path, hdrs, r.body[:200]))
            text = r.body.decode()
            for name in ("alpha", "beta"):
                if name not in path:
                    check(name not in text, "%s answer names %s: %r" % (path, name, text))
            contains(json.loads(text)["error"],
                     "needs the admin token" if want == 403 else "authorization failed")
            refused += 1
        # the admin token, in every form the API takes, sees every tenant
        admin_basic = base64.b64encode(("x:" + s.token).encode()).decode()
        for hdrs, path in [(tok(s.token), "/metrics"),
                           ({"Authorization": "Bearer " + s.token}, "/metrics"),
                           ({"Authorization": "Basic " + admin_basic}, "/metrics"),
                           ({}, "/metrics?p=" + s.token)]:
            r = s.request("GET", path, None, hdrs)
            n += 1
            eq(r.status, 200, "admin %s %r" % (path, hdrs))
            text = r.body.decode()
            check(metric_lines(text, "alpha") and metric_lines(text, "beta"),
                  "admin's /metrics names both tenants")
        check(re.search(r'^bucketdb_tenant_samples_ingested_total\{tenant="alpha"\} [1-9]', text,
                        re.M), "alpha's ingestion counter for the admin")
        # /health: no token, a wrong one, B's and A's own: the refusal without a name
        for hdrs in ({}, tok("0" * 64), tok(tb), basic_b, tok(ta)):
            r = s.request("GET", "/health", None, hdrs)
            n += 1
            eq(r.status, 200, "/health with %r" % hdrs)
            last = r.json()["backpressure"]["last_tenant_refusal"]
            eq(last["tenant"], None, "last_tenant_refusal.tenant with %r" % hdrs)
            eq(last["reason"], "tenant_writes")
            check(last["ms_ago"] >= 0, "ms_ago %r" % last)
            check("alpha" not in r.body.decode(), "/health names alpha: %r" % r.body)
            nameless += 1
        r = s.request("GET", "/health", None, tok(s.token))
        n += 1
        eq(r.json()["backpressure"]["last_tenant_refusal"]["tenant"], "alpha",
           "the admin token sees the tenant")
        print("metrics: %d of %d requests without the admin token refused (401/403), none "
              "naming another tenant; health: %d of %d named no tenant; the admin token saw "
              "them in %d of %d" % (refused, refused, nameless, nameless, n - refused - nameless,
                                    n - refused - nameless))


@suite.test
def metrics_auth_modes():
    # loopback, auth = auto: /metrics is open while no tenant is registered ...
    with Server() as s:
        eq(s.get("/metrics").status, 200, "open without tenants")
        # a wrong token is no token where none is required (issue 19, item 2)
        eq(s.request("GET", "/metrics", None, tok("0" * 64)).status, 200, "a wrong token")
        make_tenant(s, "alpha")
        # ... and takes the admin token once one is (its name is in the families)
        r = s.get("/metrics")
        eq(r.status, 401, "no token with a registered tenant (%r)" % r.body[:200])
        check(b"alpha" not in r.body, "401 names the tenant")
        eq(s.request("GET", "/metrics", None, tok(s.token)).status, 200)
    # auth = off: registered tenants are still protected, so /metrics too
    with Server(args=["--auth", "off"]) as s:
        eq(s.get("/metrics").status, 200, "auth off, no tenant")
        make_tenant(s, "alpha")
        eq(s.get("/metrics").status, 401, "auth off, a registered tenant")
    # metrics_auth = open: no token (as before this setting), tokens ignored; /health
    # still names no tenant without the admin token
    with Server(args=["--auth", "on", "--metrics-auth", "open"]) as s:
        ta = make_tenant(s, "alpha")
        for hdrs in ({}, tok("0" * 64), tok(ta)):
            r = s.request("GET", "/metrics", None, hdrs)
            eq(r.status, 200, "metrics_auth = open with %r" % hdrs)
            contains(r.body.decode(), 'tenant="alpha"')
        eq(s.get("/api/v1/devices").status, 401, "the rest of the API still needs a token")


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
