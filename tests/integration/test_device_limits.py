#!/usr/bin/env python3
"""Device profiles: PUT /api/v1/devices/<id>/profile?max_rps=N&expected_interval=10s
sets a per-device limit of reports per second (burst max(1, max_rps)), enforced on
line protocol and JSON writes. A request over a device's limit is refused whole with
429, Retry-After and a JSON body naming the device, the limit and the value; nothing
of it is written; other devices are unaffected; the refusal is counted in /metrics;
profiles survive a restart (<data>/profiles); over MQTT (Debian's mosquitto) a
message over a device's limit is dropped and counted, and later messages flow.

No assertion depends on timing: a request holding more reports of a device than its
burst is refused whatever the clock says, and a run of single-report requests at
max_rps=1 is only required to contain at least one refusal when the requests come
faster than one per second, which the test checks from its own clock."""

import os
import re
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, TestFailure, check, contains, eq  # noqa: E402
from test_mqtt import Broker  # noqa: E402

suite = Suite("test_device_limits")
BASE = 1700000000000


def span():
    return {"from": 0, "to": 4102444800000}


def set_profile(s, dev, expect=200, **params):
    r = s.request("PUT", "/api/v1/devices/%s/profile" % urllib.parse.quote(dev, safe=""),
                  params=params)
    eq(r.status, expect, "PUT profile %s %r (%r)" % (dev, params, r.body[:300]))
    return r


def lp(dev, i):
    return "m,device=%s v=%d %d" % (dev, i, (BASE + i) * 1000000)


def rows(s, dev):
    """Samples stored for dev (a device never written is unknown: 404, none)."""
    r = s.query(expect=None, device=dev, **span())
    if getattr(r, "status", 200) == 404:
        return 0
    eq(r["count"], len(r["values"]), "count vs values")
    return len(r["values"])


@suite.test
def profile_set_and_validated():
    with Server() as s:
        doc = set_profile(s, "sensor-1", max_rps=2, expected_interval="10s").json()
        eq(doc["max_rps"], 2)
        eq(doc["expected_interval_ms"], 10000)
        set_profile(s, "sensor-1", expect=400, max_rps="-1")
        set_profile(s, "sensor-1", expect=400, max_rps="abc")
        set_profile(s, "sensor-1", expect=400, max_rps="1000001")
        set_profile(s, "sensor-1", expect=400, expected_interval="soon")
        # the bucket still works, alone or with a rate
        set_profile(s, "sensor-1", bucket="1h", max_rps=3)
        check(os.path.exists(os.path.join(s.data, "profiles")), "profiles file written")


@suite.test
def over_limit_refused_whole_with_retry_after():
    with Server() as s:
        set_profile(s, "hot", max_rps=2, expected_interval="1s")
        # three reports of "hot" can never fit its burst of 2: refused whole, with
        # the quiet device's line of the same request
        r = s.write([lp("hot", 1), lp("quiet", 1), lp("hot", 2), lp("hot", 3)], expect=429)
        check(int(r.headers.get("retry-after", "0")) >= 1, "Retry-After: %r" % r.headers)
        doc = r.json()
        eq(doc["device"], "hot")
        eq(doc["limit"], "max_rps")
        eq(doc["max_rps"], 2)
        eq(doc["value"], 3)
        contains(doc["error"], "nothing of it was written")
        eq(rows(s, "hot"), 0)
        eq(rows(s, "quiet"), 0)
        # the JSON path too
        rep = [{"device": "hot", "time": BASE + i, "metrics": {"v": i}} for i in range(3)]
        r = s.write_json({"reports": rep}, expect=429)
        eq(r.json()["device"], "hot")
        eq(rows(s, "hot"), 0)
        # within the burst: written
        s.write([lp("hot", 10), lp("hot", 11)])
        eq(rows(s, "hot"), 2)
        # other devices are unaffected
        for i in range(20):
            s.write([lp("quiet", 100 + i)] * 1)
        eq(rows(s, "quiet"), 20)
        contains(s.metrics_text(), "bucketdb_device_rate_rejections_total 2")


@suite.test
def long_device_name_named_whole():
    # The 429 once copied the device name into 256 bytes: with max_key_bytes above
    # that, a long device was named by a prefix in its "device" field and message.
    dev = "L" * 600 + "-end"
    with Server(args=["--max-key-bytes", "2000", "--max-tag-value-bytes", "2000"]) as s:
        set_profile(s, dev, max_rps=1)
        r = s.write([lp(dev, 1), lp(dev, 2)], expect=429)
        doc = r.json()
        eq(doc["device"], dev)
        contains(doc["error"], "device '%s' of tenant" % dev)
        eq(rows(s, dev), 0)
        rep = [{"device": dev, "time": BASE + i, "metrics": {"v": i}} for i in range(2)]
        eq(s.write_json({"reports": rep}, expect=429).json()["device"], dev)
        eq(rows(s, dev), 0)


@suite.test
def sustained_rate_refused():
    with Server() as s:
        set_profile(s, "one", max_rps=1)
        ok = refused = 0
        t0 = time.monotonic()
        for i in range(5):
            r = s.write([lp("one", i)], expect=None)
            check(r.status in (204, 429), "status %r" % r)
            if r.status == 204:
                ok += 1
            else:
                refused += 1
                check(int(r.headers.get("retry-after", "0")) >= 1, "Retry-After")
        elapsed = time.monotonic() - t0
        # every answer is exact: what was acknowledged is stored, nothing else
        eq(rows(s, "one"), ok)
        check(ok >= 1, "the first request fits the burst")
        if elapsed < 4.0:  # 5 requests within 4 s cannot all fit 1 report/s
            check(refused >= 1, "no refusal in %.1f s" % elapsed)


@suite.test
def profile_survives_restart_and_zero_lifts():
    with Server() as s:
        set_profile(s, "dev/a b", max_rps=1, expected_interval="30s")
        set_profile(s, "other", max_rps=5)
        s.restart()
        s.write([lp("x", 0)])  # server up
        r = s.write([lp("dev/a\\ b", 1), lp("dev/a\\ b", 2)], expect=429)
        eq(r.json()["device"], "dev/a b")
        r = s.write([lp("other", i) for i in range(6)], expect=429)
        eq(r.json()["max_rps"], 5)
        # max_rps=0 removes the limit, and that survives a restart too
        doc = set_profile(s, "other", max_rps=0).json()
        eq(doc["expected_interval_ms"], 0)
        s.restart()
        s.write([lp("other", i) for i in range(6)])
        eq(rows(s, "other"), 6)


WAIT = 90.0  # bound of every wait on the MQTT path


def metric(s, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), s.metrics_text(), re.M)
    return int(m.group(1)) if m else 0


def wait_for(what, fn):
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.1)
    raise TestFailure("timed out waiting for " + what)


@suite.test
def mqtt_message_over_limit_dropped_and_counted():
    with Broker() as broker:
        port = broker.port
        with Server(args=["--mqtt-broker", "127.0.0.1:%d" % port,
                          "--mqtt-client-id", "bdbtest-dl"]) as s:
            auth = {"Authorization": "Token " + s.token}
            r = s.request("PUT", "/api/v1/devices/hot/profile", None, auth,
                          params={"tenant": "acme", "max_rps": 2})
            eq(r.status, 200, "PUT profile (%r)" % r.body[:300])
            wait_for("the gateway to connect",
                     lambda: metric(s, "bucketdb_mqtt_connected") == 1)

            def pub(payload):
                rc = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port),
                                     "-q", "1", "-t", "bucketdb/acme/hot/telemetry", "-m",
                                     payload], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, timeout=WAIT).returncode
                eq(rc, 0, "mosquitto_pub")
            # three reports of "hot" exceed its burst of 2 whatever the clock: dropped
            pub("\n".join(lp("hot", i) for i in range(3)))
            wait_for("the drop to be counted",
                     lambda: metric(s, "bucketdb_device_rate_rejections_total") == 1)
            # a later message within the limit is stored: the drop did not block
            pub(lp("hot", 50))

            def stored():
                q = s.request("GET", "/api/v1/query", None, auth,
                              params=dict(span(), tenant="acme", device="hot"))
                return q.status == 200 and len(q.json()["values"]) == 1
            wait_for("the good message", stored)
            contains(s.log(), "device rate limit exceeded: device 'hot'")


suite.main()
