#!/usr/bin/env python3
"""Hot partitions and telemetry_by_tenant over HTTP (docs/TENANCY.md#hot-partitions).

The server runs with test_clock = true, so POST /internal/clock (admin token only)
moves the wall clock the detector counts minutes on: nothing here sleeps or depends
on timing. One device per tenant writes 1,000 reports per request among quiet ones;
with a threshold of 600 reports per minute it is hot after its first request.

Checked: GET /api/v1/partitions/hot (tenant token: its own only; admin: all), the
/metrics families (gauge, episodes, rejected, sampled out, promotions), each policy
(subbucket: everything stored and returned by a range query, also after a restart;
sample: the stated fraction stored, the rest counted; ratelimit: a request over the
minute's allowance refused whole with 429 and Retry-After), the episode's end after a
quiet minute, GET /api/v1/telemetry_by_tenant, /internal/clock refused without the
admin token and absent without test_clock."""

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, now_ms, path_with  # noqa: E402

suite = Suite("test_hot_partitions")
ARGS = ["--test-clock", "true", "--hot-threshold", "600", "--hot-policy", "subbucket",
        "--hot-subbuckets", "4"]


def tok(t):
    return {"Authorization": "Token " + t}


def minute_start():
    """A minute boundary a few minutes in the past: events are never in the future."""
    return (now_ms() // 60000 - 5) * 60000


def set_clock(s, ms):
    r = s.request("POST", path_with("/internal/clock", {"now_ms": ms}), b"", tok(s.token))
    eq(r.status, 200, "POST /internal/clock (%r)" % r.body[:200])


def create_tenant(s, name, hot):
    r = s.request("POST", "/api/v1/admin/tenants",
                  ('{"name":"%s","hot":%s}' % (name, hot)).encode(), tok(s.token))
    eq(r.status, 201, "create tenant %s (%r)" % (name, r.body[:300]))
    return r.json()["token"]


def burst(dev, t0, n=1000):
    """n reports of dev at t0, t0 + 1 ms, ... (line protocol, ms precision)."""
    return "".join("m,device=%s v=%d %d\n" % (dev, i, t0 + i) for i in range(n)).encode()


def write(s, body, token=None, expect=204, **params):
    params.setdefault("precision", "ms")
    r = s.request("POST", path_with("/write", params), body,
                  tok(token) if token else tok(s.token))
    eq(r.status, expect, "POST /write (%r)" % r.body[:300])
    return r


def hot_list(s, token=None, **params):
    r = s.request("GET", path_with("/api/v1/partitions/hot", params), None,
                  tok(token or s.token))
    eq(r.status, 200, "GET /api/v1/partitions/hot (%r)" % r.body[:300])
    return r.json()


def stored(s, dev, token=None, **params):
    params.update({"device": dev, "from": 0, "to": 4102444800000, "limit": 0})
    r = s.request("GET", path_with("/api/v1/query", params), None, tok(token or s.token))
    eq(r.status, 200, "query %s (%r)" % (dev, r.body[:300]))
    return r.json()["count"]


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    check(m, "%s%s not in /metrics" % (name, labels))
    return float(m.group(1))


@suite.test
def hot_partition_policies_listing_and_metrics():
    with Server(args=ARGS) as s:
        t0 = minute_start()
        set_clock(s, t0 + 1000)
        samp = create_tenant(s, "samp", '{"policy":"sample","sample":0.5}')
        rl = create_tenant(s, "rl", '{"policy":"ratelimit","rate_limit":1500}')

        # default tenant (server policy: subbucket x4): 2 x 1,000 reports, 20 quiet devices
        write(s, burst("hot", t0))
        write(s, burst("hot", t0 + 1000))
        write(s, "".join("m,device=q%02d v=1 %d\n" % (i, t0 + i) for i in range(20)).encode())
        # samp: 2 x 1,000; hot from report 601: 400 + 1,000 in the episode, 1 in 2 kept
        write(s, burst("s1", t0), token=samp)
        write(s, burst("s1", t0 + 1000), token=samp)
        # rl: 1,000 (400 in the episode) + 1,000 (1,400) fit 1,500; the next does not
        write(s, burst("r1", t0), token=rl)
        write(s, burst("r1", t0 + 1000), token=rl)
        r = write(s, burst("r1", t0 + 2000), token=rl, expect=429)
        hdrs = {k.lower(): v for k, v in r.headers.items()}
        check(1 <= int(hdrs.get("retry-after", "0")) <= 60, "Retry-After %r" % hdrs)
        doc = r.json()
        eq(doc["device"], "r1")
        eq(doc["limit"], "hot_rate_limit")
        eq(doc["hot_rate_limit"], 1500)

        # The admin sees every hot partition; a tenant token only its own.
        lst = hot_list(s)
        eq(lst["count"], 3, "hot partitions %r" % lst)
        by = {(p["tenant"], p["device"]): p for p in lst["partitions"]}
        p = by[("default", "hot")]
        eq(p["policy"], "subbucket")
        eq(p["policy_subbuckets"], 4)
        eq(p["writes_this_minute"], 2000)
        eq(p["threshold"], 600)
        eq(p["bucket_start_ms"] <= t0 < p["bucket_end_ms"], True, "bucket of %r" % p)
        eq(p["subbuckets"], 4)
        eq(by[("samp", "s1")]["policy"], "sample")
        eq(by[("samp", "s1")]["sampled_out"], 700)
        eq(by[("rl", "r1")]["rejected"], 1000)
        own = hot_list(s, token=samp)
        eq([(p["tenant"], p["device"]) for p in own["partitions"]], [("samp", "s1")])
        r = s.request("GET", "/api/v1/partitions/hot?tenant=rl", None, tok(samp))
        eq(r.status, 403, "a tenant token naming another tenant")

        text = s.metrics_text()
        eq(metric(text, "bucketdb_hot_partitions", '{tenant="samp"}'), 1)
        eq(metric(text, "bucketdb_hot_partitions", '{tenant="(other)"}'), 1)
        eq(metric(text, "bucketdb_hot_episodes_total", '{tenant="rl"}'), 1)
        eq(metric(text, "bucketdb_hot_rejected_total", '{tenant="rl"}'), 1000)
        eq(metric(text, "bucketdb_hot_sampled_out_total", '{tenant="samp"}'), 700)
        eq(metric(text, "bucketdb_bucket_promotions_total"), 0)

        # Every stored sample comes back from a range query.
        eq(stored(s, "hot"), 2000)
        eq(stored(s, "s1", token=samp), 600 + 200 + 500)
        eq(stored(s, "r1", token=rl), 2000)

        # telemetry_by_tenant: events per device of the bucket holding t0.
        r = s.request("GET", path_with("/api/v1/telemetry_by_tenant", {"bucket": t0}), None,
                      tok(s.token))
        eq(r.status, 200, "telemetry_by_tenant (%r)" % r.body[:300])
        tbt = r.json()
        devs = {d["device"]: d["event_count"] for b in tbt["buckets"] for d in b["devices"]}
        eq(devs["hot"], 2000)
        eq(devs["q07"], 1)
        eq(len(devs), 21)
        eq(tbt["event_count"], 2020)
        r = s.request("GET", "/api/v1/telemetry_by_tenant", None, tok(samp))
        eq(r.status, 400, "no bucket and no range")
        contains(r.text, "bucket")

        # Two quiet minutes later every episode has ended, logged once.
        set_clock(s, t0 + 3 * 60000)
        eq(hot_list(s)["count"], 0)
        text = s.metrics_text()
        eq(metric(text, "bucketdb_hot_partitions", '{tenant="samp"}'), 0)
        eq(metric(text, "bucketdb_hot_episodes_total", '{tenant="samp"}'), 1)
        log = s.log()
        eq(log.count("hot partition detected: tenant default device hot"), 1)
        eq(log.count("hot partition ended: tenant default device hot"), 1)

        # After a restart the data (in sub-partitions) is all still there.
        s.restart()
        eq(stored(s, "hot"), 2000)


@suite.test
def clock_is_admin_only_and_test_only():
    with Server(args=ARGS) as s:
        r = s.request("POST", "/internal/clock?now_ms=1000", b"")
        eq(r.status, 403, "no token on loopback")
    with Server() as s:
        r = s.request("POST", "/internal/clock?now_ms=1000", b"", tok(s.token))
        eq(r.status, 404, "without test_clock the endpoint does not exist")


@suite.test
def bad_hot_settings_are_refused():
    with Server(args=ARGS) as s:
        r = s.request("POST", "/api/v1/admin/tenants", b'{"name":"x","hot":{"subbuckets":99}}',
                      tok(s.token))
        eq(r.status, 400)
        contains(r.text, "hot.subbuckets")
        r = s.request("POST", "/api/v1/admin/tenants", b'{"name":"x","hot":{"policy":"fast"}}',
                      tok(s.token))
        eq(r.status, 400)
        contains(r.text, "hot.policy")


@suite.test
def long_hot_device_named_whole():
    # The 429 once copied the hot device's name into 256 bytes: with max_key_bytes
    # above that, a long device was named by a prefix.
    dev = "H" * 600 + "-end"
    with Server(args=ARGS + ["--max-key-bytes", "2000", "--max-tag-value-bytes", "2000"]) as s:
        t0 = minute_start()
        set_clock(s, t0 + 1000)
        rl = create_tenant(s, "rl", '{"policy":"ratelimit","rate_limit":500}')
        write(s, burst(dev, t0), token=rl)  # hot from report 601, 400 kept in the episode
        r = write(s, burst(dev, t0 + 1000), token=rl, expect=429)
        doc = r.json()
        eq(doc["device"], dev)
        contains(doc["error"], "device '%s' of tenant 'rl' is hot" % dev)
        eq(stored(s, dev, token=rl), 1000)


if __name__ == "__main__":
    suite.main()
