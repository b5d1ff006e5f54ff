#!/usr/bin/env python3
"""`bucketdb schema` against a real Apache Cassandra 2.1.0 node.

Starts ONE node on 127.0.0.1 (scripts/cassandra.sh, free ports, 512 MB heap, all
under a temporary directory), generates the schema with --probe (the generator reads
release_version 2.1.0 and falls back to SizeTieredCompactionStrategy with a
warning), applies it with `bucketdb cql -f`, applies it again (idempotent), checks
the tables and their options in system.schema_columnfamilies, writes and reads rows
of telemetry with USING TTL and with the table's default TTL, applies the other
current-state models and a NetworkTopologyStrategy keyspace, checks the refusals
(gc_grace not above the repair interval, a materialized view on 2.1), and stops the
node.

With BDB_CASSANDRA_NODE=HOST:PORT (tests/run) it uses that running node instead of
starting one, its keyspaces named with a per-run suffix (cassnode.py): nothing here
stops or reconfigures the node.

If Java or the Cassandra package is missing every test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_schema.py
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
KS = cassnode.keyspace("bdb_schema_it")
KS_MODEL = {m: cassnode.keyspace("bdb_schema_%s" % m) for m in ("index", "hash")}
KS_AUTO = cassnode.keyspace("bdb_schema_auto")
TABLES = {"telemetry", "telemetry_by_tenant", "agg_1m", "agg_1h", "agg_1d", "fleet_agg_1h",
          "fleet_agg_1d", "late_arrivals", "devices", "latest_by_device", "latest_by_state",
          "telemetry_by_tenant_totals", "owner", "docs"}


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


NODE = cassnode.node_for("bucketdb-schema-", "bucketdb-schema-it",
                         lambda n: cql("SELECT release_version FROM system.local", check_rc=False))
ADDR = NODE.addr


def run(args, timeout=60):
    return subprocess.run([BIN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=timeout)


def cql(*stmts, args=(), check_rc=True):
    cmd = ["cql", "--host", ADDR, "--port", str(NODE.port)] + list(args)
    for s in stmts:
        cmd += ["-e", s]
    p = run(cmd)
    if check_rc and p.returncode != 0:
        raise Failure("bucketdb cql %r exited %d: %s" % (stmts, p.returncode, p.stderr.strip()))
    return p


def rows(p):
    lines = p.stdout.rstrip("\n").split("\n") if p.stdout.strip() else []
    if not lines:
        return [], []
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def schema(*extra, probe=True):
    args = ["schema", "--keyspace", KS, "--replication", "simple:1"]
    if probe:
        args += ["--probe", "%s:%d" % (ADDR, NODE.port)]
    return run(args + list(extra))


def apply_file(text, name):
    path = os.path.join(NODE.dir, name)
    with open(path, "w") as f:
        f.write(text)
    p = run(["cql", "--host", ADDR, "--port", str(NODE.port), "-f", path], timeout=120)
    check(p.returncode == 0, "applying %s: exit %d: %s" % (name, p.returncode, p.stderr))
    check("error" not in p.stderr.lower(), "applying %s: %s" % (name, p.stderr))
    return p


DDL = {}

# ------------------------------------------------------------------ tests


def test_probe_adapts_to_2_1():
    p = schema("--ttl", "30d", "--bucket", "1h")
    check(p.returncode == 0, "schema --probe exit %d: %s" % (p.returncode, p.stderr))
    check("runs Cassandra 2.1.0" in p.stderr, "probe line missing: %r" % p.stderr)
    check("warning: Cassandra 2.1.0 has neither TimeWindowCompactionStrategy" in p.stderr,
          "no compaction warning: %r" % p.stderr)
    check("TimeWindow" not in p.stdout and "DateTiered" not in p.stdout,
          "2.1.0 has neither TWCS nor DTCS, yet the DDL names one")
    check("MATERIALIZED" not in p.stdout, "no views on 2.1")
    check(p.stdout.count("CREATE ") == p.stdout.count("IF NOT EXISTS"),
          "a CREATE without IF NOT EXISTS")
    DDL["main"] = p.stdout


def test_apply_schema():
    check("main" in DDL, "no DDL generated")
    p = apply_file(DDL["main"], "schema.cql")
    check("CREATED KEYSPACE %s" % KS in p.stdout, p.stdout)
    for t in TABLES:
        check("CREATED TABLE %s.%s" % (KS, t) in p.stdout, "table %s not created: %r"
              % (t, p.stdout))


def test_apply_again_is_idempotent():
    check("main" in DDL, "no DDL generated")
    apply_file(DDL["main"], "schema-again.cql")
    # a fresh generation applied on top works too
    p = schema()
    check(p.returncode == 0, p.stderr)
    apply_file(p.stdout, "schema-third.cql")


def test_tables_exist_with_options():
    p = cql("SELECT columnfamily_name, default_time_to_live, gc_grace_seconds, "
            "compaction_strategy_class FROM system.schema_columnfamilies "
            "WHERE keyspace_name = '%s'" % KS)
    hdr, rs = rows(p)
    by = {r[0]: r for r in rs}
    check(set(by) == TABLES, "tables %s, expected %s" % (sorted(by), sorted(TABLES)))
    check(by["telemetry"][1] == "2592000", "telemetry default TTL %r" % by["telemetry"][1])
    check(by["agg_1m"][1] == "7776000", "agg_1m TTL %r" % by["agg_1m"][1])
    check(by["agg_1h"][1] == "31536000", "agg_1h TTL %r" % by["agg_1h"][1])
    check(by["agg_1d"][1] == "0", "agg_1d TTL %r" % by["agg_1d"][1])
    for t, r in by.items():
        check(r[2] == "864000", "%s gc_grace_seconds %r" % (t, r[2]))
        check(r[3].endswith("SizeTieredCompactionStrategy"), "%s compaction %r" % (t, r[3]))
    p = cql("SELECT strategy_class, strategy_options FROM system.schema_keyspaces "
            "WHERE keyspace_name = '%s'" % KS)
    _, rs = rows(p)
    check(len(rs) == 1 and rs[0][0].endswith("SimpleStrategy") and '"1"' in rs[0][1],
          "keyspace replication %r" % rs)
    # the telemetry key of the seeds
    p = cql("SELECT column_name, type, component_index FROM system.schema_columns "
            "WHERE keyspace_name = '%s' AND columnfamily_name = 'telemetry'" % KS)
    _, rs = rows(p)
    kinds = {r[0]: (r[1], r[2]) for r in rs}
    check(kinds.get("tenant_id") == ("partition_key", "0"), "tenant_id %r" % (kinds,))
    check(kinds.get("device_id") == ("partition_key", "1"), "device_id %r" % (kinds,))
    check(kinds.get("bucket") == ("partition_key", "2"), "bucket %r" % (kinds,))
    check(kinds.get("sub_bucket") == ("partition_key", "3"), "sub_bucket %r" % (kinds,))
    check(kinds.get("event_time") == ("clustering_key", "0"), "event_time %r" % (kinds,))
    check(kinds.get("metric_name") == ("clustering_key", "1"), "metric_name %r" % (kinds,))
    # the owner table: the lease's columns, what `cluster status` reads of its server and
    # the flush generation (older copies of a data directory)
    p = cql("SELECT column_name, validator FROM system.schema_columns "
            "WHERE keyspace_name = '%s' AND columnfamily_name = 'owner'" % KS)
    _, rs = rows(p)
    cols = {r[0]: r[1].rsplit(".", 1)[-1] for r in rs}
    want = {"k": "UTF8Type", "id": "UTF8Type", "node": "UTF8Type", "host": "UTF8Type",
            "pid": "Int32Type", "since": "LongType", "backlog_bytes": "LongType",
            "last_flush": "LongType", "listen": "UTF8Type", "version": "UTF8Type",
            "generation": "LongType"}
    check(cols == want, "owner columns %r, expected %r" % (cols, want))


def test_telemetry_row_with_ttl():
    key = "tenant_id = 't1' AND device_id = 'd1' AND bucket = 1700000000000 AND sub_bucket = 0"
    cql("INSERT INTO %s.telemetry (tenant_id, device_id, bucket, sub_bucket, event_time, "
        "metric_name, metric_value, tags, state) VALUES ('t1', 'd1', 1700000000000, 0, "
        "1700000001000, 'temp', 21.5, {'site': 'berlin'}, 'on') USING TTL 3600" % KS)
    cql("INSERT INTO %s.telemetry (tenant_id, device_id, bucket, sub_bucket, event_time, "
        "metric_name, metric_value) VALUES ('t1', 'd1', 1700000000000, 0, 1700000002000, "
        "'temp', 22.0)" % KS)
    p = cql("SELECT event_time, metric_name, metric_value, tags, state, TTL(metric_value) "
            "FROM %s.telemetry WHERE %s" % (KS, key))
    hdr, rs = rows(p)
    check(len(rs) == 2, "rows %r" % rs)
    # clustered by event_time DESC: the newer sample first
    check(rs[0][0] == "2023-11-14T22:13:22.000Z" and rs[0][2] == "22", "row 0 %r" % rs[0])
    check(rs[1][0] == "2023-11-14T22:13:21.000Z" and rs[1][2] == "21.5", "row 1 %r" % rs[1])
    check(rs[1][3] == "{'site': 'berlin'}" and rs[1][4] == "on", "tags/state %r" % rs[1])
    ttl_explicit, ttl_default = int(rs[1][5]), int(rs[0][5])
    check(0 < ttl_explicit <= 3600, "USING TTL 3600 reads back as %d" % ttl_explicit)
    check(3600 < ttl_default <= 2592000, "default TTL reads back as %d" % ttl_default)


def test_counters_and_latest_state():
    cql("UPDATE %s.telemetry_by_tenant SET event_count = event_count + 5 WHERE tenant_id = 't1' "
        "AND bucket = 1700000000000 AND device_id = 'd1'" % KS)
    _, rs = rows(cql("SELECT event_count FROM %s.telemetry_by_tenant WHERE tenant_id = 't1' AND "
                     "bucket = 1700000000000" % KS))
    check(rs == [["5"]], "counter %r" % rs)
    cql("INSERT INTO %s.latest_by_state (tenant_id, state, device_id, event_time, metrics) "
        "VALUES ('t1', 'on', 'd1', 1700000001000, {'temp': 21.5})" % KS)
    _, rs = rows(cql("SELECT device_id FROM %s.latest_by_state WHERE tenant_id = 't1' AND "
                     "state = 'on'" % KS))
    check(rs == [["d1"]], "latest_by_state %r" % rs)


def test_other_state_models_and_per_dc_replication():
    for model, obj in (("index", "latest_by_device_state_idx"), ("hash", "latest_by_state_bucket")):
        ks = KS_MODEL[model]
        p = run(["schema", "--keyspace", ks, "--probe", "%s:%d" % (ADDR, NODE.port),
                 "--replication", "datacenter1:1", "--state-model", model, "--bucket", "1d",
                 "--ttl", "7d"])
        check(p.returncode == 0, "%s: exit %d %s" % (model, p.returncode, p.stderr))
        check("'class': 'NetworkTopologyStrategy', 'datacenter1': 1" in p.stdout, p.stdout[:600])
        check(obj in p.stdout, "%s missing" % obj)
        apply_file(p.stdout, "schema-%s.cql" % model)
        apply_file(p.stdout, "schema-%s-again.cql" % model)
        # writes and reads work through the NetworkTopologyStrategy keyspace
        cql("INSERT INTO %s.latest_by_device (tenant_id, device_id, event_time, state) VALUES "
            "('t1', 'd9', 1700000000000, 'fault')" % ks)
    _, rs = rows(cql("SELECT device_id FROM %s.latest_by_device WHERE "
                     "tenant_id = 't1' AND state = 'fault'" % KS_MODEL["index"]))
    check(rs == [["d9"]], "secondary index query %r" % rs)
    _, rs = rows(cql("SELECT default_time_to_live FROM system.schema_columnfamilies WHERE "
                     "keyspace_name = '%s' AND columnfamily_name = 'telemetry'"
                     % KS_MODEL["hash"]))
    check(rs == [["604800"]], "--ttl 7d gave %r" % rs)


def test_probe_picks_replication():
    # without --replication the probe reads the data centers: one node in datacenter1
    p = run(["schema", "--keyspace", KS_AUTO, "--probe", "%s:%d" % (ADDR, NODE.port)])
    check(p.returncode == 0, "exit %d: %s" % (p.returncode, p.stderr))
    check("{'class': 'NetworkTopologyStrategy', 'datacenter1': 1}" in p.stdout, p.stdout[:600])
    check("1 node(s); replication datacenter1:1" in p.stderr, p.stderr)
    apply_file(p.stdout, "schema-auto.cql")
    cql("INSERT INTO %s.devices (tenant_id, device_id, profile) VALUES "
        "('t1', 'd1', 'high')" % KS_AUTO)
    _, rs = rows(cql("SELECT profile FROM %s.devices WHERE tenant_id = 't1'" % KS_AUTO))
    check(rs == [["high"]], "devices %r" % rs)


def test_refusals():
    p = schema("--gc-grace", "1d", "--repair-interval", "7d")
    check(p.returncode == 2, "gc_grace below the repair interval: exit %d" % p.returncode)
    check("must exceed the repair interval" in p.stderr, p.stderr)
    check(p.stdout == "", "DDL printed despite the refusal")
    p = schema("--state-model", "mv")
    check(p.returncode == 2, "materialized view on 2.1: exit %d" % p.returncode)
    check("materialized views need Cassandra 3.0" in p.stderr, p.stderr)
    p = run(["schema", "--probe", "%s:%d" % (ADDR, cassnode.free_port())])
    check(p.returncode == 1, "probe of a closed port: exit %d" % p.returncode)
    # nothing of the refused runs reached the node: the keyspace still has its tables only
    _, rs = rows(cql("SELECT columnfamily_name FROM system.schema_columnfamilies WHERE "
                     "keyspace_name = '%s'" % KS))
    check({r[0] for r in rs} == TABLES, "tables changed: %r" % rs)


TESTS = [test_probe_adapts_to_2_1, test_apply_schema, test_apply_again_is_idempotent,
         test_tables_exist_with_options, test_telemetry_row_with_ttl,
         test_counters_and_latest_state, test_other_state_models_and_per_dc_replication,
         test_probe_picks_replication, test_refusals]


def main():
    if os.environ.get("BDB_TEST_STORAGE"):  # tests/cassandra-suite: this file runs its own node
        print("test_cassandra_schema: skipped on cassandra: starts its own Cassandra node\n"
              "0 passed, 0 failed")
        NODE.stop()  # never started: only removes its (empty) directory
        sys.exit(0)
    passed = failed = 0
    print("test_cassandra_schema: binary %s" % BIN, flush=True)
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
            err = setup_error
            if not err:
                try:
                    fn()
                except Exception:
                    err = traceback.format_exc()
            if err:
                failed += 1
                print("%-50s FAIL\n%s" % (fn.__name__, err.rstrip()), flush=True)
            else:
                passed += 1
                print("%-50s ok" % fn.__name__, flush=True)
        if failed and (NODE.pid or cassnode.shared_addr()):
            print(NODE.log_tail(), flush=True)
    finally:
        NODE.stop()
    print("%d passed, %d failed" % (passed, failed), flush=True)
    sys.exit(1 if failed or passed == 0 else 0)


if __name__ == "__main__":
    main()
