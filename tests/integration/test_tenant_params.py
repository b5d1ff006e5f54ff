#!/usr/bin/env python3
"""The tenant a request names (issue 18, Tenants): a tenant token with `db` or `tenant`
naming another tenant is refused with 403 whichever of the two names it, a repeated
`tenant` or `db` parameter and a NUL byte (%00) in one are refused with 400 and a JSON
error, and nothing of a refused write is stored anywhere."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, contains, eq  # noqa: E402

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


if __name__ == "__main__":
    suite.main()
