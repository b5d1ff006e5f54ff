#!/usr/bin/env python3
"""Crash test for deleting a tenant (issue 18): SIGKILL around a tenant deletion.

Run as   BUCKETDB_BIN=build/bucketdb python3 tests/crash/test_tenant_delete_kill9.py
Ends with the line "N passed, M failed"; loopback only; every wait is bounded.

One data directory for the whole run, with a short flush interval and small WAL
segments, so flushes, segment rolls and the maintenance /internal/flush runs race
the kills. Each round creates tenant t1 again (its name is deleted over and over, so
many generations of it pile up), writes to it from a thread (acknowledged samples
recorded) and writes a bystander tenant `keep` too; a DELETE of t1 is sent at a random
moment and the server gets SIGKILL at a random moment 0..250 ms after it was sent (half of them
in its first 4 ms)
(before, while or after the registry is rewritten, during a flush or a maintenance
pass). After the restart (WAL replay):
- the DELETE answered 204: t1 must be gone from the registry;
- t1 registered (the kill came first): every acknowledged sample of this round is
  there (deletion all or nothing); it is then deleted cleanly;
- once deleted, no sample of any round's t1 may be read, by the admin token or
  without a token, and the next round's t1 starts with no device;
- every acknowledged sample of `keep` is there.

At the end the purge of every deleted generation completes (its data removed): the
engine counts no device beyond those the live tenants list.

A second test kills the server while the purge of a deleted t1 runs, right after t1 was
created again and written: after the restart the purge completes, nothing of the old
generation is readable or counted, and every acknowledged sample of the new t1 is there.

Environment: BUCKETDB_BIN, CRASH_DELETE_ROUNDS (default 12), CRASH_DELETE_BUDGET_S
(default 90; the loop stops early past it), CRASH_PURGE_ROUNDS (default 8), CRASH_SEED.
"""

import json
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from bdbtest import Server, Suite, TestFailure, check, eq, http_request, path_with  # noqa: E402

suite = Suite("tenant_delete_kill9")
ROUNDS = int(os.environ.get("CRASH_DELETE_ROUNDS", "12"))
PURGE_ROUNDS = int(os.environ.get("CRASH_PURGE_ROUNDS", "8"))
BUDGET_S = float(os.environ.get("CRASH_DELETE_BUDGET_S", "90"))
SEED = int(os.environ.get("CRASH_SEED", str(int(time.time() * 1000) % 1000000007)))
T0 = 1705327200000
SPAN = {"from": T0 - 1, "to": T0 + 10 ** 9}


def tok(t):
    return {"Authorization": "Token " + t} if t else {}


def writer(port, token, params, dev, stop, acked, rnd):
    """Posts 20-line batches until stop; records the values of every 204."""
    i = 0
    deadline = time.monotonic() + 10
    while not stop.is_set() and time.monotonic() < deadline:
        vals = [rnd * 100000 + i + k for k in range(20)]
        body = "".join("m,device=%s v=%d %d\n" % (dev, v, T0 + v) for v in vals)
        try:
            r = http_request(port, "POST", path_with("/write", dict(params, precision="ms")),
                             body, tok(token), timeout=5)
        except OSError:
            return  # the server was killed
        if r.status == 204:
            acked.extend(vals)
        i += 20


def values(s, token, dev, **params):
    r = s.request("GET", path_with("/api/v1/query", dict(SPAN, device=dev, **params)), None,
                  tok(token))
    if r.status == 404:
        return set()
    eq(r.status, 200, "query %s %r (%r)" % (dev, params, r.body[:300]))
    return {int(v[2]) for v in r.json()["values"]}


def devices(s, token, **params):
    r = s.request("GET", path_with("/api/v1/devices", params), None, tok(token))
    eq(r.status, 200, "devices (%r)" % r.body[:300])
    return [d["device"] for d in r.json()["devices"]]


def admin(s, method, path, doc=None):
    body = json.dumps(doc) if doc is not None else None
    return s.request(method, "/api/v1/admin" + path, body,
                     dict(tok(s.token), **({"Content-Type": "application/json"} if body else {})))


def nothing_of_t1(s, why):
    for token in (None, s.token):
        eq(devices(s, token, tenant="t1"), [], "devices of the deleted t1 (%s)" % why)
        eq(values(s, token, "w", tenant="t1"), set(), "samples of the deleted t1 (%s)" % why)


def metric(s, name):
    r = s.request("GET", "/metrics", None, tok(s.token))
    eq(r.status, 200, "GET /metrics")
    m = re.search(r"^%s (\d+)$" % re.escape(name), r.text, re.M)
    check(m, "%s not in /metrics" % name)
    return int(m.group(1))


def wait_purged(s):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if metric(s, "bucketdb_tenant_purges_pending") == 0:
            return
        time.sleep(0.1)
    raise TestFailure("the purge of deleted tenants did not finish in 60 s")


def counted_devices_are_live(s, tenants, why):
    """The engine counts exactly the devices the live tenants list: nothing of a deleted
    generation is left in its catalog."""
    live = sum(len(devices(s, s.token, tenant=t)) for t in tenants)
    eq(metric(s, "bucketdb_devices"), live, "devices the engine counts (%s)" % why)


@suite.test
def kill9_around_tenant_deletion():
    rng = random.Random(SEED)
    print("  seed %d" % SEED, flush=True)
    t_end = time.monotonic() + BUDGET_S
    s = Server(args=["--flush-interval-ms", "150ms", "--wal-segment-bytes", "32KiB"]).start()
    keep_acked = []
    rounds = deleted_before_kill = survived = samples_checked = 0
    for rnd in range(1, ROUNDS + 1):
        if time.monotonic() > t_end:
            break
        rounds += 1
        r = admin(s, "POST", "/tenants", {"name": "t1"})
        eq(r.status, 201, "create t1 (%r)" % r.body[:300])
        t1 = r.json()["token"]
        eq(devices(s, t1), [], "a new t1 starts empty (round %d)" % rnd)
        stop = threading.Event()
        acked = []
        ths = [threading.Thread(target=writer, args=(s.port, t1, {}, "w", stop, acked, rnd)),
               threading.Thread(target=writer, args=(s.port, None, {"tenant": "keep"},
                                                     "k%d" % rnd, stop, keep_acked, rnd))]
        for th in ths:
            th.start()
        time.sleep(rng.uniform(0.05, 0.3))
        answer = []

        def delete():
            try:
                answer.append(admin(s, "DELETE", "/tenants/t1").status)
            except OSError:
                answer.append(None)
        dt = threading.Thread(target=delete)
        dt.start()
        # A deletion takes about a millisecond: half the kills aim at it.
        time.sleep(rng.uniform(0, 0.004) if rng.random() < 0.5 else rng.uniform(0, 0.25))
        if rng.random() < 0.3:
            s.post("/internal/flush", headers=tok(s.token))  # a maintenance pass in the race
        s.kill()
        stop.set()
        for th in ths + [dt]:
            th.join(15)
        s.start()
        state = admin(s, "GET", "/tenants/t1").status
        if answer and answer[0] == 204:
            deleted_before_kill += 1
            eq(state, 404, "t1 is registered after its DELETE answered 204 (round %d)" % rnd)
        if state == 200:
            survived += 1
            samples_checked += len(acked)
            got = values(s, s.token, "w", tenant="t1")
            check(set(acked) <= got, "round %d: t1 not deleted, but %d acknowledged samples "
                  "are missing" % (rnd, len(set(acked) - got)))
            eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        nothing_of_t1(s, "round %d, after the restart" % rnd)
        got = values(s, None, "k%d" % rnd, tenant="keep")
        mine = {v for v in keep_acked if v // 100000 == rnd}
        check(mine <= got, "round %d: %d acknowledged samples of the bystander missing"
              % (rnd, len(mine - got)))
    s.flush()
    nothing_of_t1(s, "at the end, after maintenance")
    wait_purged(s)
    # where auth is optional a deleted token is no token: t1's writer may have reached
    # the default tenant after the deletion
    counted_devices_are_live(s, ["keep", "default", "t1"], "at the end")
    s.stop()
    print("  %d rounds: DELETE answered 204 before the kill %d, t1 still registered after "
          "the restart %d (%d acknowledged samples all there), deleted without an answer %d"
          % (rounds, deleted_before_kill, survived, samples_checked,
             rounds - deleted_before_kill - survived))
    check(rounds >= 3, "too few rounds in the budget")


@suite.test
def kill9_during_the_purge():
    rng = random.Random(SEED + 1)
    s = Server(args=["--flush-interval-ms", "150ms", "--wal-segment-bytes", "32KiB"]).start()
    t_end = time.monotonic() + BUDGET_S
    rounds = interrupted = 0
    for rnd in range(1, PURGE_ROUNDS + 1):
        if time.monotonic() > t_end:
            break
        rounds += 1
        r = admin(s, "POST", "/tenants", {"name": "t1"})
        eq(r.status, 201, "create t1 (%r)" % r.body[:300])
        t1 = r.json()["token"]
        body = "".join("m,device=old%d,site=a v=%d %d\n" % (d, 1000 + i, T0 + i)
                       for d in range(20) for i in range(30))
        eq(s.request("POST", "/write?precision=ms", body, tok(t1)).status, 204, "old data")
        if rng.random() < 0.5:
            s.flush()  # the old data in files, not only in the WAL
        eq(admin(s, "DELETE", "/tenants/t1").status, 204, "delete (round %d)" % rnd)
        r = admin(s, "POST", "/tenants", {"name": "t1"})
        eq(r.status, 201, "create t1 again (%r)" % r.body[:300])
        t1 = r.json()["token"]
        new = "".join("m,device=new,site=b v=%d %d\n" % (i, T0 + i) for i in range(50))
        eq(s.request("POST", "/write?precision=ms", new, tok(t1)).status, 204, "new data")
        time.sleep(rng.uniform(0, 0.05))  # the purge starts at the deletion
        s.kill()
        with open(os.path.join(s.data, "tenants")) as f:
            m = re.search(r"^deleted t1 gen=(\d+) at=\d+(?: purged=(\d+))?$", f.read(), re.M)
        check(m, "the deleted line of t1")
        if int(m.group(2) or 0) < int(m.group(1)):
            interrupted += 1  # killed before the purge was recorded
        s.start()
        wait_purged(s)
        why = "round %d, after the restart" % rnd
        eq(devices(s, s.token, tenant="t1"), ["new"], "devices of the new t1 (%s)" % why)
        eq(values(s, s.token, "new", tenant="t1"), set(range(50)), "the new t1's samples")
        for d in range(20):
            eq(values(s, s.token, "old%d" % d, tenant="t1"), set(), "old samples (%s)" % why)
        counted_devices_are_live(s, ["t1"], why)
        eq(admin(s, "DELETE", "/tenants/t1").status, 204)
        wait_purged(s)
        counted_devices_are_live(s, ["t1"], "round %d, after the clean deletion" % rnd)
    s.stop()
    print("  %d rounds, %d killed before their purge was recorded" % (rounds, interrupted))
    check(rounds >= 3, "too few rounds in the budget")


if __name__ == "__main__":
    suite.main()
