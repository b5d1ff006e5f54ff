#!/usr/bin/env python3
"""Two regions: a Cassandra 2.1.0 node in data center dc1 (127.0.0.1) and one in dc2
(127.0.0.2), GossipingPropertyFileSnitch (cassnode.py, scripts/cassandra.sh --dc), a
keyspace replicated to both (`replication=dc1:1,dc2:1`), bucketdb writing and reading
at LOCAL_QUORUM with `ack=quorum` (docs/CASSANDRA.md#regions). Issue 20's item 5.

`write_local_read_from_the_other_region`:
1. server A in dc1 (`dc=dc1`, contact point 127.0.0.1) gets a fleet (6 devices, 2
   metrics, hours 0 to 3 of a day 3 days ago) and flushes; its answers over those
   hours are recorded (raw, 1m/1h/auto tiers, fleet 1h). A opened no connection to
   the dc2 node (/metrics per node): its requests stayed in its region.
2. The rows reached dc2: `bucketdb cql` on 127.0.0.2 at LOCAL_ONE (answered by the
   dc2 replica) counts the same telemetry rows as on 127.0.0.1.
3. dc2's node stops. A restarts while dc2 is down and writes hour 3 with
   ack=quorum: every write answered 204, the flush confirmed. (The writer lease and
   the keyspace identity are lightweight transactions: at SERIAL their Paxos round
   needs a majority of ALL replicas, and the restart failed with the other region
   down; with LOCAL_* writes they run at LOCAL_SERIAL.)
4. A stops; dc2's node comes back, then dc1's is killed (the region is lost). Server
   B starts in dc2 (`dc=dc2`, contact point 127.0.0.2) on an EMPTY data directory
   (refused until the copy of A's writer lease in dc2 expired: A's release reached
   dc1 only) and answers the queries of step 1 exactly as A did (hour 3 lies outside them:
   whether it reached dc2 depends on hinted handoff before the loss), writes hour 5
   with ack=quorum at LOCAL_QUORUM in dc2 (204, flush confirmed), restarts with dc1
   still down and answers it.

If Java, the Cassandra package or the 127.0.0.2 loopback address is missing, the test
FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_regions.py"""

import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# schema creation waits for both nodes to agree on it: a loaded machine takes longer
os.environ.setdefault("BDB_START_TIMEOUT", "240")
import cassnode  # noqa: E402
from bdbtest import Server, Suite, TestFailure, check, eq  # noqa: E402

suite = Suite("test_cassandra_regions", embedded_only="starts its own Cassandra nodes")
ADDRS = ["127.0.0.1", "127.0.0.2"]
KS = "bdb_regions_it"
SEED = int(os.environ.get("BDB_SEED", "2021"))
MIN, HOUR, DAY = 60000, 3600000, 86400000
T0 = (int(time.time() * 1000) // DAY - 3) * DAY  # inside every tier's retention
DEVICES = ["meter-%d" % i for i in range(6)]
METRICS = ["pwr.kw", "pwr.volt"]


def cql(node, *stmts, consistency="LOCAL_ONE"):
    return cassnode.cql(node, *stmts, consistency=consistency)


NODES = [cassnode.Node("bucketdb-regions-%d-" % i, "bucketdb-regions-it",
                       lambda n: cql(n, "SELECT release_version FROM system.local"),
                       addr=a, seeds=ADDRS[0], dc="dc%d" % (i + 1)) for i, a in enumerate(ADDRS)]
PORTS = {}


def server(i, data=None):
    """A server in region i (0: dc1, 1: dc2), contact point that region's node."""
    uri = ("cassandra://%s:%d/%s?dc=dc%d&consistency=LOCAL_QUORUM&replication=dc1:1,dc2:1"
           "&ack=quorum" % (ADDRS[i], PORTS["native"], KS, i + 1))
    return Server(data=data, args=["--storage", uri, "--flush-interval-ms", "1h"])


def fleet(rng, lo, hi, n):
    """n line-protocol reports in [lo, hi), one per (device, metric, second), time order."""
    seen, out = set(), []
    while len(out) < n:
        dev, metric = rng.choice(DEVICES), rng.choice(METRICS)
        ts = lo + rng.randrange(0, (hi - lo) // 1000) * 1000
        if (dev, metric, ts) in seen:
            continue
        seen.add((dev, metric, ts))
        meas, field = metric.split(".")
        out.append((ts, "%s,device=%s,site=s%d %s=%r %d" % (
            meas, dev, DEVICES.index(dev) % 3, field, round(rng.gauss(230, 15), 2), ts)))
    return [line for _, line in sorted(out)]


def send(s, lines):
    for i in range(0, len(lines), 200):
        s.write(lines[i:i + 200], precision="ms")  # 204: confirmed at LOCAL_QUORUM


def queries():
    """Hours 0 to 3 of day T0: what both regions held before a region was lost."""
    out, lo, hi = [], T0, T0 + 3 * HOUR
    for dev in DEVICES:
        out.append(("/api/v1/query", {"device": dev, "from": lo, "to": hi}))
        for res in ("1m", "1h", "auto"):
            out.append(("/api/v1/query", {"device": dev, "resolution": res, "from": lo,
                                          "to": hi}))
    for metric in METRICS:
        out.append(("/api/v1/fleet", {"metric": metric, "resolution": "1h", "from": lo,
                                      "to": hi}))
    return out


def answers(s):
    a = {}
    for path, params in queries():
        r = s.get(path, **params)
        doc = r.json() if r.status == 200 else r.body[:200].decode("utf-8", "replace")
        if isinstance(doc, dict):
            doc.pop("recomputed", None)  # how a fleet window was answered, not what
            # the device's newest event, and which windows it closed: hour 3's, if it
            # reached dc2 before the loss
            doc.pop("watermark", None)
            if "final" in doc.get("columns", []):
                i = doc["columns"].index("final")
                doc["values"] = [row[:i] + row[i + 1:] for row in doc["values"]]
        a[(path, json.dumps(params, sort_keys=True))] = (r.status, doc)
    return a


def close_rows(w, g):
    """Answers equal but for a stddev's last bits: a fleet window merged from A's local
    files and the same window read from its one row add their parts in another order
    (the counts, sums, extremes and quantiles must be equal to the bit)."""
    if not (g and isinstance(w[1], dict) and isinstance(g[1], dict)) or w[0] != g[0]:
        return False
    cols = w[1].get("columns", [])
    if "stddev" not in cols or {k: v for k, v in w[1].items() if k != "values"} != \
            {k: v for k, v in g[1].items() if k != "values"}:
        return False
    i = cols.index("stddev")
    wv, gv = w[1]["values"], g[1]["values"]
    return len(wv) == len(gv) and all(
        x[:i] + x[i + 1:] == y[:i] + y[i + 1:] and
        abs(x[i] - y[i]) <= 1e-12 * max(abs(x[i]), abs(y[i])) for x, y in zip(wv, gv))


def same(label, want, got):
    for k in want:
        w, g = want[k], got.get(k)
        if w == g or close_rows(w, g):
            continue
        where = ""
        if g and isinstance(w[1], dict) and isinstance(g[1], dict):
            for f in sorted(set(w[1]) | set(g[1])):
                if w[1].get(f) != g[1].get(f):
                    a, b = w[1].get(f), g[1].get(f)
                    if isinstance(a, list) and isinstance(b, list):
                        i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                                 min(len(a), len(b)))
                        a, b = a[i:i + 2], b[i:i + 2]
                    where = "field %s: want %r, got %r" % (f, a, b)
                    break
        raise TestFailure("%s: %s %s differs: %s\n  want %r\n  got  %r"
                          % (label, k[0], k[1], where, json.dumps(w)[:300],
                             json.dumps(g)[:300]))


def connections(s, addr):
    """bucketdb_cassandra_node_connections of the node at addr (None: not listed)."""
    key = 'node="%s:%d"' % (addr, PORTS["native"])
    for line in s.metrics_text().splitlines():
        if line.startswith("bucketdb_cassandra_node_connections{") and key in line:
            return float(line.rpartition(" ")[2])
    return None


def telemetry_rows(node):
    """Every telemetry row of the keyspace, counted at LOCAL_ONE through node (so from
    its own data center's replica)."""
    q = "SELECT count(*) FROM %s.telemetry" % KS
    p = cql(node, q)
    check(p.returncode == 0, "%s: %s" % (q, p.stderr))
    return int(p.stdout.strip().splitlines()[-1])


@suite.test
def write_local_read_from_the_other_region():
    PORTS["native"] = cassnode.free_port(ADDRS)
    PORTS["storage"] = cassnode.free_port(ADDRS)
    cassnode.start_cluster(NODES, PORTS["native"], PORTS["storage"], NODES[0], 1, TestFailure)
    p = cql(NODES[0], "SELECT data_center FROM system.local")
    check("dc1" in p.stdout, "node 1's data center: %r %r" % (p.stdout, p.stderr))
    p = cql(NODES[0], "SELECT data_center FROM system.peers")
    check("dc2" in p.stdout, "node 2's data center seen from node 1: %r" % p.stdout)
    rng = random.Random(SEED)

    # 1. region dc1 writes and answers; its requests stay in dc1
    a = server(0)
    a.start()
    send(a, fleet(rng, T0, T0 + 3 * HOUR, 1500))
    a.flush()
    want = answers(a)
    for k, (status, doc) in want.items():
        eq(status, 200, "A: %s %s" % k)
        check(doc.get("values"), "A: %s %s has values" % k)
    check((connections(a, ADDRS[0]) or 0) > 0, "A has connections to the dc1 node")
    eq(connections(a, ADDRS[1]) or 0.0, 0.0,
       "A's connections to the dc2 node (LOCAL_QUORUM routes inside dc1)")

    # 2. the rows reach dc2
    deadline = time.monotonic() + 60
    while True:
        n1, n2 = telemetry_rows(NODES[0]), telemetry_rows(NODES[1])
        if n1 == n2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    eq(n1, 1500, "telemetry rows in dc1")
    eq(n2, n1, "telemetry rows read in dc2 (LOCAL_ONE) against dc1")

    # 3. dc2 lost: dc1 restarts and writes on, acknowledged at LOCAL_QUORUM. The node
    # stops cleanly: killed, a single node loses the last 10 s of its periodic commit
    # log, which is Cassandra's own durability, not what this test is about.
    NODES[1].kill(signal.SIGTERM)
    a.restart()
    send(a, fleet(rng, T0 + 3 * HOUR, T0 + 4 * HOUR, 300))
    a.flush()
    check("is lost" not in a.log(), "A kept its writer lease:\n" + a.log()[-2000:])
    a.stop()

    # 4. dc1 lost: a server in dc2 on an empty directory answers what dc1 answered
    check(NODES[1].start(same_ports=True), NODES[1].error or "node 2 did not restart")
    cassnode.wait_peers(NODES[0], 1, TestFailure)
    NODES[0].kill()
    b = server(1)
    # dc2's copy of A's writer lease was last renewed before dc2's node stopped; A's
    # release went to dc1 only. A server of another node waits out its TTL (30 s)
    # rather than take a lease that may still be live: refused until then.
    deadline = time.monotonic() + 90
    while True:
        try:
            b.start()
            break
        except TestFailure as e:
            b._gone()
            if "another server writes to keyspace" not in str(e) or \
                    time.monotonic() > deadline:
                raise
            time.sleep(3)
    same("B in dc2 against A in dc1", want, answers(b))
    late = fleet(rng, T0 + 5 * HOUR, T0 + 6 * HOUR, 300)
    send(b, late)
    b.flush()
    b.restart()
    for dev in DEVICES:
        n = sum(1 for line in late if line.split(",")[1] == "device=" + dev)
        got = b.values(device=dev, **{"from": T0 + 5 * HOUR, "to": T0 + 6 * HOUR})
        eq(len(got), n, "B's samples of %s in hour 5 after its restart with dc1 down" % dev)
    b.stop()


if __name__ == "__main__":
    cassnode.main(suite, *NODES)
