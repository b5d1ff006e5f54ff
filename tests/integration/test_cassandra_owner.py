"""One keyspace, one data directory, one writer (cass_owner.h; docs/CASSANDRA.md,
"One keyspace, one writer"), against one real Cassandra 2.1.0 node (cassnode.py).
Issue 20's silent failures, each now a refusal with its reason:

- a second server on an EMPTY data directory while the first runs: refused (the
  writer lease; before, it answered 404 for flushed data and overwrote tier, fleet
  and device rows); the keyspace's rows are unchanged by the attempt; after the first
  stopped, an empty directory starts (it rebuilds its catalog from the registry:
  test_cassandra_new_dir.py) and answers all 100 samples, and a copy of the
  directory without its file 'cluster' (a catalog, no identity) is refused;
- a COPY of the running server's data directory started beside it: refused (the
  writer lease is held by a live process of the same node);
- kill -9 and a restart on the same directory: starts at once (the lease's process is
  gone) and answers everything acknowledged;
- a keyspace written by an older bucketdb (data, no identity): its own data directory
  (with a catalog) takes it over, and an empty one joins it and answers the same;
- the lease is renewed whole (every column's TTL) while the server runs;
- the lease taken by another node while running (an outage longer than its TTL):
  flushes fail from the next renewal on and the WAL keeps every acknowledged sample;
  the keyspace's telemetry rows do not grow.

    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_owner.py"""

import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import MIN, Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_owner", embedded_only="starts its own Cassandra node")
T0 = 1704067200000  # 2024-01-01T00:00:00Z


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


def rows(stmt):
    return cassnode.cql_rows(NODE, stmt, TestFailure)


NODE = cassnode.node_for("bucketdb-owner-", "bucketdb-owner-it",
                         cassnode.answers)


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def server(ks, data=None):
    uri = "cassandra://%s:%d/%s?consistency=ONE" % (NODE.addr, node().port, ks)
    return Server(data=data, args=["--storage", uri, "--flush-interval-ms", "1h"])


def refused(s, want):
    """Starts s, which must exit with want in its log; kills it if it started."""
    try:
        s.start()
    except TestFailure as e:
        contains(str(e), want)
        return
    finally:
        s.kill()
    raise TestFailure("server started; expected a refusal with %r" % want)


def fresh_keyspace(name):
    ks = cassnode.keyspace(name)
    node()
    p = cql("DROP KEYSPACE IF EXISTS %s" % ks)
    check(p.returncode == 0, p.stderr)
    return ks


def write_points(s, n, first=0):
    s.write(["m,device=d%d v=%d %d" % (i % 5, i, T0 + i * MIN) for i in range(first, first + n)],
            precision="ms")


def count(s):
    return sum(len(s.values(device="d%d" % i, **{"from": T0, "to": T0 + 10000 * MIN}))
               for i in range(5))


def table_rows(ks, table):
    return int(rows("SELECT count(*) FROM %s.%s" % (ks, table))[0][0])


@suite.test
def empty_directory_and_second_server_refused():
    ks = fresh_keyspace("bdb_owner_two")
    a = server(ks).start()
    try:
        write_points(a, 100)
        a.flush()
        with open(os.path.join(a.data, "cluster")) as f:
            text = f.read()
        contains(text, "keyspace %s\n" % ks)
        ident = rows("SELECT id FROM %s.owner WHERE k = 'keyspace'" % ks)
        eq(len(ident), 1, "owner row 'keyspace'")
        contains(text, "id %s\n" % ident[0][0], "the directory's id is the keyspace's")
        lease = rows("SELECT node, pid FROM %s.owner WHERE k = 'writer'" % ks)
        eq(len(lease), 1, "writer lease row")
        contains(text, "node %s\n" % lease[0][0])
        eq(int(lease[0][1]), a.proc.pid, "the lease names the running server")
        before = (table_rows(ks, "telemetry"), table_rows(ks, "devices"))
        # an empty data directory while A runs: refused by the lease, nothing written
        refused(server(ks), "another server writes")
        # a copy of A's directory running beside it: the same node, a live holder
        copy = os.path.join(Server().dir, "copy")
        shutil.copytree(a.data, copy, ignore=shutil.ignore_patterns("LOCK"))
        refused(server(ks, data=copy), "a copy running")
        eq((table_rows(ks, "telemetry"), table_rows(ks, "devices")), before,
           "rows after the refused starts")
        eq(count(a), 100, "A's answers")
    finally:
        a.stop()
    eq(rows("SELECT node FROM %s.owner WHERE k = 'writer'" % ks), [],
       "a clean stop gives the lease up")
    # A stopped: an empty directory joins the keyspace (its catalog rebuilt) ...
    b = server(ks).start()
    try:
        eq(count(b), 100, "answers of an empty directory")
    finally:
        b.stop()
    # ... but a directory with a catalog and no identity (A's without its file) is not
    nofile = os.path.join(Server().dir, "nofile")
    shutil.copytree(a.data, nofile, ignore=shutil.ignore_patterns("LOCK", "cluster"))
    refused(server(ks, data=nofile), "has a catalog but no identity file")
    # kill -9 and a restart on the same directory: the lease's process is gone
    a = server(ks, data=a.data).start()
    write_points(a, 50, first=100)  # in the WAL and the head only
    a.kill()
    t0 = time.monotonic()
    a = server(ks, data=a.data).start()
    try:
        check(time.monotonic() - t0 < 20, "restart waited for the lease's TTL")
        eq(count(a), 150, "answers after kill -9 and restart")
        a.flush()
        eq(count(a), 150, "answers after the flush")
    finally:
        a.stop()


@suite.test
def keyspace_of_an_older_version():
    ks = fresh_keyspace("bdb_owner_old")
    a = server(ks).start()
    try:
        write_points(a, 40)
        a.flush()
    finally:
        a.stop()
    # as an older bucketdb left them: no identity row, no file 'cluster'
    p = cql("DELETE FROM %s.owner WHERE k = 'keyspace'" % ks)
    check(p.returncode == 0, p.stderr)
    os.unlink(os.path.join(a.data, "cluster"))
    b = server(ks).start()  # an empty directory joins it: the catalog from the registry
    try:
        eq(count(b), 40, "answers of an empty directory on the older keyspace")
    finally:
        b.stop()
    p = cql("DELETE FROM %s.owner WHERE k = 'keyspace'" % ks)  # the identity b made
    check(p.returncode == 0, p.stderr)
    a = server(ks, data=a.data).start()  # its own directory: a catalog, taken over
    try:
        eq(count(a), 40, "answers of the adopted keyspace")
        eq(len(rows("SELECT id FROM %s.owner WHERE k = 'keyspace'" % ks)), 1, "identity made")
        check(os.path.exists(os.path.join(a.data, "cluster")), "file 'cluster' written")
    finally:
        a.stop()


@suite.test
def lease_lost_stops_flushes():
    ks = fresh_keyspace("bdb_owner_lost")
    a = server(ks).start()
    try:
        write_points(a, 20)
        a.flush()
        sent = table_rows(ks, "telemetry")
        # a renewal rewrites every column of the lease: a column left out would keep
        # the first write's TTL and expire under a lease renewed ever after
        first = rows("SELECT since FROM %s.owner WHERE k = 'writer'" % ks)[0][0]
        deadline = time.monotonic() + 20  # renewed every 10 s
        while time.monotonic() < deadline:
            r = rows("SELECT since, TTL(node), TTL(host) FROM %s.owner WHERE k = 'writer'" % ks)
            if r and r[0][0] != first:
                break
            time.sleep(0.2)
        check(r and r[0][0] != first, "no renewal of the lease within 20 s: %r" % r)
        check(int(r[0][1]) >= 25 and abs(int(r[0][1]) - int(r[0][2])) <= 2,
              "TTLs of node and host after a renewal: %r" % r)
        # another node takes the lease (as after an outage longer than its TTL)
        p = cql("UPDATE %s.owner USING TTL 120 SET node = 'ffffffffffffffffffffffffffffffff' "
                "WHERE k = 'writer'" % ks)
        check(p.returncode == 0, p.stderr)
        deadline = time.monotonic() + 30  # renewed every 10 s
        while "writer lease of keyspace" not in a.log() and time.monotonic() < deadline:
            time.sleep(0.5)
        contains(a.log(), "the writer lease of keyspace %s is lost to node ffff" % ks)
        write_points(a, 20, first=20)  # still acknowledged: the WAL keeps them
        r = a.post("/internal/flush")
        check(r.status >= 500, "flush after the lease was lost: %d" % r.status)
        eq(table_rows(ks, "telemetry"), sent, "telemetry rows after the lease was lost")
        eq(count(a), 40, "answers (head and WAL) after the failed flush")
    finally:
        a.kill()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
