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

Environment: BUCKETDB_BIN, CRASH_DELETE_ROUNDS (default 12), CRASH_DELETE_BUDGET_S
(default 90; the loop stops early past it), CRASH_SEED.
"""

import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from bdbtest import Server, Suite, check, eq, http_request, path_with  # noqa: E402

suite = Suite("tenant_delete_kill9")
ROUNDS = int(os.environ.get("CRASH_DELETE_ROUNDS", "12"))
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
    s.stop()
    print("  %d rounds: DELETE answered 204 before the kill %d, t1 still registered after "
          "the restart %d (%d acknowledged samples all there), deleted without an answer %d"
          % (rounds, deleted_before_kill, survived, samples_checked,
             rounds - deleted_before_kill - survived))
    check(rounds >= 3, "too few rounds in the budget")


if __name__ == "__main__":
    suite.main()
