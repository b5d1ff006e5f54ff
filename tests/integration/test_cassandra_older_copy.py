"""An older copy of a data directory against its keyspace (cass_owner.h, the flush
generation; docs/CASSANDRA.md, "Older copies of the data directory"), on one real
Cassandra 2.1.0 node (cassnode.py; the shared one when $BDB_CASSANDRA_NODE is set).

Issue 20: a server started on a directory restored from an older backup (same
keyspace id, same node id, a free lease) started, answered 404 for what the original
flushed after the copy was made and overwrote tier, fleet and device rows with
partial windows. Each flush that wrote something now counts one generation, in the
directory's file 'cluster' first and then in the keyspace's owner row 'generation':

- a copy made after a first flush (server stopped), started after the original
  flushed more: refused (exit 2, both generations, the directory and what to do in
  the log), nothing written; the original still starts and answers everything;
- a file one generation behind (a copy one flush old) is refused too; one ahead
  (a crash between the file's write and the keyspace's) starts, and the next flush
  brings the keyspace level with the file;
- adopt=true on the old copy starts and takes the keyspace's generation over; it
  answers what the copy knew and 404 for the devices first seen after it;
- a file of an older bucketdb (version 1, no generation) against a keyspace without
  generations starts and counts; against a keyspace with generations it is refused.

    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_older_copy.py"""

import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import MIN, Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_older_copy", embedded_only="starts its own Cassandra node")
T0 = 1704067200000  # 2024-01-01T00:00:00Z


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


def rows(stmt):
    return cassnode.cql_rows(NODE, stmt, TestFailure)


NODE = cassnode.node_for("bucketdb-older-", "bucketdb-older-it",
                         cassnode.answers)


def node():
    return cassnode.ensure(NODE, TestFailure)


def server(ks, data=None, adopt=False):
    uri = "cassandra://%s:%d/%s?consistency=ONE%s" % (NODE.addr, node().port, ks,
                                                      "&adopt=true" if adopt else "")
    return Server(data=data, args=["--storage", uri, "--flush-interval-ms", "1h"])


def refused(s, want):
    """Starts s, which must exit with status 2 and every string of want in its log."""
    try:
        s.start()
    except TestFailure as e:
        contains(str(e), "server exited with 2 ")
        for w in want:
            contains(str(e), w)
        return
    finally:
        s.kill()
    raise TestFailure("server started; expected a refusal with %r" % (want,))


def fresh_keyspace(name):
    ks = cassnode.keyspace(name)
    node()
    p = cql("DROP KEYSPACE IF EXISTS %s" % ks)
    check(p.returncode == 0, p.stderr)
    return ks


def write_points(s, n, first=0, devices=range(5)):
    devs = list(devices)
    s.write(["m,device=d%d v=%d %d" % (devs[i % len(devs)], i, T0 + i * MIN)
             for i in range(first, first + n)], precision="ms")


def count(s, devices=range(5)):
    return sum(len(s.values(device="d%d" % i, **{"from": T0, "to": T0 + 10000 * MIN}))
               for i in devices)


def file_gen(data):
    """The generation line of data's file 'cluster' (None without one) and its text."""
    with open(os.path.join(data, "cluster")) as f:
        text = f.read()
    m = re.search(r"^generation (\d+)$", text, re.M)
    return (int(m.group(1)) if m else None), text


def set_file(data, text):
    with open(os.path.join(data, "cluster"), "w") as f:
        f.write(text)


def ks_gen(ks):
    r = rows("SELECT generation, node FROM %s.owner WHERE k = 'generation'" % ks)
    return (int(r[0][0]) if r and r[0][0] not in ("", "null", "NULL") else None), r


def table_rows(ks, table):
    return int(rows("SELECT count(*) FROM %s.%s" % (ks, table))[0][0])


@suite.test
def older_copy_refused_original_starts_adopt_takes_over():
    ks = fresh_keyspace("bdb_older_copy")
    a = server(ks).start()
    try:
        write_points(a, 50)
        a.flush()
        g1, text = file_gen(a.data)
        check(g1 is not None and g1 >= 1, "generation after a flush: %r" % text)
        contains(text, "bucketdb-cluster 2\n")
        eq(ks_gen(ks)[0], g1, "the keyspace's generation after the first flush")
        a.flush()  # nothing written since: nothing counted
        eq(file_gen(a.data)[0], g1, "the file's generation after an idle flush")
    finally:
        a.stop()
    g1, _ = file_gen(a.data)
    eq(ks_gen(ks)[0], g1, "the keyspace's generation after the stop")
    copy = os.path.join(Server().dir, "copy")
    shutil.copytree(a.data, copy, ignore=shutil.ignore_patterns("LOCK"))
    # the original runs on: new devices d5..d9, flushed
    a = server(ks, data=a.data).start()
    try:
        write_points(a, 50, first=50, devices=range(5, 10))
        a.flush()
    finally:
        a.stop()
    g2, _ = file_gen(a.data)
    check(g2 > g1, "the original's generation %r after more flushes (copy: %r)" % (g2, g1))
    eq(ks_gen(ks)[0], g2, "the keyspace's generation after the original's flushes")
    before = (table_rows(ks, "telemetry"), table_rows(ks, "devices"), ks_gen(ks))
    refused(server(ks, data=copy),
            ["data directory %s is an older copy: flush generation %d, keyspace %s is at %d"
             % (copy, g1, ks, g2), "(this directory's)", "Start on the newest copy",
             "adopt=true", "older-copies-of-the-data-directory"])
    eq((table_rows(ks, "telemetry"), table_rows(ks, "devices"), ks_gen(ks)), before,
       "rows after the refused start")
    eq(file_gen(copy)[0], g1, "the refused copy's file")
    # the original directory still starts and answers everything
    a = server(ks, data=a.data).start()
    try:
        eq(count(a, range(10)), 100, "the original's answers")
    finally:
        a.stop()
    # adopt=true on the old copy: starts, takes the keyspace's generation over
    g3 = ks_gen(ks)[0]
    c = server(ks, data=copy, adopt=True).start()
    try:
        contains(c.log(), "takes flush generation %d over" % g3)
        eq(file_gen(copy)[0], g3, "the adopted copy's file")
        eq(count(c, range(5)), 50, "what the copy knew")
        for i in range(5, 10):  # first seen after the copy: its catalog does not know them
            c.query(expect=404, device="d%d" % i, **{"from": T0, "to": T0 + 10000 * MIN})
    finally:
        c.stop()


@suite.test
def one_behind_refused_one_ahead_starts():
    ks = fresh_keyspace("bdb_older_crash")
    a = server(ks).start()
    try:
        write_points(a, 20)
        a.flush()
    finally:
        a.stop()
    g, text = file_gen(a.data)
    eq(ks_gen(ks)[0], g, "keyspace and file after the stop")
    # a copy one flush old: behind by one is an older copy too
    set_file(a.data, text.replace("generation %d\n" % g, "generation %d\n" % (g - 1)))
    refused(server(ks, data=a.data),
            ["is an older copy: flush generation %d, keyspace %s is at %d" % (g - 1, ks, g)])
    # a crash after the file's write and before the keyspace's: the file is one ahead
    set_file(a.data, text.replace("generation %d\n" % g, "generation %d\n" % (g + 1)))
    a = server(ks, data=a.data).start()
    try:
        eq(count(a), 20, "answers after the crash window")
        write_points(a, 10, first=20)
        a.flush()
        eq(file_gen(a.data)[0], g + 1, "the file after the next flush")
        eq(ks_gen(ks)[0], g + 1, "the keyspace after the next flush: level with the file")
    finally:
        a.stop()
    eq(ks_gen(ks)[0], file_gen(a.data)[0], "keyspace and file after the stop")


@suite.test
def file_of_an_older_version():
    ks = fresh_keyspace("bdb_older_v1")
    a = server(ks).start()
    try:
        write_points(a, 20)
        a.flush()
    finally:
        a.stop()
    g, text = file_gen(a.data)
    v1 = text.replace("bucketdb-cluster 2\n", "bucketdb-cluster 1\n")
    v1 = re.sub(r"generation \d+\n", "", v1)
    # a keyspace with generations: a directory from before them is older than it
    set_file(a.data, v1)
    refused(server(ks, data=a.data),
            ["flush generation none (a file of an older bucketdb), keyspace %s is at %d"
             % (ks, g)])
    # as an older bucketdb left both: no generation anywhere, accepted and counted
    p = cql("DELETE FROM %s.owner WHERE k = 'generation'" % ks)
    check(p.returncode == 0, p.stderr)
    a = server(ks, data=a.data).start()
    try:
        eq(count(a), 20, "answers on an older version's file")
        eq(file_gen(a.data), (None, v1), "the file before the first flush")
        write_points(a, 10, first=20)
        a.flush()
        eq(file_gen(a.data)[0], 1, "the file after the first flush")
        eq(ks_gen(ks)[0], 1, "the keyspace after the first flush")
    finally:
        a.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
