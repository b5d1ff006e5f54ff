#!/usr/bin/env python3
"""Deleting a tenant (issue 18, Tenants): with auth = auto (loopback, no token
required), a deleted tenant's data must not be readable by anyone, with no token or
with the admin token, on any read API; a tenant created again under the same name
starts empty and sees only what it writes; both hold across a flush, a clean restart
and a restart after SIGKILL (WAL replay), and the old data's block files go at the next
maintenance (embedded engine); MQTT messages for the name reach the new tenant. Each
test fails on a server where deleting a tenant only removes it from the registry.
The purge then removes the old generation's data: no file of the data directory names
a device of it any more (catalog, latest, fleet, tier, block files and the WAL; on
Cassandra, no row of the old key in any table), and a restart does not bring it back."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import ON_CASSANDRA, Server, Suite, check, embedded_only, eq, path_with  # noqa: E402
from bdbtest import TestFailure, _cql, _keyspaces  # noqa: E402

suite = Suite("tenant_delete")
T0 = 1705327200000  # 2024-01-15T14:00:00Z
OLD = "olddev-7f3a"     # a device only the deleted tenant wrote
BOTH = "shared-dev"      # a device both the old and the new tenant write
NEW = "newdev-51c9"


def tok(t):
    return {"Authorization": "Token " + t} if t else {}


def admin(s, method, path, doc=None):
    hdrs = tok(s.token)
    body = None
    if doc is not None:
        body = json.dumps(doc)
        hdrs["Content-Type"] = "application/json"
    return s.request(method, "/api/v1/admin" + path, body, hdrs)


def create(s, name):
    r = admin(s, "POST", "/tenants", {"name": name})
    eq(r.status, 201, "create %s (%r)" % (name, r.body[:300]))
    return r.json()["token"]


def get(s, path, token=None, **params):
    return s.request("GET", path_with(path, params), None, tok(token))


def write(s, lines, token=None, **params):
    params.setdefault("precision", "ms")
    r = s.request("POST", path_with("/write", params), "\n".join(lines) + "\n", tok(token))
    eq(r.status, 204, "POST /write %r (%r)" % (params, r.body[:300]))


def old_data(s, base, n=3):
    """The deleted tenant's writes: raw samples with a state and a string attribute
    (the purge frees the attributes of the current-state index too), on two devices."""
    write(s, ["m,device=%s v=%d,w=%d,fw=\"1.%d\" %d" % (d, i + 1, 100 + i, i, base + i * 1000)
              for d in (OLD, BOTH) for i in range(n)], s.t1)
    r = s.request("POST", "/api/v1/write/json",
                  json.dumps({"device": OLD, "time": base + 5000, "state": "alarm",
                              "metrics": {"v": 99}}),
                  dict(tok(s.t1), **{"Content-Type": "application/json"}))
    eq(r.status, 204, "JSON write (%r)" % r.body[:300])


def influx_devices(s, token, **params):
    """The devices InfluxQL lists for the tenant (SHOW TAG VALUES of the device tag)."""
    r = get(s, "/query", token, q="SHOW TAG VALUES WITH KEY = device", **params)
    eq(r.status, 200, "SHOW TAG VALUES (%r)" % r.body[:300])
    res = r.json()["results"][0]
    return sorted({v[1] for ser in res.get("series", []) for v in ser["values"]})


def sees_nothing_old(s, token, **params):
    """Every read API, as `token` (None: no token) for tenant params: nothing of the
    deleted tenant's data, whatever the answer's form (404 for an unknown device, or
    an empty list)."""
    rng = {"from": T0 - 86400000, "to": T0 + 86400000}
    for dev in (OLD, BOTH):
        r = get(s, "/api/v1/query", token, device=dev, **dict(rng, **params))
        if r.status == 200:
            vals = [v for v in r.json()["values"] if v[2] < 1000]  # old values: 1..99
            eq(vals, [], "old samples of %s in the query answer" % dev)
        else:
            eq(r.status, 404, "query %s (%r)" % (dev, r.body[:300]))
        r = get(s, "/api/v1/state/latest", token, device=dev, **params)
        if r.status == 200:
            check(r.json().get("state") != "alarm", "old state of %s: %r" % (dev, r.text))
        else:
            eq(r.status, 404, "latest %s (%r)" % (dev, r.body[:300]))
    r = get(s, "/api/v1/devices", token, **params)
    eq(r.status, 200, "devices (%r)" % r.body[:300])
    names = [d["device"] for d in r.json()["devices"]]
    check(OLD not in names, "the deleted tenant's device is listed: %r" % names)
    names = influx_devices(s, token, **params)
    check(OLD not in names, "InfluxQL lists the deleted tenant's device: %r" % names)
    r = get(s, "/api/v1/state/devices", token, state="alarm", **params)
    eq(r.status, 200, "state/devices (%r)" % r.body[:300])
    eq(r.json().get("devices"), [], "devices in the old state")
    r = get(s, "/api/v1/fleet", token, metric="m.w", resolution="1h", **dict(rng, **params))
    eq(r.status, 200, "fleet (%r)" % r.body[:300])
    eq(r.json()["values"], [], "fleet windows of the old data")
    r = get(s, "/api/v1/export", token, **dict(rng, **params))
    if r.status == 200:
        check(OLD not in r.text and "alarm" not in r.text, "old rows in export: %r" % r.text[:500])
    r = get(s, "/api/v1/telemetry_by_tenant", token, **dict(rng, **params))
    if r.status == 200:
        check(OLD not in r.text, "old counts: %r" % r.text[:500])


def block_bytes(s):
    d = os.path.join(s.data, "blocks")
    out = b""
    for f in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        with open(os.path.join(d, f), "rb") as fh:
            out += fh.read()
    return out


def after_delete(s):
    """The checks of a deleted t1, before and after it is created again."""
    # The old token matches nothing now; where auth is optional that is no token
    # (issue 19: InfluxDB with auth off ignores credentials), so its write goes to the
    # default tenant, never to t1 (sees_nothing_old below reads t1).
    eq(s.request("POST", path_with("/write", {"precision": "ms"}),
                 "m,device=x v=1 %d\n" % T0, tok(s.t1)).status, 204, "old token")
    sees_nothing_old(s, None, tenant="t1")
    sees_nothing_old(s, s.token, tenant="t1")
    sees_nothing_old(s, None, db="t1")


@suite.test
def deleted_data_is_unreachable_and_a_new_tenant_starts_empty():
    with Server() as s:
        s.t1new = None
        s.t1 = create(s, "t1")
        old_data(s, T0)
        s.flush()                       # in block files (or Cassandra rows)...
        old_data(s, T0 + 60000)         # ...and in the head and the WAL
        check(OLD.encode() in block_bytes(s) or ON_CASSANDRA, "old data flushed")
        for _ in range(3):  # InfluxQL keeps the catalog it listed twice (docs/INFLUX.md)
            eq(influx_devices(s, s.t1), sorted([BOTH, OLD]))
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        after_delete(s)                 # at once, before any flush
        s.flush()
        after_delete(s)
        if not ON_CASSANDRA:            # removed at the maintenance /internal/flush runs
            check(OLD.encode() not in block_bytes(s), "old device still in block files")
        # The name is free again; the new tenant sees nothing of the old one's.
        s.t1new = create(s, "t1")
        sees_nothing_old(s, s.t1new)
        r = get(s, "/api/v1/devices", s.t1new)
        eq(r.json()["devices"], [], "devices of the new t1")
        write(s, ["m,device=%s v=5000 %d" % (BOTH, T0 + 10), "m,device=%s v=6000 %d"
                  % (NEW, T0 + 20)], s.t1new)

        def only_new(token, **params):
            r = get(s, "/api/v1/query", token, device=BOTH, **dict(
                {"from": T0 - 1, "to": T0 + 86400000}, **params))
            eq(r.status, 200, "new data (%r)" % r.body[:300])
            eq([(v[0], v[2]) for v in r.json()["values"]], [(T0 + 10, 5000.0)])
            eq(r.json()["tenant"], "t1", "the tenant as answers name it")
            r = get(s, "/api/v1/devices", token, **params)
            eq(sorted(d["device"] for d in r.json()["devices"]), sorted([BOTH, NEW]))
            eq(r.json()["tenant"], "t1")
            for _ in range(3):
                eq(influx_devices(s, token, **params), sorted([BOTH, NEW]))
            for path, extra in (("/api/v1/state/counts", {}),
                                ("/api/v1/state/latest", {"device": NEW}),
                                ("/api/v1/fleet", {"metric": "m.v"})):
                r = get(s, path, token, **dict(extra, **params))
                eq((r.status, r.json()["tenant"]), (200, "t1"), path)
            r = get(s, "/api/v1/query", token, device="nosuch", **params)
            eq((r.status, r.json()["error"]), (404, "device 'nosuch' not found in tenant 't1'"))
        only_new(s.t1new)
        only_new(s.token, tenant="t1")
        eq(get(s, "/api/v1/query", None, device=BOTH, tenant="t1").status, 401)
        s.flush()
        only_new(s.t1new)
        s.restart()
        sees_nothing_old(s, s.t1new)
        only_new(s.t1new)
        with open(os.path.join(s.data, "tenants")) as f:
            check(re.search(r"^deleted t1 gen=1 at=\d+( purged=[01])?$", f.read(), re.M), "tombstone line")


@suite.test
def deletion_survives_sigkill_and_wal_replay():
    with Server() as s:
        s.t1new = None
        s.t1 = create(s, "t1")
        old_data(s, T0)                 # only in the WAL: never flushed
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        s.kill()
        s.start()                       # replays the WAL, old records included
        after_delete(s)
        s.t1new = create(s, "t1")
        sees_nothing_old(s, s.t1new)
        s.kill()
        s.start()
        sees_nothing_old(s, s.t1new)
        sees_nothing_old(s, None, tenant="t2")  # an unrelated name was never touched
        s.flush()
        sees_nothing_old(s, s.token, tenant="t1")


@suite.test
def deleting_twice_and_anonymous_use_of_a_deleted_name():
    with Server() as s:
        s.t1new = None
        s.t1 = create(s, "t1")
        old_data(s, T0)
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        # Without a token the name works again, as any unregistered name, but starts
        # empty; what is written now belongs to the name's new generation.
        write(s, ["m,device=anon2 v=8 %d" % T0], None, tenant="t1")
        sees_nothing_old(s, None, tenant="t1")
        r = get(s, "/api/v1/devices", None, tenant="t1")
        eq([d["device"] for d in r.json()["devices"]], ["anon2"])
        # A second life and a second deletion: both older generations stay gone.
        s.t1 = create(s, "t1")
        old_data(s, T0 + 120000)
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        sees_nothing_old(s, None, tenant="t1")
        r = get(s, "/api/v1/devices", None, tenant="t1")
        eq(r.json()["devices"], [], "devices after the second deletion")
        s.restart()
        sees_nothing_old(s, None, tenant="t1")
        with open(os.path.join(s.data, "tenants")) as f:
            check(re.search(r"^deleted t1 gen=2 at=\d+( purged=[012])?$", f.read(), re.M), "tombstone gen 2")


@suite.test
def mqtt_writes_reach_the_new_tenant_only():
    """MQTT messages name their tenant in the topic, without a token: after a deletion
    they must land in the name's new generation, where the re-created tenant reads
    them, never in the deleted one."""
    from test_mqtt import Broker, wait_connected, wait_for
    with Broker() as b:
        with Server(args=["--mqtt-broker", "127.0.0.1:%d" % b.port, "--mqtt-client-id",
                          "bdbtest-tdel", "--mqtt-topics", "bucketdb/#"]) as s:
            s.t1new = None
            s.t1 = create(s, "t1")
            wait_connected(s, b)

            def has(token, dev, **params):
                r = get(s, "/api/v1/query", token, device=dev,
                        **dict({"from": T0 - 1, "to": T0 + 86400000}, **params))
                return r.status == 200 and r.json()["count"] > 0
            check(b.publish("bucketdb/t1/%s/telemetry" % OLD, "m v=1 %d" % (T0 * 10**6)),
                  "publish (old)")
            wait_for("the old message", lambda: has(s.t1, OLD))
            eq(admin(s, "DELETE", "/tenants/t1").status, 204)
            s.t1new = create(s, "t1")
            check(b.publish("bucketdb/t1/%s/telemetry" % NEW, "m v=2 %d" % (T0 * 10**6)),
                  "publish (new)")
            wait_for("the new message", lambda: has(s.t1new, NEW))
            check(not has(s.t1new, OLD), "the new t1 reads the deleted one's MQTT data")
            check(not has(s.token, OLD, tenant="t1"), "the admin token reads deleted data")


ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def file_text(path):
    """A file's bytes, with the zstd frames inside it (catalog, fleet files) inflated by
    the zstd command, which every build machine has (the engine links libzstd)."""
    with open(path, "rb") as fh:
        raw = fh.read()
    out = raw
    at = raw.find(ZSTD_MAGIC)
    while at >= 0:
        if not shutil.which("zstd"):
            raise TestFailure("%s holds a zstd frame and no zstd command is installed" % path)
        r = subprocess.run(["zstd", "-dcq"], input=raw[at:], capture_output=True, timeout=60)
        out += r.stdout  # trailing bytes (a CRC) make zstd complain after the frame
        at = raw.find(ZSTD_MAGIC, at + 4)
    return out


def files_naming(data, names):
    """The files under data whose bytes (inflated) hold one of the names."""
    hits = []
    for root, _, files in os.walk(data):
        for f in files:
            p = os.path.join(root, f)
            text = file_text(p)
            hits += ["%s: %s" % (os.path.relpath(p, data), n) for n in names
                     if n.encode() in text]
    return hits


def metric(s, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), s.metrics_text(), re.M)
    check(m, "%s not in /metrics" % name)
    return int(m.group(1))


def wait_purged(s, want_total=None):
    """Until no deleted generation is left to purge (bounded: 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metric(s, "bucketdb_tenant_purges_pending") == 0 and (
                want_total is None or metric(s, "bucketdb_tenant_purges_total") >= want_total):
            return
        time.sleep(0.1)
    raise TestFailure("the purge did not finish in 60 s: %s" % [
        l for l in s.metrics_text().splitlines() if "purge" in l])


def cassandra_rows_of(s, key):
    """(table, rows) of tenant key in every table of the server's keyspace that has a
    tenant_id column (read whole: a test keyspace is small, and a partition key cannot
    be filtered on one of its parts)."""
    ks = _keyspaces[os.path.realpath(s.data)][0]
    tables = _cql("SELECT columnfamily_name FROM system.schema_columnfamilies "
                  "WHERE keyspace_name = '%s'" % ks).split()[1:]
    found = []
    for t in tables:
        cols = _cql("SELECT column_name FROM system.schema_columns WHERE keyspace_name = "
                    "'%s' AND columnfamily_name = '%s'" % (ks, t)).split()[1:]
        if "tenant_id" not in cols:
            continue
        rows = _cql("SELECT tenant_id FROM %s.%s" % (ks, t)).splitlines()[1:]
        n = sum(1 for r in rows if r == key)
        if n:
            found.append((t, n))
    return found


@suite.test
def purge_removes_the_old_generation_everywhere():
    """After the purge no file of the data directory (or row of the keyspace) holds a
    device of the deleted tenant, the engine counts none of its devices, and the name's
    new tenant and a bystander are untouched; the registry records the purge."""
    with Server() as s:
        s.t1 = create(s, "t1")
        old_data(s, T0)
        write(s, ["m,device=%s v=3 %d" % (OLD, T0 - 3 * 3600000)], s.t1)  # a late event
        s.flush()                       # blocks, tier, fleet files, catalog, latest
        old_data(s, T0 + 60000)         # head and WAL
        write(s, ["m,device=bystander v=7 %d" % T0], None, tenant="keep")
        if ON_CASSANDRA:
            # an hour ago: 2024 is past the 1m and 1h tiers' retention, so only recent
            # data has agg_1m, agg_1h and fleet_agg_1h rows (on the embedded engine its
            # block window would not have ended: it stays until then, TENANCY.md)
            write(s, ["m,device=%s v=4 %d" % (OLD, int(time.time() * 1000) - 3600000)], s.t1)
            s.flush()
            before = {t for t, _ in cassandra_rows_of(s, "t1")}
            want = {"telemetry", "agg_1m", "agg_1h", "agg_1d", "fleet_agg_1h", "fleet_agg_1d",
                    "latest_by_device", "latest_by_state", "devices", "late_arrivals",
                    "telemetry_by_tenant_totals"}
            check(want <= before, "old rows in every table before: missing %r" % (want - before))
        else:
            before = {h.split(":")[0].split(os.sep)[0] for h in files_naming(s.data, [OLD])}
            check({"catalog", "latest", "fleet", "tiers", "blocks", "wal"} <= before,
                  "the old device is in every kind of file before: %r" % sorted(before))
        devices_before = metric(s, "bucketdb_devices")
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        wait_purged(s, 1)
        s.flush()                       # maintenance: expired block windows
        eq(metric(s, "bucketdb_devices"), devices_before - 2, "devices the engine counts")
        if ON_CASSANDRA:
            eq(cassandra_rows_of(s, "t1"), [], "rows of the old key in Cassandra")
        else:
            eq(files_naming(s.data, [OLD, BOTH]), [], "files naming the old devices")
            check(files_naming(s.data, ["bystander"]), "the bystander's device in the files")
        with open(os.path.join(s.data, "tenants")) as f:
            check(re.search(r"^deleted t1 gen=1 at=\d+ purged=1$", f.read(), re.M),
                  "the registry records the purge")
        s.t1new = create(s, "t1")
        write(s, ["m,device=%s v=5000 %d" % (NEW, T0 + 10)], s.t1new)
        s.restart()                     # nothing comes back from the catalog or the WAL
        wait_purged(s)
        eq(metric(s, "bucketdb_devices"), devices_before - 1, "devices after the restart")
        sees_nothing_old(s, s.token, tenant="t1")
        r = get(s, "/api/v1/devices", s.t1new)
        eq([d["device"] for d in r.json()["devices"]], [NEW], "the new t1's devices")
        r = get(s, "/api/v1/query", None, device="bystander", tenant="keep",
                **{"from": T0 - 1, "to": T0 + 1})
        eq(r.json()["count"], 1, "the bystander's sample")
        if not ON_CASSANDRA:
            eq(files_naming(s.data, [OLD, BOTH]), [], "files naming the old devices")


def registry_with(data, edit):
    """Rewrites <data>/tenants (server stopped) through edit(lines) and a new CRC. On
    Cassandra the keyspace's registry document is the truth at start (docs/TENANCY.md):
    its header row goes, so that the start stores the edited file up instead."""
    path = os.path.join(data, "tenants")
    with open(path) as f:
        lines = [l for l in f.read().splitlines() if not l.startswith("crc32 ")]
    body = "\n".join(edit(lines)) + "\n"
    with open(path, "w") as f:
        f.write(body + "crc32 %08x\n" % (zlib.crc32(body.encode()) & 0xffffffff))
    if ON_CASSANDRA:
        ks = _keyspaces[os.path.realpath(data)][0]
        _cql("DELETE FROM %s.docs WHERE k = 'tenants'" % ks)


@suite.test
def a_purged_key_written_again_is_dropped_at_start():
    """A write that resolved its tenant before the deletion and reached the engine after
    the purge puts the old key back: the next start drops it again. Made here by
    recording a deletion and its purge in the registry of a stopped server whose engine
    still holds the tenant's data."""
    with Server() as s:
        s.t1 = create(s, "t1")
        old_data(s, T0)
        s.flush()
        write(s, ["m,device=bystander v=7 %d" % T0], None, tenant="keep")
        devices_before = metric(s, "bucketdb_devices")
        s.stop()

        def deleted_and_purged(lines):
            lines = [l for l in lines if not l.startswith("tenant t1 ")]
            n = [l for l in lines if l.startswith("count ")][0]
            lines[lines.index(n)] = "count %d" % (int(n.split()[1]) - 1)
            lines.insert(lines.index("count %d" % (int(n.split()[1]) - 1)),
                         "deleted t1 gen=1 at=%d purged=1" % T0)
            return lines
        registry_with(s.data, deleted_and_purged)
        s.start()
        deadline = time.monotonic() + 30
        while metric(s, "bucketdb_devices") != devices_before - 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        eq(metric(s, "bucketdb_devices"), devices_before - 2, "devices after the start")
        check("holds 2 device(s) again" in s.log(), "the log names the second drop")
        s.flush()
        if ON_CASSANDRA:
            eq(cassandra_rows_of(s, "t1"), [], "rows of the old key in Cassandra")
        else:
            eq(files_naming(s.data, [OLD, BOTH]), [], "files naming the old devices")
        eq(metric(s, "bucketdb_tenant_purges_pending"), 0, "nothing pending")


@suite.test
@embedded_only("the fault switch fails the data directory's storage calls")
def a_failed_purge_is_counted_and_completed_after_a_restart():
    """The disk fails while the purge runs: the failure is logged and counted, the
    generation stays pending (unreachable), and the next start completes it."""
    with Server(args=["--test-faults", "true"]) as s:
        s.t1 = create(s, "t1")
        old_data(s, T0)
        s.flush()
        devices_before = metric(s, "bucketdb_devices")
        r = s.request("POST", "/internal/fault", b"", tok(s.token))
        eq(r.status, 200, "POST /internal/fault (%r)" % r.body[:200])
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)  # the registry is not the engine's
        deadline = time.monotonic() + 30
        while metric(s, "bucketdb_tenant_purge_failures_total") == 0:
            check(time.monotonic() < deadline, "no purge failure counted in 30 s")
            time.sleep(0.1)
        eq(metric(s, "bucketdb_tenant_purges_pending"), 1, "the generation stays pending")
        eq(metric(s, "bucketdb_tenant_purges_total"), 0)
        check("purge of deleted tenant key t1: the drop failed" in s.log(), "the log line")
        sees_nothing_old(s, s.token, tenant="t1")
        s.kill()                        # the engine is read-only: only a restart heals it
        s.start()
        wait_purged(s, 1)
        eq(metric(s, "bucketdb_devices"), devices_before - 2, "devices after the purge")
        s.flush()
        eq(files_naming(s.data, [OLD, BOTH]), [], "files naming the old devices")


if __name__ == "__main__":
    suite.main()
