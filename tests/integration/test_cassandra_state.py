"""Current state, device registry and event counts on Cassandra (serve --storage
cassandra://), against one real Cassandra 2.1.0 node (cassnode.py):

- parity: devices report states and values with out-of-order times, in several
  batches with flushes in between, to an embedded server and to a Cassandra-backed
  one; /api/v1/state/latest, /state/devices (also paged), /state/counts,
  /api/v1/devices and /api/v1/telemetry_by_tenant answer the same on both; the rows
  are in latest_by_device, latest_by_state, devices and telemetry_by_tenant_totals
  (read with `bucketdb cql`);
- an older event flushed after a newer one replaces nothing, neither in the answers
  nor in Cassandra's rows;
- Cassandra is the store: a server started on an EMPTY data directory with the same
  keyspace answers the same state, devices per state, counts, registry and event
  counts;
- a re-sent flush does not count twice: a flush whose raw samples fail (telemetry
  table dropped) after the counts were confirmed, then kill -9 and a restart that
  replays the WAL and flushes everything again: the counts stay exact;
- late arrivals (late_arrivals): /api/v1/late the same on both servers, partly and
  wholly flushed, from an empty data directory too, after a refused flush and a
  kill -9 (late_on_cassandra, late_write_fails_flush);
- states up to 65,536 bytes flush (latest_by_state keys a state over 256 bytes by
  its digest, state_full tells states with one key apart), devices per state agree
  on both backends, also from an empty data directory (long_states_on_cassandra);
- the registry's collections are blob columns, one cell per overwrite; a keyspace
  from before gets them and reads its older columns (registry_collections_encoded);
- string attributes flush into latest_by_device, newest report per name wins, and
  come back from an empty data directory (attributes_on_cassandra); an older
  latest_by_device gets their columns (attributes_added_to_older_keyspace).

With BDB_CASSANDRA_NODE=HOST:PORT (tests/run) the file uses that running node instead
of starting one, its keyspaces named with a per-run suffix (cassnode.keyspace): its
tests kill and restart servers, never the node.

BDB_SEED sets the workload's seed."""

import json
import os
import random
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import BIN, MIN, Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_state", embedded_only="starts its own Cassandra node")
SEED = int(os.environ.get("BDB_SEED", "4004"))
T0 = 1704067200000  # 2024-01-01T00:00:00Z
STATES = ["on", "off", "fault"]
DEVICES = ["lamp-%d" % i for i in range(6)]


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


def rows(ks, stmt):
    return cassnode.cql_rows(NODE, stmt % ks, TestFailure)


NODE = cassnode.node_for("bucketdb-state-", "bucketdb-state-it",
                         cassnode.answers)


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def cass_server(ks, data=None, args=(), adopt=False):
    # adopt: a server on an empty data directory against a keyspace with data is
    # refused unless it takes the keyspace over (cass_owner.h)
    uri = "cassandra://%s:%d/%s?consistency=ONE%s" % (NODE.addr, node().port, ks,
                                                       "&adopt=true" if adopt else "")
    return Server(data=data, args=["--storage", uri, "--flush-interval-ms", "1h"] + list(args))


def workload(rng, rounds=4, per_round=30):
    """Rounds of line-protocol batches: each report has a time in a 3-hour window in
    random order (so many arrive after a newer one), a value and sometimes a state."""
    out = []
    used = set()
    for _ in range(rounds):
        lines = []
        for _ in range(per_round):
            dev = rng.choice(DEVICES)
            while True:
                ts = T0 + rng.randrange(0, 180) * MIN + rng.randrange(0, 60) * 1000
                if (dev, ts) not in used:  # one report per device and time
                    used.add((dev, ts))
                    break
            fields = ["temp=%.1f" % rng.uniform(-5, 40)]
            if rng.random() < 0.5:
                fields.append("rpm=%di" % rng.randrange(0, 3000))
            if rng.random() < 0.6:
                fields.append('state="%s"' % rng.choice(STATES))
            lines.append("env,device=%s,site=s%d %s %d" % (dev, DEVICES.index(dev) % 2,
                                                            ",".join(fields), ts))
        out.append("\n".join(lines))
    return out


def answers(s):
    """Every current-state, registry and count answer of tenant default."""
    a = {}
    for d in DEVICES:
        r = s.get("/api/v1/state/latest", device=d)
        a["latest " + d] = (r.status, r.json() if r.status == 200 else None)
    for st in STATES + ["nope"]:
        r = s.get("/api/v1/state/devices", state=st)
        eq(r.status, 200, "state/devices %s: %r" % (st, r.body[:200]))
        a["devices " + st] = r.json()
        r = s.get("/api/v1/state/devices", state=st, limit=2, cursor="lamp-1")
        a["page " + st] = r.json()
    r = s.get("/api/v1/state/counts")
    eq(r.status, 200, "state/counts")
    a["counts"] = r.json()
    devs = s.devices()
    a["registry"] = sorted(
        (d["device"], json.dumps(d.get("tags"), sort_keys=True), d.get("state"),
         d.get("samples"), json.dumps(sorted(d.get("metrics") or []))) for d in devs["devices"])
    r = s.get("/api/v1/telemetry_by_tenant", **{"from": T0 - 86400000, "to": T0 + 86400000})
    eq(r.status, 200, "telemetry_by_tenant: %r" % r.body[:200])
    a["tbt"] = r.json()
    return a


def same(label, want, got):
    for k in want:
        if want[k] != got.get(k):
            raise TestFailure("%s: %s differs:\n  embedded  %r\n  cassandra %r"
                              % (label, k, want[k], got.get(k)))


@suite.test
def state_on_cassandra():
    ks = cassnode.keyspace("bdb_state_it")
    rng = random.Random(SEED)
    emb = Server(args=["--flush-interval-ms", "1h"]).start()
    cas = cass_server(ks).start()
    try:
        for batch in workload(rng):
            emb.write(batch, precision="ms")
            cas.write(batch, precision="ms")
            emb.flush()
            cas.flush()
        want = answers(emb)
        check(want["counts"] != {}, "no counts: %r" % want["counts"])
        same("after flushes", want, answers(cas))

        # Rows are in Cassandra's tables.
        r = rows(ks, "SELECT device_id, state, event_time FROM %s.latest_by_device "
                     "WHERE tenant_id = 'default'")
        eq(sorted(x[0] for x in r), sorted(DEVICES), "latest_by_device rows")
        for dev, state, _ in r:
            lat = want["latest " + dev][1]
            eq(state if state != "\\N" else None, lat.get("state"), "state of %s" % dev)
        total = 0
        for st in STATES:
            r = rows(ks, "SELECT device_id FROM %%s.latest_by_state WHERE tenant_id = 'default' "
                         "AND state = '%s'" % st)
            eq(sorted(x[0] for x in r), [d["device"] for d in want["devices " + st]["devices"]],
               "latest_by_state %s" % st)
            total += len(r)
        check(total > 0, "latest_by_state is empty")
        r = rows(ks, "SELECT device_id, samples FROM %s.devices WHERE tenant_id = 'default'")
        eq(sorted(x[0] for x in r), sorted(DEVICES), "devices rows")
        r = rows(ks, "SELECT device_id, event_count FROM %s.telemetry_by_tenant_totals "
                     "WHERE tenant_id = 'default' AND day = '2024-01-01 00:00:00'")
        eq(sum(int(x[1]) for x in r), 120, "events in telemetry_by_tenant_totals")

        # An older event never replaces a newer one: for every device, a report at
        # the window's start with another state and value, flushed after the rest.
        old = "\n".join('env,device=%s temp=-99.5,state="stale" %d' % (d, T0 - MIN)
                        for d in DEVICES)
        emb.write(old, precision="ms")
        cas.write(old, precision="ms")
        emb.flush()
        cas.flush()
        want2 = answers(emb)
        for d in DEVICES:
            a, b = want["latest " + d][1], want2["latest " + d][1]
            eq(a.get("state"), b.get("state"), "embedded state of %s after an old event" % d)
        same("after an old event", want2, answers(cas))
        r = rows(ks, "SELECT device_id, state FROM %s.latest_by_device "
                     "WHERE tenant_id = 'default'")
        check(all(x[1] != "stale" for x in r), "an older state replaced a newer one: %r" % r)
        r = rows(ks, "SELECT device_id FROM %s.latest_by_state WHERE tenant_id = 'default' "
                     "AND state = 'stale'")
        eq(r, [], "devices in the older state")
        cas.stop()

        # A directory with another server's catalog (an embedded one's) and no identity
        # file is refused: its catalog and tier files would overwrite the keyspace's rows.
        other = Server(args=["--flush-interval-ms", "1h"]).start()
        other.write(["env,device=lamp-0 temp=1 %d" % T0], precision="ms")
        other.stop()
        refused = cass_server(ks, data=other.data)
        try:
            refused.start()
        except TestFailure as e:
            contains(str(e), "has a catalog but no identity file")
        else:
            refused.stop()
            raise TestFailure("a server on another server's data directory started on a "
                              "keyspace holding another directory's data")
        finally:
            refused.kill()
        # An EMPTY directory starts without adopt=true (it rebuilds its catalog from the
        # registry: test_cassandra_new_dir.py): Cassandra is the store of the state.
        fresh = cass_server(ks).start()
        try:
            got = answers(fresh)
            same("empty data directory", want2, got)
        finally:
            fresh.stop()
    finally:
        emb.stop()
        cas.stop()


@suite.test
def resent_flush_counts_once():
    ks = cassnode.keyspace("bdb_state_resend")
    cas = cass_server(ks).start()
    try:
        lines = "\n".join("env,device=pump temp=%d,state=\"%s\" %d"
                          % (i, STATES[i % 3], T0 + i * 1000) for i in range(50))
        cas.write(lines, precision="ms")
        cas.flush()
        more = "\n".join("env,device=pump temp=%d %d" % (i, T0 + i * 1000) for i in range(50, 80))
        cas.write(more, precision="ms")
        # The raw samples of the next flush fail (no telemetry table) after its state
        # and counts were confirmed: the flush fails and the WAL keeps everything.
        p = cql("DROP TABLE %s.telemetry" % ks)
        check(p.returncode == 0, "drop: %s" % p.stderr)
        r = cas.post("/internal/flush")
        check(r.status >= 500, "a flush without the telemetry table answered %d" % r.status)
        r = rows(ks, "SELECT event_count FROM %s.telemetry_by_tenant_totals "
                     "WHERE tenant_id = 'default' AND day = '2024-01-01 00:00:00'")
        eq([x[0] for x in r], ["80"], "counts written by the failed flush")
        cas.kill()
        # The restart creates the table again, replays the WAL and the flush sends the
        # same samples, state and counts again.
        cas.start()
        cas.flush()
        r = rows(ks, "SELECT event_count FROM %s.telemetry_by_tenant_totals "
                     "WHERE tenant_id = 'default' AND day = '2024-01-01 00:00:00'")
        eq([x[0] for x in r], ["80"], "counts after the re-sent flush")
        doc = cas.get("/api/v1/telemetry_by_tenant", bucket=T0).json()
        eq([d["event_count"] for b in doc["buckets"] for d in b["devices"]], [80],
           "telemetry_by_tenant after the re-sent flush: %r" % doc)
        lat = cas.get("/api/v1/state/latest", device="pump").json()
        eq(lat.get("state"), STATES[49 % 3], "state after the re-sent flush")
        # The 50 samples of the first flush went with the dropped table; the 30 of the
        # failed flush are back from the WAL.
        eq(len(cas.values(device="pump", **{"from": T0, "to": T0 + 3600000})), 30,
           "samples after the re-sent flush")
    finally:
        cas.stop()



# ---- late arrivals (late_arrivals; cass_late.c)

HOUR = 60 * MIN
DAY = 24 * HOUR


def set_clock(s, ms):
    r = s.request("POST", "/internal/clock?now_ms=%d" % ms, b"",
                  {"Authorization": "Token " + s.token})
    eq(r.status, 200, "POST /internal/clock (%r)" % r.body[:200])


def late_doc(s, **params):
    r = s.get("/api/v1/late", **params)
    eq(r.status, 200, "GET /api/v1/late %r (%r)" % (params, r.body[:200]))
    return r.json()


def late_ddl(ks, old=False):
    """late_arrivals' CREATE statement from `bucketdb schema` (old: without the
    device_newest column, as an older bucketdb created it)."""
    p = subprocess.run([BIN, "schema", "--keyspace", ks, "--server-version", "2.1.0"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    check(p.returncode == 0, "bucketdb schema: %s" % p.stderr)
    text = "\n".join(ln for ln in p.stdout.split("\n") if not ln.startswith("--"))
    stmt = [x for x in text.split(";") if "TABLE IF NOT EXISTS %s.late_arrivals" % ks in x]
    eq(len(stmt), 1, "late_arrivals in the schema")
    ddl = stmt[0].strip()
    if old:
        for col in ("  device_newest timestamp,\n", "  arrival_seq bigint,\n"):
            ddl = ddl.replace(col, "")
    return ddl


@suite.test
def late_on_cassandra():
    """Late events hours and days behind, some flushed and some not: /api/v1/late
    answers the same on an embedded and a Cassandra-backed server, the rows are in
    late_arrivals, and a server on an empty data directory answers from Cassandra."""
    ks = cassnode.keyspace("bdb_late_it")
    now = (int(time.time() * 1000) // MIN) * MIN
    args = ["--flush-interval-ms", "1h", "--test-clock", "true"]
    emb = Server(args=args).start()
    cas = cass_server(ks, args=["--test-clock", "true"]).start()
    both = [emb, cas]
    try:
        for s in both:
            set_clock(s, now)
            s.write("env,device=d1 temp=1 %d\nenv,device=d2 temp=2 %d" % (now - MIN, now - MIN),
                    precision="ms")
        late = [("d1", now - 3 * HOUR), ("d2", now - 2 * DAY), ("d1", now - 26 * HOUR),
                ("d2", now - 5 * HOUR), ("d1", now - 7 * DAY)]
        for i, (dev, ts) in enumerate(late):
            for s in both:
                set_clock(s, now + (i + 1) * 1000)  # distinct arrival times
                s.write("env,device=%s temp=%d %d" % (dev, 10 + i, ts), precision="ms")
            if i == 2:  # the first three flushed, the last two only in the local list
                for s in both:
                    s.flush()
        # Two in one batch: the same arrival time, listed in reverse line order.
        pair = [("d2", now - 29 * HOUR), ("d2", now - 30 * HOUR)]  # not in time order
        for s in both:
            set_clock(s, now + 10000)
            s.write("\n".join("env,device=%s temp=0 %d" % x for x in pair), precision="ms")
        late += pair
        want = late_doc(emb)
        eq([(e["device"], e["time_ms"]) for e in want["events"]], list(reversed(late)),
           "embedded late events")
        eq(late_doc(cas), want, "late events, partly flushed")
        for dev in ("d1", "d2"):
            eq(late_doc(cas, device=dev), late_doc(emb, device=dev), "late events of " + dev)
        eq(late_doc(cas, limit=2), late_doc(emb, limit=2), "late events, limit 2")
        r = rows(ks, "SELECT device_id, event_time FROM %s.late_arrivals")
        eq(len(r), 3, "late_arrivals rows after the first flush: %r" % r)
        for s in both:
            s.flush()
        want = late_doc(emb)
        eq(want["recompute_pending"], 0, "embedded recompute pending after the flush")
        eq(late_doc(cas), want, "late events, all flushed")
        r = rows(ks, "SELECT device_id, metric_name, event_time, device_newest, arrived_at "
                     "FROM %s.late_arrivals")
        eq(sorted(x[0] for x in r), sorted(d for d, _ in late), "late_arrivals rows: %r" % r)
        check(all(x[1] == "" for x in r), "metric_name of an event row: %r" % r)
        cas.stop()

        # Cassandra is the store: an empty data directory, the same keyspace.
        fresh = cass_server(ks, adopt=True).start()
        try:
            got = late_doc(fresh)
            eq(got["events"], want["events"], "late events from an empty data directory")
            eq(late_doc(fresh, device="d2")["events"], late_doc(emb, device="d2")["events"],
               "late events of d2 from an empty data directory")
        finally:
            fresh.stop()
    finally:
        emb.stop()
        cas.stop()


@suite.test
def late_write_fails_flush():
    """A keyspace whose late_arrivals predates device_newest and arrival_seq gets the
    columns; a flush whose late events Cassandra refuses (table dropped) fails and
    keeps them; once the table is back the next flush writes them, and they are listed
    after a kill -9 and restart. (The table is dropped before the server
    ever wrote to it: Cassandra 2.1.0 keeps a dropped table's prepared statements.)"""
    ks = cassnode.keyspace("bdb_late_fault")
    node()
    p = cql("CREATE KEYSPACE IF NOT EXISTS %s WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}" % ks, late_ddl(ks, old=True))
    check(p.returncode == 0, "old late_arrivals: %s" % p.stderr)
    now = (int(time.time() * 1000) // MIN) * MIN
    cas = cass_server(ks).start()
    try:
        p = cql("SELECT device_newest, arrival_seq FROM %s.late_arrivals LIMIT 1" % ks)
        check(p.returncode == 0, "columns not added to the old table: %s" % p.stderr)
        p = cql("DROP TABLE %s.late_arrivals" % ks)
        check(p.returncode == 0, "drop: %s" % p.stderr)
        cas.write("env,device=p temp=1 %d\nenv,device=p temp=2 %d" % (now - MIN, now - 2 * DAY),
                  precision="ms")
        r = cas.post("/internal/flush")
        check(r.status >= 500, "a flush without late_arrivals answered %d" % r.status)
        p = cql(late_ddl(ks))
        check(p.returncode == 0, "create: %s" % p.stderr)
        cas.flush()
        r = rows(ks, "SELECT device_id, event_time, device_newest FROM %s.late_arrivals")
        eq(len(r), 1, "the late event of the failed flush, written by the next: %r" % r)
        check(r[0][2] not in ("", "\\N"), "device_newest not written: %r" % r)
        eq(len(cas.values(device="p", **{"from": now - 3 * DAY, "to": now})), 2,
           "samples after the failed flush")
        before = late_doc(cas)["events"]
        eq(len(before), 1, "late events listed")
        cas.kill()
        cas.start()
        eq(late_doc(cas)["events"], before, "late events after kill -9 and restart")
    finally:
        cas.stop()


URL_STATE = 16384  # a longer state does not fit in a request line (414 on both backends)


def urlable(sts):
    return sorted(st for st in sts if len(st) <= URL_STATE)


def in_state(s, st):
    r = s.request("GET", "/api/v1/state/devices?" + urllib.parse.urlencode({"state": st}))
    eq(r.status, 200, "state/devices (%d bytes): %r" % (len(st), r.body[:200]))
    return [d["device"] for d in r.json()["devices"]]


@suite.test
def long_states_on_cassandra():
    """States up to the 65,536-byte ingestion limit flush (latest_by_state's key is a
    digest past 256 bytes), devices per state stay exact, even for a short state that
    spells another one's digest key, and the server stops cleanly."""
    ks = cassnode.keyspace("bdb_state_long")
    big = ["--max-line-bytes", "200000", "--max-tag-value-bytes", "100000"]
    prefix = "p" * 9000
    states = {"huge": "h" * 65536, "edge": "e" * 256, "over": "o" * 257,
              "pa": prefix + "a", "pb": prefix + "b", "pa2": prefix + "a", "short": "on"}
    emb = Server(args=["--flush-interval-ms", "1h"] + big).start()
    cas = cass_server(ks, args=big).start()
    try:
        lines = ['m,device=%s v=1,state="%s" %d' % (d, st, T0) for d, st in states.items()]
        for s in (emb, cas):
            s.write(lines, precision="ms")
            s.flush()
        key = {}
        for st, k, full in rows(ks, "SELECT state, device_id, state_full FROM "
                                    "%s.latest_by_state"):
            key[k] = st
            want = states[k]
            if len(want) <= 256:
                eq(st, want, "key of the short state of %s" % k)
            else:
                eq(len(st), 40, "key of the long state of %s: %r" % (k, st[:60]))
                check(st.startswith("#xxh128:"), "digest key of %s: %r" % (k, st[:60]))
                eq(full, want, "state_full of %s" % k)
        eq(sorted(key), sorted(states), "latest_by_state rows")
        check(key["pa"] == key["pa2"] != key["pb"], "keys: %r" % key)
        # A short state that spells a long state's key shares its partition.
        mimic = ['m,device=mimic v=1,state="%s" %d' % (key["pa"], T0)]
        for s in (emb, cas):
            s.write(mimic, precision="ms")
            s.flush()
        states["mimic"] = key["pa"]
        for st in urlable(set(states.values()) | {prefix + "c", "o" * 256}):
            want = sorted(d for d in states if states[d] == st)
            for s in (emb, cas):
                eq(in_state(s, st), want, "devices in a state of %d bytes" % len(st))
        r = cas.get("/api/v1/state/latest", device="huge")
        eq(r.json().get("state"), states["huge"], "state of huge")
        # Moves between long states, and onto the key-spelling state (same row).
        moves = {"pa": prefix + "b", "huge": "on", "over": key["pa"], "pb": "h" * 65536,
                 "pa2": key["pa"]}  # pa2: from a long state to its own key's spelling
        lines = ['m,device=%s v=2,state="%s" %d' % (d, st, T0 + MIN) for d, st in moves.items()]
        for s in (emb, cas):
            s.write(lines, precision="ms")
            s.flush()
        states.update(moves)
        for st in urlable(set(states.values()) | {prefix + "a"}):
            want = sorted(d for d in states if states[d] == st)
            for s in (emb, cas):
                eq(in_state(s, st), want, "after moves, devices in a state of %d bytes"
                   % len(st))
        # the 65,536-byte state (too long for a URL): its rows
        r = rows(ks, "SELECT device_id, state_full FROM %s.latest_by_state")
        eq(sorted(d for d, full in r if full == "h" * 65536), ["pb"], "rows of the longest state")
        eq(len(r), len(states), "latest_by_state rows after moves")
        cas.stop()  # checks exit 0 and a clean stop: every flush went through
        fresh = cass_server(ks, args=big, adopt=True).start()
        try:
            for st in urlable(states.values()):
                eq(in_state(fresh, st), sorted(d for d in states if states[d] == st),
                   "empty data directory, state of %d bytes" % len(st))
        finally:
            fresh.stop()
    finally:
        emb.stop()
        cas.stop()


@suite.test
def registry_collections_encoded():
    """The devices table's collections are written as blobs: an overwrite at every
    flush is one cell, not a range tombstone plus cells (Cassandra 2.1.0 spun in
    compaction over those, and refuses frozen collections); a keyspace from before
    gets the blob columns added and reads its older columns until a device is
    rewritten."""
    ks = cassnode.keyspace("bdb_state_blobs")
    node()
    cql("DROP KEYSPACE IF EXISTS %s" % ks)
    # A keyspace from before: the devices table with collection columns only.
    p = cql("CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}" % ks,
            "CREATE TABLE %s.devices (tenant_id text, device_id text, tags map<text, text>, "
            "profile text, reporting_class text, bucket_seconds int, sub_buckets int, "
            "max_rate double, first_seen timestamp, last_seen timestamp, pinned boolean, "
            "bucket_history map<timestamp, int>, metrics set<text>, samples bigint, "
            "PRIMARY KEY ((tenant_id), device_id))" % ks,
            "INSERT INTO %s.devices (tenant_id, device_id, tags, reporting_class, "
            "bucket_seconds, first_seen, last_seen, pinned, bucket_history, metrics, samples) "
            "VALUES ('default', 'old-1', {'site': 'x'}, 'unknown', 3600, 1704067200000, "
            "1704067200000, false, {1704067200000: 3600}, {'m.v'}, 1)" % ks)
    check(p.returncode == 0, "old keyspace: %s" % p.stderr)
    # a keyspace with data and no owner identity (an older bucketdb's) on an empty data
    # directory: refused unless adopted (cass_owner.h)
    cas = cass_server(ks, adopt=True).start()
    try:
        types = dict((c[0], c[1]) for c in rows(
            ks, "SELECT column_name, validator FROM system.schema_columns WHERE "
                "keyspace_name = '%s' AND columnfamily_name = 'devices'"))
        for col in ("tags_blob", "history_blob", "metrics_blob"):
            eq(types.get(col), "org.apache.cassandra.db.marshal.BytesType", "devices.%s" % col)
        old = {d["device"]: d for d in cas.devices()["devices"]}
        eq(old["old-1"].get("tags"), {"site": "x"}, "registry of a device written before")
        eq(old["old-1"].get("metrics"), ["m.v"], "metrics of a device written before")
        for i in range(3):  # three overwrites of the same device
            cas.write(["m,device=old-1,site=y%d v=%d %d" % (i, i, T0 + i * MIN)],
                      precision="ms")
            cas.flush()
        d = {d["device"]: d for d in cas.devices()["devices"]}["old-1"]
        eq(d.get("tags"), {"site": "y2"}, "tags after overwrites")
        r = rows(ks, "SELECT tags_blob, tags FROM %s.devices "
                     "WHERE tenant_id = 'default' AND device_id = 'old-1'")
        eq(len(r), 1, "devices row")
        tags = bytes.fromhex(r[0][0][2:])
        check(b"y2" in tags and b"y0" not in tags, "tags_blob: %r" % tags)
        eq(r[0][1], "{'site': 'x'}", "the older column is no longer written")
    finally:
        cas.stop()


@suite.test
def attributes_on_cassandra():
    """String attributes (string fields other than state) are sent at flush into
    latest_by_device's attributes/attribute_times, one element per name at its own
    report's time: an older value flushed later replaces nothing, and a server on an
    EMPTY data directory answers them from Cassandra."""
    ks = cassnode.keyspace("bdb_state_attrs")
    cas = cass_server(ks).start()
    try:
        cas.write(['m,device=a1 v=1,fw="1.2",site="berlin" %d' % (T0 + MIN),
                   'm,device=a2 v=1,fw="9.0" %d' % T0], precision="ms")
        cas.flush()
        cas.write(['m,device=a1 fw="1.1",mode="eco" %d' % T0], precision="ms")  # older fw
        cas.flush()
        want = {"a1": {"m.fw": {"value": "1.2", "time": T0 + MIN},
                       "m.mode": {"value": "eco", "time": T0},
                       "m.site": {"value": "berlin", "time": T0 + MIN}},
                "a2": {"m.fw": {"value": "9.0", "time": T0}}}
        for d, a in want.items():
            eq(cas.get("/api/v1/state/latest", device=d).json()["attributes"], a, d)
        r = rows(ks, "SELECT device_id, attributes FROM %s.latest_by_device")
        got = {d: a for d, a in r}
        eq(got["a1"], "{'m.fw': '1.2', 'm.mode': 'eco', 'm.site': 'berlin'}", "row of a1")
        cas.stop()
        fresh = cass_server(ks, adopt=True).start()
        try:
            for d, a in want.items():
                eq(fresh.get("/api/v1/state/latest", device=d).json()["attributes"], a,
                   "empty data directory, " + d)
        finally:
            fresh.stop()
    finally:
        cas.stop()


@suite.test
def attributes_added_to_older_keyspace():
    """A keyspace whose latest_by_device predates the attributes gets the two map
    columns at start (schema=create) and keeps them from then on."""
    ks = cassnode.keyspace("bdb_state_attrs_old")
    node()
    cql("DROP KEYSPACE IF EXISTS %s" % ks)
    p = cql("CREATE KEYSPACE %s WITH replication = {'class': 'SimpleStrategy', "
            "'replication_factor': 1}" % ks,
            "CREATE TABLE %s.latest_by_device (tenant_id text, device_id text, "
            "event_time timestamp, state text, state_time timestamp, "
            "metrics map<text, double>, metric_times map<text, timestamp>, "
            "PRIMARY KEY ((tenant_id), device_id))" % ks)
    check(p.returncode == 0, "old keyspace: %s" % p.stderr)
    cas = cass_server(ks).start()
    try:
        types = dict((c[0], c[1]) for c in rows(
            ks, "SELECT column_name, validator FROM system.schema_columns WHERE "
                "keyspace_name = '%s' AND columnfamily_name = 'latest_by_device'"))
        check("UTF8Type,org.apache.cassandra.db.marshal.UTF8Type" in
              types.get("attributes", ""), "attributes column: %r" % types.get("attributes"))
        check("TimestampType" in types.get("attribute_times", ""),
              "attribute_times column: %r" % types.get("attribute_times"))
        cas.write(['m,device=o1 v=1,fw="3.1" %d' % T0], precision="ms")
        cas.flush()
        cas.stop()
        fresh = cass_server(ks, adopt=True).start()
        try:
            eq(fresh.get("/api/v1/state/latest", device="o1").json()["attributes"],
               {"m.fw": {"value": "3.1", "time": T0}}, "from the upgraded table")
        finally:
            fresh.stop()
    finally:
        cas.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
