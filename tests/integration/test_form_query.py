#!/usr/bin/env python3
"""Query parameters in a POST form body (docs/API.md#conventions, issue 18): a list
of 256 metric names of 256 bytes, which the API allows, does not fit in a URL (the
request head is limited to 32 KiB); the GET query endpoints take their parameters
also as a POST application/x-www-form-urlencoded body, with the same limits and the
same errors."""

import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq  # noqa: E402

suite = Suite("form_query")
T0 = 1705276800000  # 2024-01-15T00:00:00Z
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def post_form(s, path, fields, headers=None):
    h = dict(FORM)
    h.update(headers or {})
    return s.request("POST", path, urllib.parse.urlencode(fields, doseq=True).encode(), h)


@suite.test
def a_long_metric_list_in_a_form_body():
    keys = ["k%03d" % i + "x" * 250 for i in range(256)]  # field keys of 254 bytes
    metrics = ["g." + k for k in keys]  # 256 metric names of 256 bytes, the API's maximum
    check(all(len(m) == 256 for m in metrics))
    with Server() as s:
        s.write(["g,device=d %s=%d %d" % (k, i, T0 + i) for i, k in enumerate(keys)],
                precision="ms")
        fields = {"device": "d", "from": T0, "to": T0 + 1000, "metric": ",".join(metrics)}
        r = s.get("/api/v1/query", **fields)
        check(r.status in (400, 414, 431), "a 66 KB URL was taken: %r" % r)
        r = post_form(s, "/api/v1/query", fields)
        eq(r.status, 200, repr(r)[:300])
        doc = r.json()
        eq(doc["count"], 256)
        eq(sorted(v[1] for v in doc["values"]), sorted(metrics))
        # the same answer as a short GET, field for field
        few = dict(fields, metric=",".join(metrics[:3]))
        eq(post_form(s, "/api/v1/query", few).json(), s.get("/api/v1/query", **few).json())
        # '+' is a space, %XX a byte: as in a URL
        r = s.request("POST", "/api/v1/query",
                      b"device=d&from=2024-01-15T00%3A00%3A00Z&to=" + str(T0 + 1).encode(), FORM)
        eq((r.status, r.json()["count"]), (200, 1), repr(r))


@suite.test
def same_limits_and_errors_as_the_url():
    with Server() as s:
        s.write(["m,device=d v=1 %d" % T0], precision="ms")
        cases = [
            ("/api/v1/query", {"device": "d", "metric": ",".join("a%d" % i for i in range(257))}),
            ("/api/v1/query", {"device": "d", "to": "-9223372036854775808"}),
            ("/api/v1/query", {}),
            ("/api/v1/query", {"device": "d", "limit": "abc"}),
            ("/api/v1/devices", {"limit": "0"}),
            ("/api/v1/devices/d/partitions", {"from": "x"}),
            ("/api/v1/state/devices", {}),
            ("/api/v1/fleet/query", {"metric": "m.v", "tag": "nocolon"}),
            ("/api/v1/fleet/query", dict({"metric": "m.v"},
                                         **{"tag": ["k%d:v" % i for i in range(17)]})),
            ("/api/v1/late", {"limit": "257"}),
            ("/api/v1/export", {"device": "d", "from": "99999999999999999999"}),
            ("/api/v1/telemetry_by_tenant", {"bucket": "9223372036854775807"}),
        ]
        for path, fields in cases:
            g = s.request("GET", path + "?" + urllib.parse.urlencode(fields, doseq=True))
            p = post_form(s, path, fields)
            check(400 <= g.status < 500, "%s %r: GET %r" % (path, fields, g))
            eq((p.status, p.body), (g.status, g.body), "%s %r" % (path, fields))
        # a tenant given twice, once in the URL and once in the body, or with a NUL
        r = s.request("POST", "/api/v1/devices?tenant=a", b"tenant=b", FORM)
        eq(r.status, 400, repr(r))
        contains(r.json()["error"], "given 2 times")
        r = s.request("POST", "/api/v1/devices", b"tenant=b%00", FORM)
        eq(r.status, 400, repr(r))
        contains(r.json()["error"], "NUL")
        # the body's parameters name the tenant
        s.write(["m,device=other v=1 %d" % T0], precision="ms", tenant="t2")
        r = post_form(s, "/api/v1/devices", {"tenant": "t2"})
        eq([d["device"] for d in r.json()["devices"]], ["other"])
        # other content types, and a POST to a device profile, are as before
        r = s.request("POST", "/api/v1/query", b"device=d", {"Content-Type": "text/plain"})
        eq(r.status, 405, repr(r))
        r = post_form(s, "/api/v1/devices/d/profile", {"bucket": "15m"})
        eq((r.status, r.json()["pinned"]), (200, False), "profile: parameters in the URL only")
        # the body limit applies
        with Server(args=["--max-body-bytes", "1024"]) as small:
            r = post_form(small, "/api/v1/query", {"device": "d", "metric": "x" * 2000})
            eq(r.status, 413, repr(r))


if __name__ == "__main__":
    suite.main()
