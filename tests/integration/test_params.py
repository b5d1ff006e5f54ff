#!/usr/bin/env python3
"""Every numeric query parameter of every endpoint at the int64 extremes, just past
the documented time range, 0, -1, numbers too long for 64 bits and garbage, against
the real server: each answer is 2xx or a 4xx with a JSON error (never 5xx), a time
out of range is 400 naming the parameter and the range, and the server is still up
afterwards. Under the sanitizer build (tests/run sets halt_on_error) a signed
overflow aborts the server, so the next request fails and so does the test."""

import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, http_request  # noqa: E402

suite = Suite("params")

I64_MIN, I64_MAX = -9223372036854775808, 9223372036854775807
# docs/API.md "Times": the stored range plus its exclusive end
QT_MIN, QT_MAX = -9223372036854, 9223372036855
# the seed data: 30 minutes of the hour before last, so that tier retention keeps it
T0 = (int(time.time()) // 3600 - 2) * 3600000

IN_RANGE = [QT_MIN, QT_MAX, -1, 0, T0, "2024-01-15T14:00:00Z", "2262-04-11T23:47:16.855Z", "1677-09-21T00:12:43.146Z"]
OUT_OF_RANGE = [I64_MIN, I64_MAX, QT_MIN - 1, QT_MAX + 1, "99999999999999999999999",
                "-99999999999999999999999", "9999-12-31T23:59:59Z", "0000-01-01T00:00:00Z"]
GARBAGE = ["abc", "1e3", "0x10", " 5", "5 ", "+5", "-", "--1", "2024-13-01T00:00:00Z",
           "12:00", "1705327200000.5"]
COUNTS = [I64_MIN, I64_MAX, -1, 0, 1, 18446744073709551615, 18446744073709551616,
          "99999999999999999999999", "", "abc", "1e3", "0x10", " 5"]


def req(s, method, path, params):
    q = urllib.parse.urlencode([(k, str(v)) for k, v in params.items()])
    return http_request(s.port, method, path + ("?" + q if q else ""))


def sane(r, what):
    """2xx, or a 4xx with a JSON {"error": ...}; never a 5xx."""
    check(r.status < 500, "%s: %r" % (what, r))
    if r.status >= 400:
        check("error" in r.json(), "%s: no 'error' in %r" % (what, r))
    return r


def seeded(s):
    lines = "\n".join("m,device=seed,site=a v=%d %d" % (i, T0 + i * 60000) for i in range(30))
    s.write(lines, precision="ms")
    s.flush()


# (method, path, fixed parameters): every handler that parses a time
TIME_ROUTES = [
    ("GET", "/api/v1/query", {"device": "seed"}),
    ("GET", "/api/v1/query", {"device": "seed", "resolution": "1m"}),
    ("GET", "/api/v1/query", {"device": "seed", "resolution": "1h"}),
    ("GET", "/api/v1/query", {"device": "seed", "resolution": "1d"}),
    ("GET", "/api/v1/query", {"device": "seed", "resolution": "auto"}),
    ("GET", "/api/v1/query", {"device": "seed", "order": "desc", "limit": "3"}),
    ("GET", "/api/v1/devices/seed/partitions", {}),
    ("GET", "/api/v1/export", {}),
    ("GET", "/api/v1/fleet", {"metric": "m.v"}),
    ("GET", "/api/v1/fleet", {"metric": "m.v", "resolution": "1d"}),
    ("GET", "/api/v1/fleet/query", {"metric": "m.v", "resolution": "1m"}),
    ("GET", "/api/v1/fleet/query", {"metric": "m.v", "tag": "site:a", "resolution": "1d"}),
    ("GET", "/api/v1/telemetry_by_tenant", {}),
]


def time_params(path):
    return ["bucket", "from", "to"] if path.endswith("telemetry_by_tenant") else ["from", "to"]


@suite.test
def issue_18_overflows_are_400():
    """The three requests that aborted the sanitizer build (issue 18)."""
    with Server() as s:
        seeded(s)
        for path, params, name in (
                ("/api/v1/query", {"device": "seed", "to": I64_MIN}, "to"),
                ("/api/v1/query", {"device": "seed", "from": I64_MIN, "to": I64_MAX,
                                   "resolution": "1m"}, "from"),
                ("/api/v1/fleet", {"metric": "m.v", "resolution": "1d", "from": I64_MIN,
                                   "to": I64_MAX}, "from")):
            r = req(s, "GET", path, params)
            eq(r.status, 400, "%s %r: %r" % (path, params, r))
            contains(r.json()["error"], "'%s' is outside the supported time range "
                     "-9223372036854..9223372036855 ms" % name)
        eq(s.get("/health").status, 200)


@suite.test
def every_time_parameter_at_the_extremes():
    with Server() as s:
        seeded(s)
        n = 0
        for method, path, fixed in TIME_ROUTES:
            for name in time_params(path):
                for v in IN_RANGE + OUT_OF_RANGE + GARBAGE:
                    p = dict(fixed)
                    p[name] = v
                    if path.endswith("telemetry_by_tenant") and name != "bucket":
                        p["to" if name == "from" else "from"] = T0  # both are required
                    r = sane(req(s, method, path, p), "%s %r" % (path, p))
                    n += 1
                    if v in OUT_OF_RANGE:
                        eq(r.status, 400, "%s %r" % (path, p))
                        contains(r.json()["error"], "'%s' is outside the supported time "
                                 "range" % name)
                        contains(r.json()["error"], "%d..%d ms" % (QT_MIN, QT_MAX))
                    elif v in GARBAGE:
                        eq(r.status, 400, "%s %r" % (path, p))
                        contains(r.json()["error"], "invalid '%s'" % name)
            # both ends at once, in range and out of it, in every order
            ends = [QT_MIN, QT_MAX, I64_MIN, I64_MAX, 0, -1]
            for f in ends:
                for t in ends:
                    p = dict(fixed)
                    p.update({"from": f, "to": t})
                    r = sane(req(s, method, path, p), "%s %r" % (path, p))
                    n += 1
                    if f in (I64_MIN, I64_MAX) or t in (I64_MIN, I64_MAX):
                        eq(r.status, 400, "%s %r" % (path, p))
        print("time parameters: %d requests, no 5xx, every out-of-range time refused" % n)
        eq(s.get("/health").status, 200)
        r = s.query(device="seed", **{"from": T0, "to": T0 + 120000})
        eq(len(r["values"]), 2)  # the server still answers right


@suite.test
def counts_and_sizes_at_the_extremes():
    with Server(args=["--test-clock", "true"]) as s:
        seeded(s)
        auth = {"Authorization": "Token " + s.token}
        for v in COUNTS:
            sane(req(s, "GET", "/api/v1/query", {"device": "seed", "limit": v}), "limit %r" % v)
            r = sane(req(s, "GET", "/api/v1/late", {"limit": v}), "late limit %r" % v)
            if v not in (1,):
                eq(r.status, 400, "late limit %r" % v)
                contains(r.json()["error"], "'limit' must be 1..256")
            r = sane(req(s, "GET", "/api/v1/state/devices", {"state": "on", "limit": v}),
                     "state limit %r" % v)
            if v != 1:
                eq(r.status, 400, "state limit %r" % v)
                contains(r.json()["error"], "'limit'")
            r = sane(req(s, "PUT", "/api/v1/devices/prof/profile", {"max_rps": v}),
                     "max_rps %r" % v)
            if v not in (0, 1):
                eq(r.status, 400, "max_rps %r" % v)
                contains(r.json()["error"], "'max_rps' must be an integer 0..1000000")
            sane(req(s, "PUT", "/api/v1/devices/prof/profile", {"expected_interval": v}),
                 "expected_interval %r" % v)
            for name in ("now_ms", "advance_ms"):
                r = http_request(s.port, "POST", "/internal/clock?%s=%s"
                                 % (name, urllib.parse.quote(str(v))), b"", auth)
                sane(r, "%s %r" % (name, v))
                if v in (I64_MAX, 18446744073709551616, "99999999999999999999999"):
                    eq(r.status, 400, "%s %r: %r" % (name, v, r))
                    contains(r.json()["error"], "'%s' must be an integer" % name)
        # a huge limit is a number the parser must refuse, not wrap
        r = req(s, "GET", "/api/v1/query", {"device": "seed", "limit": "18446744073709551616"})
        eq(r.status, 400)
        contains(r.json()["error"], "invalid 'limit': must be an integer 0..18446744073709551615")
        eq(s.get("/health").status, 200)


@suite.test
def open_end_echoes_the_effective_bound():
    """A query with 'from' alone runs to the end of the stored time range, and says so
    (it said 4611686018427387903)."""
    with Server() as s:
        seeded(s)
        for res in (None, "1h"):
            q = s.query(device="seed", resolution=res, **{"from": T0})
            eq(q["to"], QT_MAX)
            eq(q["count"], 30 if res is None else 1)
        q = s.query(device="seed", **{"from": T0, "to": QT_MAX})
        eq(q["count"], 30)


if __name__ == "__main__":
    suite.main()
