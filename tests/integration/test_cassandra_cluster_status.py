"""`bucketdb cluster status` (docs/CASSANDRA.md, "Cluster status") against one real
Cassandra 2.1.0 node (cassnode.py: the suite's shared node under $BDB_CASSANDRA_NODE,
else one of this file's own):

- before any server: the node listed (up, its release), the keyspace not found, no
  writer; exit 0;
- with a server running: its lease (pid, listen address, version, seconds left of
  the TTL), the backlog it publishes at each renewal growing with acknowledged
  writes, then 0 with a last flush after POST /internal/flush;
- after the server stops: the lease given up (no writer), the identity kept;
- the JSON's shape; the table's lines;
- an owner table made before the report's columns: with schema=none the lease works
  without them, with schema=create the server adds them;
- bad options (exit 2, the option named) and an unreachable contact point (exit 1).

    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_cluster_status.py"""

import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import BIN, MIN, Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_cluster_status", embedded_only="starts its own Cassandra node")
T0 = 1704067200000  # 2024-01-01T00:00:00Z
RENEW_S = 10  # CASS_OWNER_RENEW_S


def run(args, timeout=60):
    return subprocess.run([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def cql(*stmts):
    cmd = ["cql", "--host", NODE.addr, "--port", str(NODE.port)]
    for s in stmts:
        cmd += ["-e", s]
    return run(cmd)


NODE = cassnode.node_for("bucketdb-cstatus-", "bucketdb-cstatus-it",
                         lambda n: cql("SELECT release_version FROM system.local"))


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def uri(ks):
    return "cassandra://%s:%d/%s?consistency=ONE" % (NODE.addr, node().port, ks)


def fresh_keyspace(name):
    ks = cassnode.keyspace(name)
    node()
    p = cql("DROP KEYSPACE IF EXISTS %s" % ks)
    check(p.returncode == 0, p.stderr)
    return ks


def status(ks, *extra):
    p = run(["cluster", "status", "--storage", uri(ks)] + list(extra))
    eq(p.returncode, 0, "cluster status exit (stderr %r)" % p.stderr)
    return p.stdout


def status_json(ks):
    out = status(ks, "--json")
    try:
        return json.loads(out)
    except ValueError as e:
        raise TestFailure("not JSON (%s): %r" % (e, out))


def wait_writer(ks, cond, what, timeout):
    """Polls the JSON until cond(writer) holds (a renewal every RENEW_S)."""
    deadline = time.monotonic() + timeout
    doc = None
    while time.monotonic() < deadline:
        doc = status_json(ks)
        if doc["writer"] and cond(doc["writer"]):
            return doc
        time.sleep(0.5)
    raise TestFailure("%s: not within %d s; last %r" % (what, timeout, doc))


def check_nodes(doc):
    check(len(doc["nodes"]) >= 1, "no node listed: %r" % doc)
    n = [x for x in doc["nodes"] if x["address"] == NODE.addr]
    eq(len(n), 1, "the node %s in %r" % (NODE.addr, doc["nodes"]))
    eq(n[0]["state"], "up", "state of the node answering")
    check(n[0]["release"].startswith("2.") or n[0]["release"][:1].isdigit(),
          "release %r" % n[0]["release"])
    check(n[0]["data_center"] and n[0]["rack"], "dc and rack: %r" % n[0])


@suite.test
def lifecycle_of_the_lease():
    ks = fresh_keyspace("bdb_cstatus_life")
    # before any server: reachable, nothing claimed
    doc = status_json(ks)
    check_nodes(doc)
    eq(doc["keyspace"]["name"], ks)
    eq(doc["keyspace"]["exists"], False, "keyspace before any server")
    eq(doc["writer"], None, "writer before any server")
    text = status(ks)
    contains(text, "no writer")
    contains(text, "not found")

    version = run(["version"]).stdout.split()[-1]
    s = Server(args=["--storage", uri(ks), "--flush-interval-ms", "1h"]).start()
    try:
        # the server publishes its figures right after the start, before the first
        # renewal (10 s); 9 s leaves a loaded machine room
        doc = wait_writer(ks, lambda w: w["backlog_bytes"] is not None, "first report", 9)
        w = doc["writer"]
        eq(w["pid"], s.proc.pid, "lease pid")
        eq(w["listen"], "127.0.0.1:%d" % s.port, "listen address")
        eq(w["version"], version, "version")
        check(0 < w["ttl_s"] <= 30, "ttl_s %r" % w["ttl_s"])
        eq(w["last_flush_ms"], None, "no flush yet")
        check(abs(w["since_ms"] - time.time() * 1000) < 60000, "since_ms %r" % w["since_ms"])
        check(doc["keyspace"]["exists"] and len(doc["keyspace"]["id"]) == 32,
              "identity %r" % doc["keyspace"])
        with open(os.path.join(s.data, "cluster")) as f:
            contains(f.read(), "id %s\n" % doc["keyspace"]["id"], "the directory's identity")
        eq(doc["keyspace"]["generation"], None, "no flush generation before a flush")
        contains(status(ks), "generation  none")
        ident = cql("SELECT node FROM %s.owner WHERE k = 'writer'" % ks).stdout
        contains(ident, w["node"], "node id of the owner row")
        # acknowledged, not flushed: the backlog grows (seen at the next renewal)
        s.write(["m,device=d%d v=%d %d" % (i % 5, i, T0 + i * MIN) for i in range(500)],
                precision="ms")
        doc = wait_writer(ks, lambda w: w["backlog_bytes"] > 0, "backlog after writes",
                          RENEW_S + 8)
        before = time.time() * 1000
        s.flush()
        doc = wait_writer(ks, lambda w: w["last_flush_ms"] is not None, "last flush",
                          RENEW_S + 8)
        w = doc["writer"]
        check(w["last_flush_ms"] >= before - 1000, "last flush %r before the flush %r" %
              (w["last_flush_ms"], before))
        eq(w["backlog_bytes"], 0, "backlog after the flush")
        # the flush counted a generation: the keyspace's row equals the directory's file
        g = doc["keyspace"]["generation"]
        with open(os.path.join(s.data, "cluster")) as f:
            contains(f.read(), "generation %d\n" % g["n"], "the directory's generation")
        check(g["n"] >= 1, "generation %r" % g)
        eq(g["node"], w["node"], "the generation's node is the writer's")
        check(abs(g["since_ms"] - before) < 60000, "generation since_ms %r" % g)
        text = status(ks)
        contains(text, "generation  %d (flush of node %s at 20" % (g["n"], w["node"]))
        for want in ("Writer lease", "pid         %d" % s.proc.pid,
                     "listen      127.0.0.1:%d" % s.port, "backlog     0 bytes", "expires in",
                     "last flush  20", "version     %s" % version, "identity    %s" %
                     doc["keyspace"]["id"]):
            contains(text, want, "table output")
    finally:
        s.stop()
    # stopped: the lease given up at once (no wait for its TTL), the identity stays
    doc = status_json(ks)
    eq(doc["writer"], None, "writer after the server stopped")
    eq(doc["keyspace"]["exists"], True)
    check(len(doc["keyspace"]["id"] or "") == 32, "identity kept: %r" % doc["keyspace"])
    contains(status(ks), "no writer")


@suite.test
def json_shape():
    ks = fresh_keyspace("bdb_cstatus_shape")
    s = Server(args=["--storage", uri(ks), "--flush-interval-ms", "1h"]).start()
    try:
        doc = wait_writer(ks, lambda w: w["listen"] is not None, "report", 9)
    finally:
        s.stop()
    eq(sorted(doc), ["cluster", "keyspace", "nodes", "writer"], "top-level keys")
    check(isinstance(doc["cluster"], str) and doc["cluster"], "cluster name")
    for n in doc["nodes"]:
        eq(sorted(n), ["address", "data_center", "rack", "release", "state"], "node keys")
        check(n["state"] in ("up", "unknown"), "state %r" % n["state"])
    eq(sorted(doc["keyspace"]), ["exists", "generation", "id", "name", "since_ms"],
       "keyspace keys")
    check(isinstance(doc["keyspace"]["since_ms"], int), "identity since_ms")
    eq(sorted(doc["writer"]), ["backlog_bytes", "host", "last_flush_ms", "listen", "node", "pid",
                               "since_ms", "ttl_s", "version"], "writer keys")
    for k in ("pid", "since_ms", "ttl_s", "backlog_bytes"):
        check(isinstance(doc["writer"][k], int), "writer %s: %r" % (k, doc["writer"][k]))
    eq(doc["writer"]["host"], socket.gethostname(), "writer host")


@suite.test
def owner_table_of_an_older_version():
    ks = fresh_keyspace("bdb_cstatus_old")
    s = Server(args=["--storage", uri(ks), "--flush-interval-ms", "1h"]).start()
    s.stop()
    # as an older bucketdb made it: the owner table without the report's columns
    for c in ("backlog_bytes", "last_flush", "listen", "version"):
        p = cql("ALTER TABLE %s.owner DROP %s" % (ks, c))
        check(p.returncode == 0, p.stderr)
    # schema=none: nothing is added; the lease works, the report is left out
    s = Server(data=s.data, args=["--storage", uri(ks) + "&schema=none",
                                  "--flush-interval-ms", "1h"]).start()
    try:
        contains(s.log(), "has no column version")
        doc = status_json(ks)
        eq(doc["writer"]["pid"], s.proc.pid, "lease without the report's columns")
        eq([doc["writer"][k] for k in ("backlog_bytes", "last_flush_ms", "listen", "version")],
           [None] * 4, "report of a keyspace without its columns")
        contains(status(ks), "has no backlog, last flush, listen or version columns")
    finally:
        s.stop()
    # schema=create (the default): the columns are added, the report comes back
    s = Server(data=s.data, args=["--storage", uri(ks), "--flush-interval-ms", "1h"]).start()
    try:
        contains(s.log(), "added owner.backlog_bytes")
        doc = wait_writer(ks, lambda w: w["listen"] is not None, "report after the upgrade", 9)
        eq(doc["writer"]["listen"], "127.0.0.1:%d" % s.port)
    finally:
        s.stop()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@suite.test
def bad_options():
    good = "cassandra://127.0.0.1:9042/ks"
    cases = [
        ([], "subcommand"),
        (["nope"], "unknown subcommand"),
        (["status"], "--storage"),
        (["status", "--storage"], "--storage needs a value"),
        (["status", "--storage", "embedded"], "cassandra://"),
        (["status", "--storage", good, "--timeout", "99"], "[100, 600000]"),
        (["status", "--storage", good, "--timeout", "600001"], "[100, 600000]"),
        (["status", "--storage", good, "--timeout", "12x"], "--timeout"),
        (["status", "--storage", good, "--timeout", ""], "--timeout"),
        (["status", "--storage", good, "--bogus"], "unknown option --bogus"),
        (["status", "--storage", "cassandra://127.0.0.1/ks?timeout_ms=5"], "timeout_ms"),
        (["status", "--storage", "cassandra://127.0.0.1/ks?tls=maybe"], "tls"),
    ]
    for args, want in cases:
        p = run(["cluster"] + args)
        eq(p.returncode, 2, "exit of cluster %r (stderr %r)" % (args, p.stderr))
        contains(p.stderr, want, "message of cluster %r" % (args,))
    p = run(["cluster", "--help"])
    eq(p.returncode, 0)
    contains(p.stdout, "Exit codes")
    # nothing listens there: exit 1, the contact point named
    p = run(["cluster", "status", "--storage", "cassandra://127.0.0.1:%d/ks" % free_port(),
             "--timeout", "2000"], timeout=30)
    eq(p.returncode, 1, "exit with no node answering (stderr %r)" % p.stderr)
    contains(p.stderr, "no contact point")
    eq(p.stdout, "", "nothing printed on stdout")


if __name__ == "__main__":
    cassnode.main(suite, NODE)
