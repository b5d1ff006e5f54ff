#!/usr/bin/env python3
"""Migrating an embedded data directory into a Cassandra-backed server
(docs/OPERATIONS.md#migrating-to-cassandra), the documented procedure exactly:
1. an embedded server is filled by `bucketdb load` (the default tenant and a named
   one, late and out-of-order reports) and stopped;
2. a temporary embedded server is started on that data directory alone;
3. `bucketdb export --tenant default,acme | bucketdb import` streams every sample into
   a server running `--storage cassandra://...` on a real Cassandra node (cassnode.py);
4. both answer identical queries for every device of both tenants, before and after
   the Cassandra-backed server flushed to Cassandra and restarted.
One Cassandra node for the file. If Java or Cassandra is missing the test FAILS with
the reason."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import BIN, Server, Suite, TestFailure, check, eq, now_ms, MIN  # noqa: E402
from test_ops import load, query_all  # noqa: E402

suite = Suite("ops_migrate", embedded_only="starts its own Cassandra node")
KS = "bdb_migrate_it"
TENANTS = ("default", "acme")
DEVICES = ["dev-%06d" % i for i in range(1, 7)]


def cql_ready(node):
    return subprocess.run([BIN, "cql", "--host", cassnode.ADDR, "--port", str(node.port), "-e",
                           "SELECT release_version FROM system.local"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)


NODE = cassnode.Node("bucketdb-migrate-", "bucketdb-migrate-it", cql_ready)


def answers(srv):
    return {t: query_all(srv, t, DEVICES) for t in TENANTS}


@suite.test
def migrate_embedded_directory_into_cassandra():
    if not NODE.start():
        raise TestFailure(NODE.error)
    end = str(now_ms() - MIN)
    src = Server()
    with src:
        common = ["--devices", "6", "--metrics", "3", "--interval", "10s", "--duration", "2h",
                  "--late", "0.05", "--out-of-order", "0.05", "--end", end]
        s1 = load(src, "--seed", "21", *common)
        s2 = load(src, "--seed", "22", "--tenant", "acme", "--token", src.token, *common)
        total = s1["samples"] + s2["samples"]
        want = answers(src)
        eq(sum(c for t in TENANTS for c, _ in want[t].values()), total)
    # the data directory alone, under a temporary embedded server
    with Server(data=src.data) as old, \
            Server(args=["--storage", "cassandra://%s:%d/%s?consistency=ONE" %
                         (cassnode.ADDR, NODE.port, KS)]) as new:
        exp = subprocess.Popen([BIN, "export", "--server", "127.0.0.1:%d" % old.port,
                                "--token", old.token, "--tenant", ",".join(TENANTS)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        imp = subprocess.run([BIN, "import", "--server", "127.0.0.1:%d" % new.port,
                              "--token", new.token], stdin=exp.stdout,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        exp.stdout.close()
        eq(exp.wait(timeout=120), 0, "export: %s" % exp.stderr.read().decode())
        eq(imp.returncode, 0, "import: %s" % imp.stderr.decode())
        check(("%d stored, 0 refused" % total) in imp.stderr.decode(), imp.stderr.decode())
        eq(answers(old), want)
        eq(answers(new), want)
        # flushed to Cassandra and read back after a restart: still identical
        r = new.post("/internal/flush")
        check(r.status < 300, "flush: %d %s" % (r.status, r.text))
        new.stop()
        new.start()
        eq(answers(new), want)


if __name__ == "__main__":
    try:
        suite.main()
    finally:
        if NODE.pid:
            NODE.stop()
        else:
            import shutil
            shutil.rmtree(NODE.dir, ignore_errors=True)
