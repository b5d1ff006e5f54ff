#!/usr/bin/env python3
"""Crash test of the MQTT 5 gateway with a shared subscription (docs/MQTT.md): two
bucketdb servers split one stream through `$share/...` on Debian's mosquitto; one of
them is killed with SIGKILL in the middle of the stream and started again on the same
data directory and client id (its MQTT 5 session resumes: the session expiry is
"never"). Every message the broker acknowledged to the publisher must be stored by
one of the two servers in the end. Messages the broker did not acknowledge (in flight
when a connection failed) are broker-side and reported apart; messages stored by both
servers (a redelivery) are reported, not failed: delivery is at least once.

The second test kills one subscriber again and again (BDB_MQTT_KILLS, default 200, at
a uniformly random moment 20 .. BDB_MQTT_BURST_MS (200) ms after it connected) while
a publisher streams, within a time budget (BDB_MQTT_KILL_BUDGET_S, default 80 s;
the count reached is printed). The MQTT 5 session outlives every kill, so the broker
keeps what the server never PUBACKed; after the last restart every message the
broker acknowledged to the publisher must be stored, with its value.
    BDB_MQTT_KILLS=1000 BDB_MQTT_KILL_BUDGET_S=1800 BUCKETDB_BIN=build/bucketdb \
        python3 tests/crash/test_mqtt_kill9.py      # the documented long run"""

import os
import random
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from bdbtest import Suite, check, eq  # noqa: E402
from test_mqtt import Broker, metric, mqtt_server, rows, wait_connected, wait_for  # noqa: E402
from test_mqtt5 import SHARE, Publisher, seq_msgs, stored_seqs  # noqa: E402

suite = Suite("test_mqtt_kill9")


@suite.test
def kill9_of_one_shared_subscriber_loses_nothing_acknowledged():
    n = int(os.environ.get("BDB_MQTT_N", "800"))
    topic = "bucketdb/acme/k9share/telemetry"
    with Broker() as b:
        s1 = mqtt_server(b, "bdbtest-k9-1", args=["--mqtt-topics", SHARE])
        s2 = mqtt_server(b, "bdbtest-k9-2", args=["--mqtt-topics", SHARE])
        s1.start()
        s2.start()
        try:
            wait_connected(s1, b)
            wait_connected(s2, b)
            # Half the stream, then the publisher holds until the kill: it lands
            # mid-stream however slowly the servers consume.
            pub = Publisher(b.port, "bdbtest-k9-pub", window=10, pace=0.003, hold_at=n // 2)
            t = threading.Thread(target=pub.send, args=(seq_msgs(topic, range(n)),))
            t.start()
            wait_for("server 1 storing part of the stream",
                     lambda: len(stored_seqs(s1, "acme", "k9share")) > n // 10, [s1.log()])
            check(t.is_alive(), "the stream is still flowing at the kill")
            pub.release.set()
            s1.kill()  # SIGKILL mid-stream
            wait_for("server 2 going on alone",
                     lambda: len(stored_seqs(s2, "acme", "k9share")) > n // 3, [s2.log()])
            s1.start()  # same data directory and client id: the session resumes
            t.join(120)
            check(not t.is_alive(), "publisher finished")
            pub.close()
            acked = set(pub.acked)

            def union():
                return stored_seqs(s1, "acme", "k9share") | stored_seqs(s2, "acme", "k9share")

            wait_for("every acknowledged message on one of the servers (%d)" % len(acked),
                     lambda: acked <= union(), [s1.all_logs()[-3000:], s2.log(), b.logtext()])
            a, c = stored_seqs(s1, "acme", "k9share"), stored_seqs(s2, "acme", "k9share")
            print("  publisher: %d sent, %d acknowledged by the broker, %d not (broker-side); "
                  "server 1 (killed) %d, server 2 %d, on both %d, acknowledged but missing %d; "
                  "server 1 redeliveries after the restart %d"
                  % (n, len(acked), len(pub.unacked), len(a), len(c), len(a & c),
                     len(acked - (a | c)), metric(s1, "bucketdb_mqtt_redeliveries_total")))
            eq(sorted(acked - (a | c)), [], "acknowledged messages lost by bucketdb")
            check(len(acked) >= n - pub.window, "the broker acknowledged the stream")
        finally:
            s2.stop()
            s1.stop()


@suite.test
def repeated_kill9_at_random_moments_loses_nothing_acknowledged():
    kills = int(os.environ.get("BDB_MQTT_KILLS", "200"))
    budget = float(os.environ.get("BDB_MQTT_KILL_BUDGET_S", "80"))
    burst_ms = int(os.environ.get("BDB_MQTT_BURST_MS", "200"))
    rng = random.Random(int(os.environ.get("BDB_MQTT_KILL_SEED", "20261122")))
    topic = "bucketdb/acme/k9loop/telemetry"
    with Broker() as b:
        s = mqtt_server(b, "bdbtest-k9loop")
        s.start()
        pub = Publisher(b.port, "bdbtest-k9loop-pub", window=10, pace=0.002)
        stop = threading.Event()
        sent = [0]

        def stream():
            # Chunks, so that a send()'s own deadline never cuts a long run short.
            while not stop.is_set() and sent[0] < 1_000_000:
                chunk = seq_msgs(topic, range(sent[0], sent[0] + 50))
                sent[0] += 50
                pub.send(chunk)

        t = threading.Thread(target=stream)
        done, restarts_ms = 0, []
        t0 = time.monotonic()
        try:
            wait_connected(s, b)
            t.start()
            while done < kills and time.monotonic() - t0 < budget:
                time.sleep(rng.uniform(0.02, burst_ms / 1000.0))
                s.kill()
                done += 1
                r0 = time.monotonic()
                s.start()  # same data directory and client id: the session resumes
                wait_connected(s, b)
                restarts_ms.append((time.monotonic() - r0) * 1000)
            loop_s = time.monotonic() - t0
            stop.set()
            t.join(120)
            check(not t.is_alive(), "publisher finished")
            pub.close()
            acked = set(pub.acked)
            wait_for("every acknowledged message stored (%d)" % len(acked),
                     lambda: acked <= stored_seqs(s, "acme", "k9loop"),
                     [s.all_logs()[-3000:], b.logtext()])
            got = rows(s, "acme", "k9loop")
            wrong = [(ts, v) for ts, m, v in got if m == "seq.v"
                     and ts != 1700000000000 + int(v) * 1000]
            stored = stored_seqs(s, "acme", "k9loop")
            restarts_ms.sort()
            print("mqtt kill9 figures: kills %d of %d in %.1f s, messages sent %d, acknowledged "
                  "by the broker %d, stored %d, acknowledged but lost %d, wrong values %d, "
                  "redeliveries counted by the last run %d; restart to reconnected p50 %.0f ms, "
                  "p99 %.0f ms"
                  % (done, kills, loop_s, sent[0], len(acked), len(stored), len(acked - stored),
                     len(wrong), metric(s, "bucketdb_mqtt_redeliveries_total"),
                     restarts_ms[len(restarts_ms) // 2] if restarts_ms else 0,
                     restarts_ms[int(len(restarts_ms) * 0.99)] if restarts_ms else 0))
            eq(sorted(acked - stored), [], "acknowledged messages lost by bucketdb")
            eq(wrong, [], "stored messages with a wrong time or value")
            check(done >= min(kills, 20), "at least 20 kills within the budget (%d)" % done)
            check(len(acked) > done, "the stream flowed between the kills")
        finally:
            stop.set()
            if t.is_alive():
                t.join(120)
            s.stop(expect_clean=False)


if __name__ == "__main__":
    suite.main()
