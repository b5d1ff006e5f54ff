#!/usr/bin/env python3
"""`bucketdb load --mqtt` against Debian's mosquitto started by the test (docs/OPERATIONS.md):
- the simulator publishes its reports to the broker (QoS 1, MQTT 5) and a bucketdb
  server subscribed to the broker stores exactly what the summary says the broker
  acknowledged, per device; the same flags over HTTP into a second server give
  identical answers for every device (the same deterministic reports);
- with a password file and an ACL: wrong password = the connection is refused, exit 1,
  nothing acknowledged; a topic the ACL denies = PUBACKs with 0x87, counted as
  refused (mosquitto 2.0 then resets the connection: the rest stay unacknowledged),
  nothing is acknowledged, exit 1, and nothing of that tenant is stored.
Without mosquitto every test FAILS with the reason (test_mqtt.Broker)."""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, eq, check, contains, now_ms, run_bin, MIN  # noqa: E402
from test_mqtt import Broker, mqtt_server, wait_connected  # noqa: E402
from test_ops import query_all, stored  # noqa: E402

suite = Suite("ops_mqtt")
WAIT = 60


def load(*args, want_rc=0):
    rc, out, err = run_bin(["load", "--json"] + list(args), timeout=120)
    eq(rc, want_rc, "load exit status (stderr %r, stdout %r)" % (err, out))
    return json.loads(out)


def wait_stored(srv, tenant, samples):
    """Waits (bounded) until the server holds `samples` samples of tenant, then checks
    that no more arrive."""
    deadline = time.monotonic() + WAIT
    got = None
    while time.monotonic() < deadline:
        got = stored(srv, tenant)[1] if devices_of(srv, tenant) else 0
        if got >= samples:
            break
        time.sleep(0.2)
    time.sleep(0.5)
    eq(stored(srv, tenant)[1] if devices_of(srv, tenant) else 0, samples,
       "samples stored for %s (saw %r before)" % (tenant, got))


def devices_of(srv, tenant):
    r = srv.request("GET", "/api/v1/devices", params={"tenant": tenant},
                    headers={"Authorization": "Token " + srv.token})
    return r.status == 200 and r.json()["count"] > 0


@suite.test
def mqtt_load_stores_what_the_broker_acknowledged():
    end = str(now_ms() - MIN)
    common = ["--tenant", "acme", "--devices", "8", "--hot", "1", "--hot-factor", "4",
              "--metrics", "3", "--interval", "5s", "--samples", "3000", "--late", "0.1",
              "--out-of-order", "0.1", "--seed", "11", "--end", end, "--batch", "100"]
    with Broker() as b, mqtt_server(b, "bdbtest-opsload") as s, Server() as h:
        wait_connected(s, b)
        sm = load("--mqtt", "127.0.0.1:%d" % b.port, "--connections", "3", *common)
        eq(sm["errors"], 0, sm.get("first_error"))
        eq(sm["mqtt_sent"], sm["reports"])
        eq(sm["mqtt_acknowledged"], sm["reports"])
        eq(sm["mqtt_refused"], 0)
        eq(sm["samples"], 3000)
        wait_stored(s, "acme", sm["samples"])
        # the same reports over HTTP: identical answers for every device
        sh = load("--server", "127.0.0.1:%d" % h.port, *common)
        eq(sh["samples"], sm["samples"])
        devices = ["dev-%06d" % i for i in range(1, 9)]
        via_mqtt, via_http = query_all(s, "acme", devices), query_all(h, "acme", devices)
        eq(sum(c for c, _ in via_mqtt.values()), 3000)
        for d in devices:
            check(via_mqtt[d] == via_http[d], "device %s differs between MQTT and HTTP" % d)


def passwd_file(d, user, pw):
    path = os.path.join(d, "passwd")
    open(path, "w").close()
    subprocess.run(["mosquitto_passwd", "-b", path, user, pw], check=True, timeout=30,
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return path


@suite.test
def mqtt_load_refusals_are_not_acknowledged():
    b = Broker()
    pw = passwd_file(b.dir, "loader", "s3cret")
    acl = os.path.join(b.dir, "acl")
    with open(acl, "w") as f:
        f.write("user loader\ntopic readwrite bucketdb/acme/#\n"
                "user gw\ntopic read bucketdb/#\n")
    with open(b.conf) as f:
        conf = f.read().replace("allow_anonymous true\n", "allow_anonymous false\n")
    with open(b.conf, "w") as f:
        f.write(conf + "password_file %s\nacl_file %s\n" % (pw, acl))
    b.port = int(conf.split("listener ")[1].split()[0])
    subprocess.run(["mosquitto_passwd", "-b", pw, "gw", "gwpw"], check=True, timeout=30)
    broker = "127.0.0.1:%d" % b.port
    with b, mqtt_server(b, "bdbtest-opsacl", args=["--mqtt-username", "gw",
                                                   "--mqtt-password", "gwpw"]) as s:
        wait_connected(s, b)
        args = ["--mqtt", broker, "--devices", "3", "--samples", "30", "--metrics", "1",
                "--mqtt-user", "loader"]
        bad = load(*args, "--tenant", "acme", "--mqtt-password", "wrong", want_rc=1)
        eq(bad["mqtt_acknowledged"], 0)
        contains(bad["first_error"], "refused the connection")
        denied = load(*args, "--tenant", "other", "--mqtt-password", "s3cret", want_rc=1)
        # mosquitto 2.0 answers the first denied PUBLISHes with PUBACK 0x87 and then
        # resets the connection: the rest are sent but neither acknowledged nor refused
        check(denied["mqtt_refused"] >= 1, "no refusal counted: %r" % denied)
        eq(denied["mqtt_acknowledged"], 0)
        eq(denied["lines_stored"], 0)
        eq(denied["samples"], 0)
        check(denied["errors"] >= 1, "a failed connection is not counted: %r" % denied)
        ok = load(*args, "--tenant", "acme", "--mqtt-password", "s3cret")
        eq(ok["mqtt_acknowledged"], 30)
        wait_stored(s, "acme", 30)
        check(not devices_of(s, "other"), "a refused message was stored")


if __name__ == "__main__":
    suite.main()
