#!/usr/bin/env python3
"""The tenant registry on Cassandra (issue 20 item 1; docs/CASSANDRA.md "The tenant
registry on Cassandra"), against one real Cassandra 2.1.0 node of the file's own
(cassnode.py), which one test stops and starts again.

- `registry_survives_node_and_disk`: server A (`--auth on`) creates three tenants with
  quotas, retention, a hot threshold, a tier retention and a device rule, rotates one
  token, deletes one tenant, and writes and flushes samples with a tenant token; A is
  killed -9 and its data directory removed; after the writer lease expires (32 s),
  server B on an EMPTY directory on the same keyspace accepts both live tokens (the
  rotated one's old token refused), refuses the deleted tenant's token, lists the
  tenants exactly as A did (GET /api/v1/admin/tenants whole, but the run-time usage
  and rejection counters), answers A's samples, and its file `tenants` holds the
  bytes of the document. Fails before this change: B starts with no tenant (401).
  B's storage-quota measure of the tenant equals A's (the keyspace's copy of
  `sink_usage`; before it, B counted from 0), and so does a device profile set on A
  (the document `profiles`; before it, B had none).
- `local_file_moves_up`: a keyspace without the document (as from an older bucketdb:
  its rows deleted) and a data directory with the file: the start stores the file as
  the document ("had none" in the log, one header row); a server on an empty
  directory then accepts the token.
- `change_while_node_stopped_fails`: with the node stopped, creating, updating,
  rotating and deleting tenants, and setting a device profile, answer 503 with
  Retry-After and change nothing (the listing and the file are the same bytes, the
  profile is not in force once the node is back); tenant writes keep working (the WAL);
  the server killed and restarted while the node is still down (`offline_start`)
  takes the registry from its file (a warning), accepts the token and refuses the
  changes the same way; with the node back the same update succeeds, and a server on
  an empty directory sees it.
- `admin_token_is_the_keyspaces`: the admin token's hash is the keyspace's document
  `admin`: a server on an empty directory takes the first server's token and prints
  none, a directory with another token file has that token refused (a warning), and a
  keyspace without the document takes the directory's token.

    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_tenants.py"""

import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import Server, Suite, TestFailure, check, contains, eq  # noqa: E402

suite = Suite("test_cassandra_tenants", embedded_only="starts its own Cassandra node")
MIN, HOUR, DAY = 60000, 3600000, 86400000
T0 = (int(time.time() * 1000) // DAY - 2) * DAY  # inside the default retention

NODE = cassnode.Node("bucketdb-tenants-", "bucketdb-tenants-it", cassnode.answers)


def node():
    return cassnode.running(NODE, TestFailure)


def cql_rows(stmt):
    return cassnode.cql_rows(NODE, stmt, TestFailure)


def server(ks, data=None, extra=""):
    # one retry, and a request timeout long enough for a node on a busy machine: a
    # stopped node refuses connections at once, so the outage answers still come fast
    uri = "cassandra://%s:%d/%s?consistency=ONE&timeout_ms=5000&retries=1%s" % (
        cassnode.ADDR, node().port, ks, extra)
    return Server(data=data, args=["--storage", uri, "--auth", "on",
                                   "--flush-interval-ms", "1h"])


def tok(t):
    return {"Authorization": "Token " + t, "Content-Type": "application/json"}


def admin(s, method, path, doc=None):
    body = None if doc is None else json.dumps(doc)
    return s.request(method, "/api/v1/admin" + path, body, tok(s.token))


def create(s, doc):
    r = admin(s, "POST", "/tenants", doc)
    eq(r.status, 201, r.text)
    return r.json()["token"]


def listing(s):
    """The tenants as the admin API lists them, without what a server counts at run
    time (usage measured locally, rejections since its start)."""
    r = admin(s, "GET", "/tenants")
    eq(r.status, 200, r.text)
    doc = r.json()
    for t in doc["tenants"]:
        t.pop("usage")
        t.pop("rejections")
    return doc


def write(s, token, lines, expect=204):
    r = s.request("POST", "/write?precision=ms", "\n".join(lines) + "\n", tok(token))
    eq(r.status, expect, "write: %r" % r.body[:300])
    return r


def samples(s, token, device):
    r = s.request("GET", "/api/v1/query?device=%s&from=%d&to=%d" % (device, T0 - DAY, T0 + DAY),
                  None, tok(token))
    eq(r.status, 200, r.text)
    return r.json()["values"]


def flush(s):
    r = s.request("POST", "/internal/flush", b"", tok(s.token))
    eq(r.status, 204, "POST /internal/flush (%r)" % r.body[:300])


def file_bytes(s):
    with open(os.path.join(s.data, "tenants"), "rb") as f:
        return f.read()


def profile(s, token, dev, expect=200, **params):
    """PUT /api/v1/devices/<dev>/profile: its JSON answer."""
    r = s.request("PUT", "/api/v1/devices/%s/profile" % dev, None, tok(token), params=params)
    eq(r.status, expect, "PUT profile of %s %r: %r" % (dev, params, r.body[:300]))
    return r.json()


def stored_bytes(s, tenant):
    """The tenant's flushed bytes as the storage quota measures them."""
    r = admin(s, "GET", "/tenants/" + tenant)
    eq(r.status, 200, r.text)
    return r.json()["usage"]["storage_cassandra_bytes"]


@suite.test
def registry_survives_node_and_disk():
    ks = "bdb_tenants_disk"
    a = server(ks).start()
    try:
        t_acme = create(a, {"name": "acme", "retention_ms": 20 * DAY,
                            "quotas": {"writes_per_second": 5000, "burst": 9000,
                                       "max_devices": 50, "storage_bytes": 10 ** 9},
                            "hot": {"threshold": 777, "subbuckets": 4},
                            "tier_retention": {"1h": "400d"}})
        t_old = create(a, {"name": "globex", "quotas": {"max_devices": 7}})
        t_gone = create(a, {"name": "gone"})
        r = admin(a, "PATCH", "/tenants/globex", {"retention_ms": 3 * DAY,
                                                  "device_rule": "device,host"})
        eq(r.status, 200, r.text)
        r = admin(a, "POST", "/tenants/globex/token")
        eq(r.status, 200, r.text)
        t_globex = r.json()["token"]
        eq(admin(a, "DELETE", "/tenants/gone").status, 204)
        lines = ["m,device=d%d v=%d %d" % (i % 3, i, T0 + i * MIN) for i in range(30)]
        write(a, t_acme, lines)
        write(a, t_globex, ["m,device=g1 v=1 %d" % T0])
        flush(a)
        want = listing(a)
        eq([t["name"] for t in want["tenants"]], ["acme", "globex"])
        data_a = {d: samples(a, t_acme, d) for d in ("d0", "d1", "d2")}
        eq(sum(len(v) for v in data_a.values()), 30)
        doc = file_bytes(a)
        # the storage quota's measure: 30 rows of tenant, device and metric names + 32
        used = stored_bytes(a, "acme")
        eq(used, 30 * (len("acme") + len("d0") + len("m.v") + 32), "acme's measure on A")
        eq(profile(a, t_acme, "d0", max_rps=3, expected_interval="10s")["max_rps"], 3)
    finally:
        a.kill()  # SIGKILL: the node and then its disk are lost
    shutil.rmtree(a.data)
    time.sleep(32)  # the killed server's writer lease expires
    b = server(ks).start()
    try:
        for d, v in data_a.items():
            eq(samples(b, t_acme, d), v, "A's samples of %s on B, with A's token" % d)
        eq(listing(b), want, "the tenants listed by B and by A")
        contains(b.log(), "tenant registry: 2 tenant(s) from")
        eq(file_bytes(b), doc, "the new directory's file: the document's bytes")
        # taken from the keyspace's copy, not restarted at 0 (formats/sink_usage.md)
        eq(stored_bytes(b, "acme"), used, "acme's storage measure on B")
        # the device profile came from the keyspace's document (a PUT that changes
        # only the interval answers the limit in force)
        eq(profile(b, t_acme, "d0", expected_interval="20s"),
           {"device": "d0", "max_rps": 3, "expected_interval_ms": 20000},
           "d0's profile on B")
        write(b, t_acme, ["m,device=d9 v=1 %d" % T0])
        write(b, t_globex, ["m,device=g2 v=1 %d" % T0])
        write(b, t_old, ["m,device=g3 v=1 %d" % T0], expect=401)
        write(b, t_gone, ["m,device=x v=1 %d" % T0], expect=401)
        eq(len(samples(b, t_acme, "d9")), 1)
    finally:
        b.stop()


@suite.test
def local_file_moves_up():
    ks = "bdb_tenants_move"
    s = server(ks).start()
    try:
        t = create(s, {"name": "m1", "quotas": {"max_devices": 3}})
    finally:
        s.stop()
    # the keyspace as an older bucketdb left it: no registry document
    cassnode.cql(NODE, "DELETE FROM %s.docs WHERE k = 'tenants'" % ks)
    eq(cql_rows("SELECT part FROM %s.docs WHERE k = 'tenants'" % ks), [])
    s.start()
    try:
        contains(s.log(), "had none; stored")
        eq(cql_rows("SELECT part FROM %s.docs WHERE k = 'tenants'" % ks), [["0"]])
        want = listing(s)
    finally:
        s.stop()
    shutil.rmtree(s.data)
    n = server(ks).start()
    try:
        eq(listing(n), want)
        write(n, t, ["m,device=a v=1 %d" % T0])
    finally:
        n.stop()


@suite.test
def admin_token_is_the_keyspaces():
    """The admin token's hash is the keyspace's document `admin`: a server on an EMPTY
    directory takes the token the first one made (and prints none), a directory whose
    file holds another token has that token refused, and a keyspace without the
    document (an older bucketdb's) gets the directory's."""
    ks = "bdb_tenants_admin"
    a = server(ks).start()
    try:
        ta = a.token
        eq(admin(a, "GET", "/tenants").status, 200)
    finally:
        a.stop()
    rows = cql_rows("SELECT part FROM %s.docs WHERE k = 'admin'" % ks)
    eq(rows, [["0"]], "the admin document")
    shutil.rmtree(a.data)
    b = server(ks).start()
    try:
        contains(b.ready_text, "token (not in this directory: the keyspace's admin token")
        check(not os.path.exists(os.path.join(b.data, "token")), "a token file was made")
        eq(b.token, ta, "the test helper's token: the keyspace's")
        eq(admin(b, "GET", "/tenants").status, 200, "A's admin token on B")
        r = b.request("GET", "/api/v1/admin/tenants", None, tok("f" * 48))
        check(r.status in (401, 403), "another token: %d" % r.status)
    finally:
        b.stop()
    # a directory of its own with another token file
    c = server(ks)
    os.makedirs(c.data, exist_ok=True)
    with open(os.path.join(c.data, "token"), "w") as f:
        f.write("0123456789abcdef0123456789abcdef0123456789abcdef\n")
    c.start()
    try:
        contains(c.log(), "holds another token than")
        r = c.request("GET", "/api/v1/admin/tenants", None,
                      tok("0123456789abcdef0123456789abcdef0123456789abcdef"))
        check(r.status in (401, 403), "the file's own token: %d" % r.status)
        r = c.request("GET", "/api/v1/admin/tenants", None, tok(ta))
        eq(r.status, 200, "the keyspace's token on C")
    finally:
        c.stop()
    # a keyspace without the document: the directory's token goes up
    cassnode.cql(NODE, "DELETE FROM %s.docs WHERE k = 'admin'" % ks)
    c.start()
    try:
        contains(c.log(), "admin token: its hash stored in")
        eq(c.token, "0123456789abcdef0123456789abcdef0123456789abcdef")
        eq(admin(c, "GET", "/tenants").status, 200)
    finally:
        c.stop()
    eq(cql_rows("SELECT part FROM %s.docs WHERE k = 'admin'" % ks), [["0"]])


@suite.test
def change_while_node_stopped_fails():
    ks = "bdb_tenants_outage"
    s = server(ks, extra="&offline_start=true")
    s.start()
    try:
        t1 = create(s, {"name": "t1", "quotas": {"max_devices": 5}})
        write(s, t1, ["m,device=a v=0 %d" % (T0 - 1)])
        flush(s)  # a catalog: the directory may start offline (it needs no rebuild)
        before, file_before = listing(s), file_bytes(s)
        NODE.kill(signal.SIGTERM)  # a clean stop
        try:
            refused_changes(s)
            # a device profile too: 503, and unchanged when the node is back (below)
            r = profile(s, t1, "a", expect=503, max_rps=50)
            contains(r["error"], "unchanged")
            eq(listing(s), before, "the tenants after the refused changes")
            eq(file_bytes(s), file_before, "the file after the refused changes")
            write(s, t1, ["m,device=a v=1 %d" % T0])  # writes go on (the WAL)
            # a restart while the node is down: the local file answers
            s.kill()
            s.start()
            contains(s.log(), "cannot be reached")
            contains(s.log(), "using %s" % os.path.join(s.data, "tenants"))
            eq(listing(s), before, "the tenants of an offline start")
            write(s, t1, ["m,device=a v=2 %d" % (T0 + 1)])
            refused_changes(s)
            eq(file_bytes(s), file_before, "the file after the refused changes")
        finally:
            check(NODE.start(same_ports=True), NODE.error or "node did not restart")
        deadline = time.monotonic() + 60
        while True:
            r = admin(s, "PATCH", "/tenants/t1", {"quotas": {"max_devices": 9}})
            if r.status != 503 or time.monotonic() > deadline:
                break
            time.sleep(1)  # the session reconnects
        eq(r.status, 200, r.text)
        eq(r.json()["quotas"]["max_devices"], 9)
        eq(profile(s, t1, "a", expected_interval="5s")["max_rps"], 0,
           "the profile refused during the outage is not in force")
    finally:
        s.stop()
    shutil.rmtree(s.data)
    n = server(ks).start()
    try:
        got = {t["name"]: t["quotas"]["max_devices"] for t in listing(n)["tenants"]}
        eq(got, {"t1": 9})
        write(n, t1, ["m,device=b v=1 %d" % T0])
    finally:
        n.stop()


def refused_changes(s):
    for method, path, doc in (("POST", "/tenants", {"name": "t2"}),
                              ("PATCH", "/tenants/t1", {"quotas": {"max_devices": 9}}),
                              ("POST", "/tenants/t1/token", None),
                              ("DELETE", "/tenants/t1", None)):
        r = admin(s, method, path, doc)
        eq(r.status, 503, "%s %s: %r" % (method, path, r.body[:300]))
        eq(r.headers.get("retry-after"), "1")
        contains(r.json()["error"], "nothing changed")


if __name__ == "__main__":
    cassnode.main(suite, NODE)
