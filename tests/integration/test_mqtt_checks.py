#!/usr/bin/env python3
"""The checks of the HTTP write path, on MQTT, against Debian's mosquitto
(docs/MQTT.md, "The HTTP path's checks, on MQTT"):

- the storage quota: a tenant at its storage_bytes has its messages rejected with
  PUBACK reason 0x97 (read from the broker's own log), counted, dead-lettered when a
  dead-letter topic is set; another tenant's messages flow;
- hot partitions under each policy (the server's test_clock freezes the minute the
  detector counts on, so nothing depends on timing): subbucket stores everything,
  ratelimit rejects the messages over the minute's allowance (0x97), sample stores
  exactly the stated fraction;
- a device profile's max_rps: a message over it is rejected (0x97) and dead-lettered;
- one admission order: a batch over two limits is refused for the same one over
  HTTP and over MQTT;
- the tenant's retention: a point older than the tenant's TTL is refused as "beyond
  retention policy" (a message of only such points is rejected with 0x99, a message
  with some is stored in part and counted partial);
- the storage failure path: with test_faults the engine's storage is made to fail
  (every later file operation fails with EIO: the WAL write fails, the engine turns
  read-only); the message is not acknowledged, the gateway reconnects and the broker
  re-sends it; after a restart of bucketdb every message the broker acknowledged to
  the publisher is stored;
- the example ACL file of docs/MQTT.md, taken from the document itself, with a
  password file: a tenant's user cannot publish into another tenant's topics,
  bucketdb's user reads every tenant and writes its dead-letter topic.

Each test can fail: remove a check from src/server/admission/admit.c or its mapping in
src/server/mqtt/mqtt_msg.c (or acknowledge a failed write in mqtt_gw.c) and the
matching test fails."""

import base64
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Suite, check, contains, eq, now_ms, path_with, tmpdir  # noqa: E402
from test_mqtt import (BASE, WAIT, Broker, metric, mqtt_server, rows,  # noqa: E402
                       settled_metric, wait_connected, wait_for)
from test_mqtt5 import Publisher, stored_seqs, sub_read, sub_session  # noqa: E402

suite = Suite("test_mqtt_checks")
DL = "bucketdb-dead/letters"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RC_QUOTA, RC_PAYLOAD = 0x97, 0x99


def admin(s, method, path, doc=None):
    hdrs = {"Authorization": "Token " + s.token, "Content-Type": "application/json"}
    r = s.request(method, "/api/v1/admin" + path,
                  json.dumps(doc) if doc is not None else None, hdrs)
    check(r.status in (200, 201), "%s %s (%d %r)" % (method, path, r.status, r.body[:300]))
    return r.json()


def result(s, name):
    return metric(s, 'bucketdb_mqtt_messages_total{result="%s"}' % name)


def settled(s, name, want, msg=""):
    """settled_metric for one result of bucketdb_mqtt_messages_total."""
    settled_metric(s, 'bucketdb_mqtt_messages_total{result="%s"}' % name, want, msg)


def pubacks(b, client, rc):
    """PUBACKs the broker received from client with reason code rc (mosquitto logs
    each with log_type all)."""
    return len(re.findall(r"Received PUBACK from %s \(Mid: \d+, RC:%d\)" % (re.escape(client), rc),
                          b.logtext_all()))


class LogBroker(Broker):
    """A Broker that logs every packet (PUBACK reason codes) and keeps the whole log."""

    def __init__(self, extra=""):
        Broker.__init__(self, "log_type all\n" + extra)

    def logtext_all(self):
        with open(os.path.join(self.dir, "broker.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")


def lp(dev, t_ms, i):
    return "m,device=%s v=%d %d" % (dev, i, t_ms * 10**6)


def mq(t_ms, i):
    """A line without a device tag: the topic names the device."""
    return "m v=%d %d" % (i, t_ms * 10**6)


# ------------------------------------------------------------ storage quota


@suite.test
def storage_quota_rejects_with_0x97_and_spares_other_tenants():
    with LogBroker() as b:
        sub_session(b, "bdbtest-sq-dl", DL, "mqttv5")
        s = mqtt_server(b, "bdbtest-sq")
        with s:
            sq = admin(s, "POST", "/tenants", {"name": "sq",
                                               "quotas": {"storage_bytes": 1000}})["token"]
            admin(s, "POST", "/tenants", {"name": "free"})
            wait_connected(s, b)
            # Fill sq over HTTP until the server refuses it (the usage tracker measures
            # once a second: bounded by WAIT, nothing asserted on time).
            deadline, i = time.monotonic() + WAIT, 0
            while True:
                check(time.monotonic() < deadline, "sq never reached its storage quota")
                body = "\n".join(lp("fill", BASE + i * 100 + k, k) for k in range(100))
                r = s.request("POST", "/write", body, {"Authorization": "Token " + sq})
                if r.status == 429:
                    break
                eq(r.status, 204, "fill (%r)" % r.body[:300])
                i += 1
                time.sleep(0.05)  # pacing only
            for k in range(3):
                check(b.publish("bucketdb/sq/q1/telemetry", lp("q1", BASE + k, k)))
            check(b.publish("bucketdb/free/f1/telemetry", lp("f1", BASE, 1)))
            wait_for("free's message", lambda: rows(s, "free", "f1") == [(BASE, "m.v", 1)],
                     [s.log()])
            wait_for("3 storage_quota", lambda: result(s, "storage_quota") == 3, [s.log()])
            eq(rows(s, "sq", "q1"), [], "nothing of a refused message is stored")
            settled(s, "accepted", 1)
            eq(pubacks(b, "bdbtest-sq", RC_QUOTA), 3, "PUBACK reason 0x97 (quota exceeded)")
            contains(s.log(), "storage quota exceeded: tenant 'sq' may store 1000 bytes")
            rej = admin(s, "GET", "/tenants/sq")["rejections"]
            check(rej["storage_bytes"] >= 4, "the refusals counted for sq: %r" % rej)
        # with a dead-letter topic the message goes there, acknowledged with success
        s.args += ["--mqtt-dead-letter-topic", DL]
        with s:
            wait_connected(s, b)
            # the restart measures anew; wait for the quota to bite again over HTTP
            wait_for("sq refused again", lambda: s.request(
                "POST", "/write", lp("fill", BASE, 0),
                {"Authorization": "Token " + sq}).status == 429, [s.log()])
            check(b.publish("bucketdb/sq/q2/telemetry", lp("q2", BASE, 7)))
            out = sub_read(b, "bdbtest-sq-dl", DL, "mqttv5", 1, "%P|%p")
            contains(out, "reason:storage quota exceeded: tenant 'sq' may store 1000 bytes",
                     "dead letter (%r)" % out)
            contains(out, "topic:bucketdb/sq/q2/telemetry")
            contains(out, "|" + lp("q2", BASE, 7))
            settled_metric(s, "bucketdb_mqtt_dead_letters_total", 1)
            eq(rows(s, "sq", "q2"), [])


# ------------------------------------------------------------ hot partitions


def set_clock(s, ms):
    r = s.request("POST", path_with("/internal/clock", {"now_ms": ms}), b"",
                  {"Authorization": "Token " + s.token})
    eq(r.status, 200, "POST /internal/clock (%r)" % r.body[:200])


def hot_msgs(b, tenant, dev, t0, n_msgs, per=10):
    """n_msgs messages of `per` reports each, one a second from t0 (the sub-buckets of
    a hot device start after the second of its newest sample)."""
    for m in range(n_msgs):
        body = "\n".join(mq(t0 + (m * per + k) * 1000, m * per + k) for k in range(per))
        check(b.publish("bucketdb/%s/%s/telemetry" % (tenant, dev), body, client="bdbtest-hp"))


@suite.test
def hot_partition_policies_over_mqtt():
    args = ["--test-clock", "true", "--hot-threshold", "20", "--hot-policy", "subbucket",
            "--hot-subbuckets", "4"]
    with LogBroker() as b:
        with mqtt_server(b, "bdbtest-hot", args=args) as s:
            t0 = (now_ms() // 60000 - 5) * 60000  # a minute boundary in the past
            set_clock(s, t0 + 1000)  # frozen: every message counts in one minute
            ev = t0 + 2000  # events after the clock: in the partition sub-bucketed from it
            admin(s, "POST", "/tenants", {"name": "samp",
                                          "hot": {"policy": "sample", "sample": 0.5}})
            admin(s, "POST", "/tenants", {"name": "rl",
                                          "hot": {"policy": "ratelimit", "rate_limit": 30}})
            wait_connected(s, b)
            # default tenant, subbucket: 5 x 10 reports, hot after the 20th, all stored
            hot_msgs(b, "default", "hot", ev, 5)
            # sample 0.5: 20 before the episode, then 1 in 2 of the other 30
            hot_msgs(b, "samp", "s1", ev, 5)
            # ratelimit 30 a minute while hot: reports 21..50 fit (3 messages), the
            # 6th and 7th messages would bring it to 40 and 50: rejected whole
            hot_msgs(b, "rl", "r1", ev, 7)
            check(b.publish("bucketdb/rl/calm/telemetry", lp("calm", t0, 1)))
            wait_for("rl's calm device", lambda: len(rows(s, "rl", "calm")) == 1, [s.log()])
            eq(len(rows(s, "default", "hot")), 50, "subbucket: everything stored")
            eq(len(rows(s, "samp", "s1")), 20 + 15, "sample: 20 + half of 30")
            eq(len(rows(s, "rl", "r1")), 50, "ratelimit: 5 messages of 10")
            eq(result(s, "hot_partition"), 2)
            eq(pubacks(b, "bdbtest-hot", RC_QUOTA), 2, "PUBACK 0x97 for the 2 rejected")
            settled(s, "accepted", 5 + 5 + 5 + 1, "the sampled messages count as accepted")
            contains(s.log(), "hot partition rate limit: device 'r1' of tenant 'rl' is hot")
            r = s.request("GET", "/api/v1/partitions/hot", None,
                          {"Authorization": "Token " + s.token})
            eq(r.status, 200)
            by = {(p["tenant"], p["device"]): p for p in r.json()["partitions"]}
            eq(sorted(by), [("default", "hot"), ("rl", "r1"), ("samp", "s1")])
            eq(by[("default", "hot")]["subbuckets"], 4)
            eq(by[("samp", "s1")]["sampled_out"], 15)
            eq(by[("rl", "r1")]["rejected"], 20)


# ------------------------------------------------------------ device profiles


@suite.test
def device_max_rps_rejects_with_0x97_and_dead_letters():
    with LogBroker() as b:
        sub_session(b, "bdbtest-rps-dl", DL, "mqttv5")
        with mqtt_server(b, "bdbtest-rps") as s:
            r = s.request("PUT", "/api/v1/devices/lim/profile", None,
                          {"Authorization": "Token " + s.token},
                          params={"tenant": "acme", "max_rps": 2})
            eq(r.status, 200, "PUT profile (%r)" % r.body[:300])
            wait_connected(s, b)
            # 3 reports of lim exceed its burst of 2 whatever the clock: rejected
            three = "\n".join(mq(BASE + k, k) for k in range(3))
            check(b.publish("bucketdb/acme/lim/telemetry", three))
            check(b.publish("bucketdb/acme/other/telemetry", three))
            wait_for("the other device", lambda: len(rows(s, "acme", "other")) == 3, [s.log()])
            eq(rows(s, "acme", "lim"), [])
            eq(result(s, "device_rate"), 1)
            eq(pubacks(b, "bdbtest-rps", RC_QUOTA), 1)
            contains(s.log(), "device 'lim' of tenant 'acme' may send 2 reports per second")
        with mqtt_server(b, "bdbtest-rps2", args=["--mqtt-dead-letter-topic", DL]) as s:
            r = s.request("PUT", "/api/v1/devices/lim/profile", None,
                          {"Authorization": "Token " + s.token},
                          params={"tenant": "acme", "max_rps": 2})
            eq(r.status, 200)
            wait_connected(s, b)
            check(b.publish("bucketdb/acme/lim/telemetry", three))
            out = sub_read(b, "bdbtest-rps-dl", DL, "mqttv5", 1, "%P|%p")
            contains(out, "reason:device rate limit exceeded: device 'lim' of tenant 'acme' may "
                     "send 2 reports per second", "dead letter (%r)" % out)
            contains(out, "|" + three.split("\n")[0])
            eq(result(s, "device_rate"), 1)
            eq(pubacks(b, "bdbtest-rps2", RC_QUOTA), 0, "dead-lettered: PUBACK success")


@suite.test
def http_and_mqtt_refuse_the_same_batch_for_the_same_limit():
    """One admission order (docs/RELIABILITY.md#admission): a batch over the tenant's
    device quota and over a device's max_rps is refused for the device quota by both
    protocols (the MQTT gateway used to check max_rps first), and neither takes the
    device's rate tokens for it."""
    with LogBroker() as b:
        with mqtt_server(b, "bdbtest-order") as s:
            tok = admin(s, "POST", "/tenants", {"name": "acme",
                                                "quotas": {"max_devices": 1}})["token"]
            auth = {"Authorization": "Token " + tok}
            r = s.request("PUT", "/api/v1/devices/lim/profile", None,
                          {"Authorization": "Token " + s.token},
                          params={"tenant": "acme", "max_rps": 2})
            eq(r.status, 200, "PUT profile (%r)" % r.body[:300])
            r = s.request("POST", "/write", lp("d1", BASE, 1), auth, params={"db": "acme"})
            eq(r.status, 204, "acme's one device (%r)" % r.body[:300])
            wait_connected(s, b)
            # 3 reports of a second device, lim, beyond its burst of 2 whatever the clock
            r = s.request("POST", "/write", "\n".join(lp("lim", BASE + k, k) for k in range(3)),
                          auth, params={"db": "acme"})
            eq(r.status, 429, "HTTP (%r)" % r.body[:300])
            eq(r.json()["limit"], "max_devices")
            check(b.publish("bucketdb/acme/lim/telemetry",
                            "\n".join(mq(BASE + k, k) for k in range(3))))
            wait_for("the MQTT refusal", lambda: result(s, "device_quota") == 1, [s.log()])
            eq(result(s, "device_rate"), 0, "refused for the device quota, not max_rps")
            eq(metric(s, "bucketdb_device_rate_rejections_total"), 0)
            eq(pubacks(b, "bdbtest-order", RC_QUOTA), 1)
            contains(s.log(), "quota exceeded: tenant 'acme' may have at most 1 devices; it has 1 "
                              "and this message would add 1")
            eq(rows(s, "acme", "lim"), [])


# ------------------------------------------------------------ retention


@suite.test
def tenant_retention_refuses_old_points():
    now = now_ms()
    old = now - 3 * 24 * 3600 * 1000  # 3 days: beyond short's 1 d, within the server's 30 d
    with LogBroker() as b:
        sub_session(b, "bdbtest-ret-dl", DL, "mqttv5")
        args = ["--retention-ms", "30d", "--mqtt-dead-letter-topic", DL]
        with mqtt_server(b, "bdbtest-ret", args=args) as s:
            admin(s, "POST", "/tenants", {"name": "short", "retention_ms": "1d"})
            wait_connected(s, b)
            check(b.publish("bucketdb/short/d1/telemetry", lp("d1", old, 1)))
            check(b.publish("bucketdb/short/d2/telemetry",
                            lp("d2", old, 1) + "\n" + lp("d2", now, 2)))
            check(b.publish("bucketdb/long/d3/telemetry", lp("d3", old, 3)))
            wait_for("long's old point (the server's 30 d)",
                     lambda: rows(s, "long", "d3") == [(old, "m.v", 3)], [s.log()])
            eq(rows(s, "short", "d2"), [(now, "m.v", 2)], "only the recent point")
            eq(rows(s, "short", "d1"), [])
            eq(result(s, "malformed"), 1, "a message of only too old points is rejected")
            settled(s, "partial", 1, "a message with some is stored in part")
            settled(s, "accepted", 1)
            log = s.log()
            contains(log, "beyond retention policy")
            contains(log, "partly stored message on 'bucketdb/short/d2/telemetry'")
            out = sub_read(b, "bdbtest-ret-dl", DL, "mqttv5", 1, "%P|%p")
            contains(out, "beyond retention policy", "dead letter (%r)" % out)
            contains(out, "topic:bucketdb/short/d1/telemetry")
        # without a dead-letter topic: PUBACK 0x99 (payload format invalid)
        with mqtt_server(b, "bdbtest-ret2", args=["--retention-ms", "30d"]) as s:
            admin(s, "POST", "/tenants", {"name": "short", "retention_ms": "1d"})
            wait_connected(s, b)
            check(b.publish("bucketdb/short/d1/telemetry", lp("d1", old, 1)))
            wait_for("the rejection", lambda: result(s, "malformed") == 1, [s.log()])
            # counted before the PUBACK is sent: the broker logs it a moment later
            wait_for("the PUBACK", lambda: pubacks(b, "bdbtest-ret2", RC_PAYLOAD) >= 1,
                     [b.logtext_all()])
            eq(pubacks(b, "bdbtest-ret2", RC_PAYLOAD), 1)


# ------------------------------------------------------------ storage failure


@suite.test
def storage_failure_is_not_acknowledged_and_redelivered_after_restart():
    topic = "bucketdb/acme/sf/telemetry"

    def msgs(seqs):
        return [(i, topic, b"seq v=%d %d" % (i, (BASE + i * 1000) * 10**6)) for i in seqs]

    with Broker() as b:
        s = mqtt_server(b, "bdbtest-sf", args=["--test-faults", "true"])
        with s:
            wait_connected(s, b)
            pub = Publisher(b.port, "bdbtest-sf-pub").send(msgs(range(10)))
            wait_for("the first 10", lambda: stored_seqs(s, "acme", "sf") == set(range(10)),
                     [s.log()])
            r = s.request("POST", "/internal/fault", b"", {"Authorization": "Token " + s.token})
            eq(r.status, 200, "POST /internal/fault (%r)" % r.body[:200])
            pub.send(msgs(range(10, 30)))
            wait_for("the write failure", lambda: result(s, "write_failed") >= 1, [s.log()])
            # not acknowledged: the gateway reconnects (>= 2 s later) and the broker
            # sends the message again, which fails again
            wait_for("a redelivery while storage fails",
                     lambda: metric(s, "bucketdb_mqtt_redeliveries_total") >= 1
                     and result(s, "write_failed") >= 2, [s.log(), b.logtext()])
            eq(stored_seqs(s, "acme", "sf"), set(range(10)), "nothing stored since the fault")
            settled(s, "accepted", 10)
            log = s.log()
            contains(log, "as 'bdbtest-sf' with MQTT 5 (session resumed)", "reconnected")
            contains(log, "not acknowledged, the broker keeps it")
            contains(log, "read-only")
            s.kill()  # storage is gone; what was acknowledged is in the WAL
        pub.close()
        acked = set(pub.acked)
        eq(len(pub.unacked), 0, "messages the broker did not acknowledge (broker-side)")
        s.args = [a for a in s.args if a not in ("--test-faults", "true")]
        with s:  # same data directory and client id: the session resumes
            wait_for("every acknowledged message after the restart",
                     lambda: stored_seqs(s, "acme", "sf") >= acked, [s.log(), b.logtext()])
            got = stored_seqs(s, "acme", "sf")
            print("  publisher: 30 sent, %d acknowledged by the broker; stored after the "
                  "restart %d, missing %d" % (len(acked), len(got), len(acked - got)))
            eq(got, set(range(30)))
            check(metric(s, "bucketdb_mqtt_redeliveries_total") >= 1, "redelivered with DUP")


# ------------------------------------------------------------ oversized messages


@suite.test
def oversized_message_is_dead_lettered_whole():
    """A message over max_body_bytes + 64 KiB is never parsed: with a dead-letter
    topic it is streamed there as it arrives (the gateway never holds it whole), byte
    for byte (MQTT 5) or base64 in the envelope (3.1.1), and the stream goes on."""
    big = "".join(chr(65 + (i * 7) % 26) for i in range(300000))
    d = tmpdir("bdbbig-")
    path = os.path.join(d, "big")
    with open(path, "w") as f:
        f.write(big)
    with Broker() as b:
        for version, client in (("5", "bdbtest-big5"), ("3.1.1", "bdbtest-big3")):
            # A subscriber per version: a mosquitto_sub -C 1 may leave its last message
            # unacknowledged, and a second read in the same session would get it again.
            dl_client = "bdbtest-big-dl" + version[0]
            sub_session(b, dl_client, DL, "mqttv5")
            args = ["--max-body-bytes", "4096", "--mqtt-dead-letter-topic", DL,
                    "--mqtt-version", version]
            with mqtt_server(b, client, args=args) as s:
                wait_connected(s, b)
                dev = "big" + version[0]
                r = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(b.port), "-q",
                                    "1", "-t", "bucketdb/acme/%s/telemetry" % dev, "-f", path],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
                eq(r.returncode, 0, "mosquitto_pub -f (%r)" % r.stdout)
                check(b.publish("bucketdb/acme/%s/telemetry" % dev, mq(BASE, 1)))
                wait_for("the message after the large one",
                         lambda: rows(s, "acme", dev) == [(BASE, "m.v", 1)], [s.log()])
                out = sub_read(b, dl_client, DL, "mqttv5", 1, "%P|%p")
                props, _, payload = out.rstrip("\n").partition("topic:bucketdb/acme/%s/"
                                                                "telemetry|" % dev)
                if version == "5":
                    contains(props, "reason:too large: 300000 bytes", "dead letter properties")
                    eq(len(payload), len(big), "dead letter length")
                    check(payload == big, "the dead letter is the original payload")
                else:
                    env = json.loads(out[out.index("{"):])
                    eq(env["topic"], "bucketdb/acme/%s/telemetry" % dev)
                    contains(env["reason"], "too large: 300000 bytes")
                    check(base64.b64decode(env["payload_base64"]).decode() == big,
                          "the envelope holds the original payload")
                settled_metric(s, "bucketdb_mqtt_dead_letters_total", 1)
                eq(result(s, "malformed"), 1)
                settled(s, "accepted", 1)
                contains(s.log(), "dead-lettered message on 'bucketdb/acme/%s/telemetry'" % dev)


# ------------------------------------------------------------ the documented ACL


def doc_acl():
    """The ACL example of docs/MQTT.md, as the document shows it."""
    with open(os.path.join(ROOT, "docs", "MQTT.md")) as f:
        text = f.read()
    m = re.search(r"```\n(# /etc/mosquitto/acl\n.*?)```", text, re.S)
    check(m, "docs/MQTT.md has no '# /etc/mosquitto/acl' example")
    return m.group(1)


@suite.test
def documented_acl_confines_tenants():
    d = tmpdir("bdbacl-")
    acl, pw = os.path.join(d, "acl"), os.path.join(d, "passwd")
    with open(acl, "w") as f:
        f.write(doc_acl())
    users = {"bucketdb": "bdb-secret", "acme": "acme-secret", "beta": "beta-secret"}
    for i, (u, p) in enumerate(sorted(users.items())):
        r = subprocess.run(["mosquitto_passwd", "-b"] + (["-c"] if i == 0 else []) + [pw, u, p],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=WAIT)
        eq(r.returncode, 0, "mosquitto_passwd (%r)" % r.stdout)
    os.chmod(pw, 0o600)
    conf = "allow_anonymous false\npassword_file %s\nacl_file %s\n" % (pw, acl)
    # the per-listener settings of Broker apply to its listener: replace allow_anonymous
    b = Broker(conf)
    with open(b.conf) as f:
        c = f.read().replace("allow_anonymous true\n", "")
    with open(b.conf, "w") as f:
        f.write(c)

    def pub(user, topic, payload, version="mqttv311"):
        r = subprocess.run(["mosquitto_pub", "-h", "127.0.0.1", "-p", str(b.port), "-q", "1",
                            "-V", version, "-u", user, "-P", users[user], "-t", topic, "-m",
                            payload], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=WAIT)
        return r.returncode, r.stdout.decode("utf-8", "replace")

    with b:
        args = ["--mqtt-username", "bucketdb", "--mqtt-password", users["bucketdb"],
                "--mqtt-dead-letter-topic", DL]
        with mqtt_server(b, "bdbtest-acl", args=args) as s:
            wait_connected(s, b)
            eq(pub("acme", "bucketdb/acme/a1/telemetry", lp("a1", BASE, 1))[0], 0)
            # acme into beta's tree: MQTT 3.1.1 acknowledges and drops, MQTT 5 refuses
            pub("acme", "bucketdb/beta/b1/telemetry", lp("b1", BASE, 66))
            rc, out = pub("acme", "bucketdb/beta/b1/telemetry", lp("b1", BASE, 67), "mqttv5")
            contains(out.lower(), "not authorized", "MQTT 5 publisher told (%r)" % out)
            eq(pub("beta", "bucketdb/beta/b1/telemetry", lp("b1", BASE + 1, 2))[0], 0)
            # a malformed message: bucketdb's user may write the dead-letter topic
            eq(pub("beta", "bucketdb/beta/b2/telemetry", "not line protocol")[0], 0)
            wait_for("both tenants' messages (bucketdb reads all)",
                     lambda: rows(s, "acme", "a1") == [(BASE, "m.v", 1)]
                     and rows(s, "beta", "b1") == [(BASE + 1, "m.v", 2)]
                     and result(s, "malformed") == 1, [s.log(), b.logtext()])
            eq(rows(s, "beta", "b1"), [(BASE + 1, "m.v", 2)], "acme's messages never reached beta")
            wait_for("the dead letter", lambda: metric(s, "bucketdb_mqtt_dead_letters_total") == 1,
                     [s.log(), b.logtext()])
            eq(metric(s, "bucketdb_mqtt_dead_letter_failures_total"), 0)
            settled(s, "accepted", 2)
            # a tenant cannot write forged dead letters
            rc, out = pub("acme", DL, "forged", "mqttv5")
            contains(out.lower(), "not authorized", "dead-letter topic (%r)" % out)
        # a wrong password is refused at CONNECT
        args = ["--mqtt-username", "bucketdb", "--mqtt-password", "wrong"]
        with mqtt_server(b, "bdbtest-acl2", args=args) as s:
            wait_for("the refusal", lambda: "refused the connection" in s.log(), [s.log()])
            eq(metric(s, "bucketdb_mqtt_connected"), 0)


if __name__ == "__main__":
    suite.main()
