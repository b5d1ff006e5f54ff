#!/usr/bin/env python3
"""The tenant a request names (issue 18, Tenants): a tenant token with `db` or `tenant`
naming another tenant is refused with 403 whichever of the two names it, a repeated
`tenant` or `db` parameter and a NUL byte (%00) in one are refused with 400 and a JSON
error, and nothing of a refused write is stored anywhere; the rule for the name a tenant is
registered under (`.`, `..`, `admin`, `api`, `default` and the server's default_tenant
reserved), in the admin API and `bucketdb tenant create`."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, run_bin  # noqa: E402

suite = Suite("tenant_params")
T0 = 1705327200000
LINE = "m,device=d1 v=1 %d\n" % T0


def tok(t):
    return {"Authorization": "Token " + t}


def create(s, name):
    r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name}),
                  dict(tok(s.token), **{"Content-Type": "application/json"}))
    eq(r.status, 201, r.text)
    return r.json()["token"]


def stored(s, tenant):
    r = s.request("GET", "/api/v1/query?device=d1&from=%d&to=%d&tenant=%s"
                  % (T0, T0 + 1000, tenant), None, tok(s.token))
    if r.status == 404:
        return 0
    eq(r.status, 200, r.text)
    return r.json()["count"]


def refused(r, status, needle):
    eq(r.status, status, "%r" % r.body[:300])
    eq(r.headers.get("content-type", "").split(";")[0], "application/json")
    contains(r.json()["error"], needle)


@suite.test
def token_tenant_with_other_db_is_forbidden():
    with Server() as s:
        acme = create(s, "acme")
        create(s, "globex")
        for path in ("/write?precision=ms&tenant=acme&db=globex",
                     "/write?precision=ms&db=acme&tenant=globex",
                     "/write?precision=ms&db=globex",
                     "/api/v2/write?precision=ms&tenant=acme&db=globex"):
            refused(s.request("POST", path, LINE, tok(acme)), 403,
                    "may not access tenant 'globex'")
        r = s.request("GET", "/api/v1/query?device=d1&from=0&to=%d&tenant=acme&db=globex"
                      % (T0 + 1000), None, tok(acme))
        refused(r, 403, "may not access tenant 'globex'")
        eq(stored(s, "acme"), 0)
        eq(stored(s, "globex"), 0)
        # Naming its own tenant in both is fine.
        eq(s.request("POST", "/write?precision=ms&tenant=acme&db=acme", LINE,
                     tok(acme)).status, 204)
        eq(stored(s, "acme"), 1)


@suite.test
def repeated_tenant_or_db_is_refused():
    with Server() as s:
        acme = create(s, "acme")
        for hdrs in (None, tok(s.token), tok(acme)):
            for q in ("tenant=a1&tenant=b1", "db=a1&db=b1", "tenant=acme&tenant=acme"):
                r = s.request("POST", "/write?precision=ms&" + q, LINE, hdrs)
                refused(r, 400, "give it once")
            r = s.request("GET", "/api/v1/query?device=d1&from=0&to=%d&db=a1&db=b1"
                          % (T0 + 1000), None, hdrs)
            refused(r, 400, "give it once")
        for t in ("a1", "b1", "acme"):
            eq(stored(s, t), 0)


@suite.test
def nul_byte_in_tenant_is_refused():
    with Server() as s:
        acme = create(s, "acme")
        for hdrs in (None, tok(s.token), tok(acme)):
            for q in ("tenant=b1%00", "db=b1%00x", "tenant=acme%00", "db=acme%00"):
                r = s.request("POST", "/write?precision=ms&" + q, LINE, hdrs)
                refused(r, 400, "NUL byte")
        for t in ("b1", "acme"):
            eq(stored(s, t), 0)


def admin_list(s):
    r = s.request("GET", "/api/v1/admin/tenants", None, tok(s.token))
    eq(r.status, 200, r.text)
    return [t["name"] for t in r.json()["tenants"]]


@suite.test
def reserved_and_bad_tenant_names_cannot_be_registered():
    with Server() as s:
        hdrs = dict(tok(s.token), **{"Content-Type": "application/json"})
        for name, needle in ((".", "start with a letter or a digit"),
                             ("..", "start with a letter or a digit"),
                             (".hidden", "start with a letter or a digit"),
                             ("-x", "start with a letter or a digit"),
                             ("_x", "start with a letter or a digit"),
                             ("admin", "reserved"), ("api", "reserved"),
                             ("default", "reserved"), ("Default", "reserved"),
                             ("ADMIN", "reserved"), ("", "1..128 characters"),
                             ("a" * 129, "1..128 characters"), ("a/b", "1..128 characters")):
            r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name}), hdrs)
            refused(r, 400, needle)
        eq(admin_list(s), [])
        # The README's anonymous writes keep working on loopback.
        eq(s.request("POST", "/write?precision=ms", LINE).status, 204)
        eq(s.request("POST", "/write?precision=ms&db=default", LINE).status, 204)
        # Names that follow the rule, at the length limit too.
        for name in ("a", "0", "acme.eu-1_x", "b" * 128, "defaults", "api2"):
            create(s, name)
        eq(sorted(admin_list(s)), sorted(["a", "0", "acme.eu-1_x", "b" * 128, "defaults",
                                          "api2"]))
        # The CLI refuses them before asking the server.
        base = ["--server", "http://127.0.0.1:%d" % s.port, "--admin-token", s.token]
        for name in ("..", "default", "admin", "api"):
            rc, out, err = run_bin(["tenant", "create", name] + base)
            eq(rc, 2, "tenant create %s: %r %r" % (name, out, err))
            check("reserved" in err or "start with a letter" in err, err)
        eq(len(admin_list(s)), 6)


@suite.test
def the_configured_default_tenant_cannot_be_registered():
    with Server(args=["--default-tenant", "fleet"]) as s:
        hdrs = dict(tok(s.token), **{"Content-Type": "application/json"})
        r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": "fleet"}), hdrs)
        refused(r, 400, "default_tenant")
        eq(s.request("POST", "/write?precision=ms", LINE).status, 204)
        eq(stored(s, "fleet"), 1)


if __name__ == "__main__":
    suite.main()
