#!/usr/bin/env python3
"""Crash test of the MQTT 5 gateway with a shared subscription (docs/MQTT.md): two
bucketdb servers split one stream through `$share/...` on Debian's mosquitto; one of
them is killed with SIGKILL in the middle of the stream and started again on the same
data directory and client id (its MQTT 5 session resumes: the session expiry is
"never"). Every message the broker acknowledged to the publisher must be stored by
one of the two servers in the end. Messages the broker did not acknowledge (in flight
when a connection failed) are broker-side and reported apart; messages stored by both
servers (a redelivery) are reported, not failed: delivery is at least once."""

import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from bdbtest import Suite, check, eq  # noqa: E402
from test_mqtt import Broker, metric, mqtt_server, wait_connected, wait_for  # noqa: E402
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
            pub = Publisher(b.port, "bdbtest-k9-pub", window=10, pace=0.003)
            t = threading.Thread(target=pub.send, args=(seq_msgs(topic, range(n)),))
            t.start()
            wait_for("server 1 storing part of the stream",
                     lambda: len(stored_seqs(s1, "acme", "k9share")) > n // 10, [s1.log()])
            check(t.is_alive(), "the stream is still flowing at the kill")
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


if __name__ == "__main__":
    suite.main()
