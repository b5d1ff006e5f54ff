#!/usr/bin/env python3
"""A Cassandra-backed bucketdb on a THREE-node Apache Cassandra 2.1.0 cluster on
127.0.0.1, 127.0.0.2 and 127.0.0.3 (cassnode.py; 512 MB heap each, the same native
and storage ports on each address, 127.0.0.1 the seed), keyspace with RF 3, QUORUM
writes and reads.

- The session discovers the three nodes from one contact point.
- Ingestion with a flush every batch; node 2 freezes (SIGSTOP: requests to it time
  out and are retried on the next replica), then is killed (-9); writes and
  flushes go on (QUORUM = 2 of 3), node 2 comes back on the same ports and
  bucketdb reconnects to it ("is back" in its log); every acknowledged sample is
  read back at QUORUM, also while a node is down. /metrics shows the timeouts,
  retries and errors (counted against node 2), then the reconnect and every node
  up again.

If Java, the Cassandra package or the 127.0.0.2/3 loopback addresses are missing,
the test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_cluster.py"""

import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import BIN, HOUR, Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_cluster")
ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
KS = "bdb_cluster_it"


def cql(node, *stmts):
    cmd = [BIN, "cql", "--host", node.addr, "--port", str(node.port)]
    for s in stmts:
        cmd += ["-e", s]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=60)


NODES = [cassnode.Node("bucketdb-cluster-%d-" % i, "bucketdb-cluster-it",
                       lambda n: cql(n, "SELECT release_version FROM system.local"),
                       addr=a, seeds=ADDRS[0]) for i, a in enumerate(ADDRS)]


def start_cluster():
    port = cassnode.free_port(ADDRS)
    sport = cassnode.free_port(ADDRS)
    for n in NODES:  # one after the other: 2.1 refuses concurrent bootstraps
        # The test script's short ring delay (1 s) can make a joining node give up on
        # the seed on a loaded machine ("Unable to contact any seeds!"): try again.
        for attempt in range(3):
            if n.start(port=port, storage_port=sport):
                break
            print("cassandra: %s failed to join (%s); again" % (
                n.addr, n.error.strip().splitlines()[-1]), flush=True)
            n.kill()
            time.sleep(2)
        else:
            raise TestFailure(n.error + "\n" + n.log_tail())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        p = cql(NODES[0], "SELECT peer FROM system.peers")
        if p.returncode == 0 and len(p.stdout.strip().splitlines()) == 3:  # header + 2
            return
        time.sleep(0.5)
    raise TestFailure("the nodes did not see each other: %r" % p.stdout)


def cmetrics(server):
    """{series: value} of the bucketdb_cassandra_* lines of /metrics."""
    out = {}
    for line in server.metrics_text().splitlines():
        if line.startswith("bucketdb_cassandra_"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


@suite.test
def rf3_node_killed_during_ingestion():
    start_cluster()
    port = NODES[0].port
    # A short request timeout so that requests to a frozen node time out quickly and
    # are retried on the next replica. BDB_CLUSTER_URI_EXTRA: e.g. &retries=0 to see
    # the test fail without retries.
    uri = "cassandra://%s:%d,%s:%d/%s?replication=simple:3&consistency=QUORUM&timeout_ms=1500%s" \
        % (ADDRS[0], port, ADDRS[1], port, KS, os.environ.get("BDB_CLUSTER_URI_EXTRA", ""))
    s = Server(args=["--storage", uri, "--flush-interval-ms", "1h"]).start()
    rng = random.Random(33)
    t0 = 1718409600000
    model = {}
    try:
        contains(s.log(), "(3 node(s)")

        def ingest(rounds):
            for _ in range(rounds):
                lines = []
                for _ in range(100):
                    dev = "d%d" % rng.randrange(8)
                    ts = t0 + rng.randrange(24 * 3600) * 1000
                    v = rng.randrange(100000)
                    lines.append("m,device=%s v=%d %d" % (dev, v, ts))
                s.write(lines, precision="ms")
                for line in lines:
                    meas, field, ts = line.split(" ")
                    model[(meas.split("=")[1], int(ts))] = float(field.split("=")[1])
                s.flush()  # 204 only once Cassandra confirmed at QUORUM

        ingest(5)
        # Node 2 freezes (SIGSTOP: connections stay open, requests time out and are
        # retried on the next replica; writes are idempotent), then crashes (-9).
        os.kill(NODES[1].pid, signal.SIGSTOP)
        ingest(4)
        NODES[1].kill()
        ingest(4)
        want = {}
        for (dev, ts), v in model.items():
            want.setdefault(dev, set()).add((ts, "m.v", v))

        def check_all(label):
            for dev, rows in sorted(want.items()):
                got = set(s.values(device=dev, **{"from": t0, "to": t0 + 25 * HOUR}))
                if got != rows:
                    raise TestFailure("%s: %s: %d missing, %d extra" % (
                        label, dev, len(rows - got), len(got - rows)))

        check_all("node 2 down")
        # /metrics shows it: attempts to the frozen node timed out and were retried
        # on the next replica, counted against node 2.
        m = cmetrics(s)
        check(m.get("bucketdb_cassandra_retries_total", 0) >= 1, "retries: %r" % m)
        check(m.get("bucketdb_cassandra_timeouts_total", 0) >= 1, "timeouts: %r" % m)
        check(m.get("bucketdb_cassandra_errors_total", 0) >= 1, "errors: %r" % m)
        eq(m.get("bucketdb_cassandra_nodes"), 3.0, "nodes")
        n2 = [v for k, v in m.items() if k.startswith("bucketdb_cassandra_node_errors_total{")
              and 'node="127.0.0.2:%d"' % port in k]
        check(n2 and n2[0] >= 1, "no errors counted against node 2: %r" % m)
        check(NODES[1].start(same_ports=True), NODES[1].error or "node 2 did not restart")
        ingest(5)
        want = {}
        for (dev, ts), v in model.items():
            want.setdefault(dev, set()).add((ts, "m.v", v))
        # The session reconnects once node 2's backoff expired and a request is routed
        # to it; reads and writes of 8 devices reach every node.
        deadline = time.monotonic() + 30
        while "node 127.0.0.2:%d is back" % port not in s.log() and time.monotonic() < deadline:
            ingest(1)
            want = {}
            for (dev, ts), v in model.items():
                want.setdefault(dev, set()).add((ts, "m.v", v))
        contains(s.log(), "node 127.0.0.2:%d is back" % port)
        m = cmetrics(s)
        check(m.get("bucketdb_cassandra_reconnects_total", 0) >= 1, "reconnects: %r" % m)
        ups = {k: v for k, v in m.items() if k.startswith("bucketdb_cassandra_node_up{")}
        eq(sorted(ups.values()), [1.0, 1.0, 1.0], "node_up after node 2 came back: %r" % ups)
        s.restart()
        check_all("after node 2 came back and a restart")
        p = cql(NODES[2], "SELECT count(*) FROM %s.telemetry" % KS)
        eq(p.returncode, 0, p.stderr)
        eq(int(p.stdout.split()[-1]), len(model), "rows in telemetry")
        print("  %d samples, all read back" % len(model))
    finally:
        s.stop()


if __name__ == "__main__":
    # Three JVMs cost about 80 s: CI runs this once, in the release mode (tests/run
    # sets ASAN_OPTIONS for the sanitizer mode). BDB_CASS_CLUSTER_ASAN=1 runs it there.
    if os.environ.get("ASAN_OPTIONS") and not os.environ.get("BDB_CASS_CLUSTER_ASAN"):
        print("test_cassandra_cluster: skipped in the sanitizer mode (set "
              "BDB_CASS_CLUSTER_ASAN=1 to run it)")
        print("0 passed, 0 failed")
        for n in NODES:
            import shutil
            shutil.rmtree(n.dir, ignore_errors=True)
        sys.exit(0)
    try:
        suite.main()
    finally:
        for n in NODES:
            if n.pid:
                n.stop()
            else:
                import shutil
                shutil.rmtree(n.dir, ignore_errors=True)
