#!/usr/bin/env python3
"""Tenant isolation through MQTT topics, with Debian's mosquitto (issue 8: "tenant B
can see nothing of tenant A through any endpoint, parameter, header or topic").

One broker and one server subscribed to bucketdb/# (so that odd topics reach the
gateway and its topic scheme decides, not the subscription), default scheme
+/{tenant}/{device}/#, tenants alpha and beta registered. alpha's devices publish N
ordinary messages and a list of topic tricks: wildcards in a published topic, empty
levels, "..", very long levels, a $share prefix, unicode, spaces, payloads naming
another tenant. Every trick is either refused (by mosquitto or by the gateway) or
stored under the tenant its topic names, never anywhere else; and nothing of alpha's
reaches beta, checked through beta's export with the admin token and with beta's own
token (0 of N). Reuses test_mqtt.py's Broker. Without mosquitto the test FAILS with
the reason."""

import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, eq  # noqa: E402
from test_mqtt import WAIT, Broker, metric, wait_connected  # noqa: E402

suite = Suite("test_mqtt_isolation")
BASE = 1700000000000
MARK = "zqalpha"  # in every device name alpha uses: found anywhere else is a leak
N = 40
# every result the gateway counts a message under (mqtt_gw.c result_names)
RESULTS = ("accepted", "partial", "malformed", "write_failed", "over_burst", "device_rate",
           "device_quota", "storage_quota", "hot_partition")


def admin(s):
    return {"Authorization": "Token " + s.token}


def make_tenant(s, name):
    r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name, "quotas": {}}),
                  dict(admin(s), **{"Content-Type": "application/json"}))
    eq(r.status, 201, "create %s: %r" % (name, r))
    return r.json()["token"]


def export(s, tenant, token=None):
    """The export lines of tenant (admin token unless a tenant token is given)."""
    hdr = {"Authorization": "Token " + token} if token else admin(s)
    params = None if token else {"tenant": tenant}
    r = s.request("GET", "/api/v1/export", None, hdr, params=params)
    if r.status == 404:
        return []
    eq(r.status, 200, "export of %r: %r" % (tenant, r.body[:200]))
    return [ln for ln in r.text.splitlines() if ln]


# (topic, payload, where it may land: a tenant name, or None = must be refused)
LP = "env,x=1 v=%d %d"


def tricks():
    long_dev = MARK + "-" + "d" * 300
    return [
        ("bucketdb/alpha/+/telemetry", "wildcard +", None),
        ("bucketdb/alpha/#", "wildcard #", None),
        ("bucketdb/+/%s-w/telemetry" % MARK, "wildcard tenant", None),
        ("bucketdb//%s-emptyten/telemetry" % MARK, "empty tenant level", None),
        ("bucketdb/alpha//telemetry", "empty device level", None),
        ("bucketdb/../%s-dotdot/telemetry" % MARK, "dot-dot tenant", ".."),
        ("bucketdb/alpha/../telemetry", "dot-dot device", "alpha"),
        ("bucketdb/alpha/../beta/%s-trav/telemetry" % MARK, "traversal", "alpha"),
        ("bucketdb/alpha/%s-x/../../beta/y/telemetry" % MARK, "traversal 2", "alpha"),
        ("$share/g/bucketdb/beta/%s-share/telemetry" % MARK, "$share prefix", None),
        ("bucketdb/" + "a" * 129 + "/%s-longten/telemetry" % MARK, "129-byte tenant", None),
        ("bucketdb/alpha/%s/telemetry" % long_dev, "long device", "alpha"),
        ("bucketdb/alph\u00e4/%s-uniten/telemetry" % MARK, "unicode tenant", None),
        ("bucketdb/alpha/%s-\u00fcni/telemetry" % MARK, "unicode device", "alpha"),
        ("bucketdb/beta /%s-space/telemetry" % MARK, "space in tenant", None),
        ("bucketdb/beta\\/%s-bs/telemetry" % MARK, "backslash in tenant", None),
        ("bucketdb/alpha,tenant=beta/%s-comma/telemetry" % MARK, "comma in tenant", None),
        ("bucketdb/alpha/%s-comma,tenant=beta/telemetry" % MARK, "comma in device", "alpha"),
    ]


def value(line):
    """The number a test message carried (LP field v, or JSON metric v = field value)."""
    m = re.search(r" (?:v|value)=(\d+) \d+$", line)
    return int(m.group(1)) if m else None


def lp_body(i):
    return LP % (i, (BASE + i * 1000) * 10**6)


@suite.test
def topics_never_cross_tenants():
    with Broker() as b:
        with Server(args=["--mqtt-broker", "127.0.0.1:%d" % b.port, "--mqtt-client-id",
                          "bdbtest-iso", "--mqtt-topics", "bucketdb/#"]) as s:
            make_tenant(s, "alpha")
            tb = make_tenant(s, "beta")
            wait_connected(s, b)
            # ordinary traffic: alpha's devices, some payloads naming beta in their body
            for i in range(N):
                dev = "%s-%02d" % (MARK, i % 8)
                if i % 4 == 0:
                    payload = lp_body(i)
                elif i % 4 == 1:  # an LP tag named tenant is a tag, not a tenant
                    payload = "env,tenant=beta v=%d %d" % (i, (BASE + i * 1000) * 10**6)
                elif i % 4 == 2:  # a report naming another device stays in the tenant
                    payload = json.dumps({"reports": [{"device": dev + "-rep", "tenant": "beta",
                                                       "time": BASE + i * 1000,
                                                       "metrics": {"v": i}}]})
                else:
                    payload = json.dumps({"time": BASE + i * 1000, "metrics": {"v": i},
                                          "tags": {"tenant": "beta"}})
                check(b.publish("bucketdb/alpha/%s/telemetry" % dev, payload, client="iso-a"),
                      "broker refused an ordinary publish")
            # beta's own traffic
            for i in range(5):
                check(b.publish("bucketdb/beta/zqbeta-dev/telemetry", lp_body(i),
                                client="iso-b"))
            refused_by_broker = 0
            for k, (topic, what, _) in enumerate(tricks()):
                if not b.publish(topic, lp_body(1000 + k), client="iso-t%d" % k):
                    refused_by_broker += 1
            # a last message on beta's topic: mosquitto_pub exits after its PUBACK, so the
            # broker got the messages in this order and delivers them so to the one
            # subscriber; wait for the last one
            check(b.publish("bucketdb/beta/zqbeta-last/telemetry", lp_body(99), client="iso-b"))

            def beta_done():
                return any("zqbeta-last" in ln for ln in export(s, "beta"))
            deadline = time.monotonic() + WAIT
            while not beta_done() and time.monotonic() < deadline:
                time.sleep(0.1)
            check(beta_done(), "the last message on beta's topic never arrived\n" + s.log())
            total = lambda: sum(metric(s, 'bucketdb_mqtt_messages_total{result="%s"}' % r)
                                for r in RESULTS)
            # ...and until the counts stop moving (a $share topic, say, has no subscriber
            # and is never delivered, so the number to expect is not known up front)
            last = -1
            while total() != last and time.monotonic() < deadline:
                last = total()
                time.sleep(0.5)

            beta_admin = export(s, "beta")
            beta_own = export(s, "beta", token=tb)
            leaks = [ln for ln in beta_admin + beta_own if MARK in ln]
            eq(leaks, [], "alpha's data in beta (admin view and beta's token)")
            eq(len([ln for ln in beta_own if "zqbeta" in ln]), 6, "beta's own samples")
            alpha = export(s, "alpha")
            # every ordinary message in alpha: 8 devices (+ report devices) x samples
            got = sum(1 for ln in alpha if value(ln) is not None and value(ln) < N)
            eq(got, N, "alpha's ordinary samples stored in alpha\n" + "\n".join(alpha[:60]))
            # each trick: in its own tenant or nowhere; never in beta or default
            places = {}
            for t in ("alpha", "beta", "default", ".."):
                for ln in export(s, t):
                    if value(ln) is not None and value(ln) >= 1000:
                        places.setdefault(value(ln) - 1000, []).append(t)
            wrong = []
            for k, (topic, what, where) in enumerate(tricks()):
                got_in = places.get(k, [])
                if where is None and got_in:
                    wrong.append("%s (%r) stored in %s; want refused" % (what, topic[:60], got_in))
                elif where is not None and got_in not in ([], [where]):
                    wrong.append("%s (%r) stored in %s; want %s or refused"
                                 % (what, topic[:60], got_in, where))
            eq(wrong, [], "topic tricks")
            stored = sum(1 for k in range(len(tricks())) if places.get(k))
            print("    mqtt isolation figures: %d alpha messages, 0 of %d lines of beta are "
                  "alpha's; %d topic tricks: %d refused by mosquitto, %d stored in the "
                  "tenant their topic names, %d refused by the gateway"
                  % (N, len(beta_admin), len(tricks()), refused_by_broker, stored,
                     len(tricks()) - refused_by_broker - stored))


if __name__ == "__main__":
    suite.main()
