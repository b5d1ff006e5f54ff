#!/usr/bin/env python3
"""Current state over HTTP and `bucketdb query`: /api/v1/state/latest, /devices and
/counts with out-of-order events (an older event never replaces a newer one), devices
moving between states (each in exactly one), paging with limit and cursor, errors,
tenant isolation with tokens, the CLI flags, a clean restart, and kill -9 while
writers run: after the restart the index holds every acknowledged event."""

import json
import os
import random
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import (Server, Suite, check, contains, eq, http_request, path_with,  # noqa: E402
                     run_bin)

suite = Suite("test_state")
T0 = 1705327200000  # 2024-01-15T14:00:00Z


def latest(s, dev, expect=200, headers=None, **params):
    r = s.request("GET", path_with("/api/v1/state/latest", dict(device=dev, **params)), None,
                  headers)
    eq(r.status, expect, "latest %s (%r)" % (dev, r.body[:300]))
    return r.json()


def in_state(s, state, headers=None, **params):
    """Every device of a state, following next_cursor (bounded)."""
    out = []
    cursor = None
    for _ in range(1000):
        p = dict(state=state, **params)
        if cursor is not None:
            p["cursor"] = cursor
        r = s.request("GET", path_with("/api/v1/state/devices", p), None, headers)
        eq(r.status, 200, "devices in %s (%r)" % (state, r.body[:300]))
        doc = r.json()
        eq(doc["count"], len(doc["devices"]))
        out += [(d["device"], d["state_time"]) for d in doc["devices"]]
        cursor = doc["next_cursor"]
        if cursor is None:
            eq(doc["total"], len(out), "total of %s" % state)
            return out
    raise AssertionError("paging did not end")


def counts(s, headers=None, **params):
    r = s.request("GET", path_with("/api/v1/state/counts", params), None, headers)
    eq(r.status, 200, "counts (%r)" % r.body[:300])
    return r.json()


class Model:
    """The rules: newest event time; per metric the newest report carrying it; the state
    of the newest report carrying one; at equal times the later write wins."""

    def __init__(self):
        self.dev = {}

    def apply(self, dev, ts, state, metrics):
        d = self.dev.setdefault(dev, {"time": None, "state": None, "state_time": None,
                                      "metrics": {}})
        if d["time"] is None or ts > d["time"]:
            d["time"] = ts
        for k, v in metrics.items():
            old = d["metrics"].get(k)
            if old is None or ts >= old[0]:
                d["metrics"][k] = (ts, v)
        if state is not None and (d["state_time"] is None or ts >= d["state_time"]):
            d["state"], d["state_time"] = state, ts

    def check_device(self, s, dev):
        d = self.dev[dev]
        got = latest(s, dev)
        eq(got["time"], d["time"], "time of %s" % dev)
        eq(got["state"], d["state"], "state of %s" % dev)
        eq(got["state_time"], d["state_time"], "state_time of %s" % dev)
        want = {k: {"time": t, "value": v} for k, (t, v) in d["metrics"].items()}
        eq(got["metrics"], want, "metrics of %s" % dev)
        eq(got["values"], {k: v for k, (t, v) in d["metrics"].items() if t == d["time"]},
           "values of %s" % dev)

    def check_all(self, s):
        for dev in self.dev:
            self.check_device(s, dev)
        by_state = {}
        for dev, d in self.dev.items():
            if d["state"] is not None:
                by_state.setdefault(d["state"], []).append((dev, d["state_time"]))
        c = counts(s)
        eq(c["states"], {k: len(v) for k, v in by_state.items()}, "counts")
        eq(c["no_state"], sum(1 for d in self.dev.values() if d["state"] is None), "no_state")
        eq(c["devices"], len(self.dev))
        for st, devs in by_state.items():
            eq(in_state(s, st, limit=3), sorted(devs), "devices in %s" % st)


def line(dev, ts, state, metrics):
    fields = ["%s=%r" % (k.split(".", 1)[1], v) for k, v in sorted(metrics.items())]
    if state is not None:
        fields.append('state="%s"' % state)
    return "env,device=%s %s %d" % (dev, ",".join(fields), ts)


@suite.test
def out_of_order_events_and_endpoints():
    m = Model()
    with Server() as s:
        events = [
            ("pump-1", T0 + 60000, "running", {"env.temp": 21.5}),
            ("pump-1", T0, "stopped", {"env.temp": 19.0, "env.hum": 40.0}),  # older
            ("pump-2", T0 + 1000, "stopped", {"env.temp": 18.0}),
            ("pump-3", T0 + 5000, None, {"env.temp": 17.0}),
            ("pump-1", T0 + 120000, None, {"env.temp": 22.0}),  # newer, no state
        ]
        for dev, ts, st, met in events:
            s.write(line(dev, ts, st, met), precision="ms")
            m.apply(dev, ts, st, met)
        got = latest(s, "pump-1")
        eq(got["state"], "running", "the older 'stopped' must not replace 'running'")
        eq(got["time"], T0 + 120000)
        eq(got["values"], {"env.temp": 22.0})
        eq(got["metrics"]["env.hum"], {"time": T0, "value": 40.0})
        m.check_all(s)
        # pump-1 moves to stopped (newer): it leaves running, counts follow
        s.write_json({"reports": [{"device": "pump-1", "time": T0 + 180000,
                                   "metrics": {"env.temp": 23.0}, "state": "stopped"}]})
        m.apply("pump-1", T0 + 180000, "stopped", {"env.temp": 23.0})
        m.check_all(s)
        eq(counts(s)["states"], {"stopped": 2})
        eq(in_state(s, "running"), [])
        # paging: limit 1 walks the devices one by one in name order
        r = s.get("/api/v1/state/devices", state="stopped", limit=1).json()
        eq([d["device"] for d in r["devices"]], ["pump-1"])
        eq(r["next_cursor"], "pump-1")
        eq(r["total"], 2)
        r = s.get("/api/v1/state/devices", state="stopped", limit=1, cursor="pump-1").json()
        eq([d["device"] for d in r["devices"]], ["pump-2"])
        eq(r["next_cursor"], None)
        # errors name what is wrong
        r = s.get("/api/v1/state/latest")
        eq(r.status, 400)
        contains(r.json()["error"], "device")
        r = s.get("/api/v1/state/latest", device="nope")
        eq(r.status, 404)
        contains(r.json()["error"], "nope")
        r = s.get("/api/v1/state/devices")
        eq(r.status, 400)
        contains(r.json()["error"], "state")
        for bad in ("0", "10001", "-1", "x"):
            r = s.get("/api/v1/state/devices", state="on", limit=bad)
            eq(r.status, 400, "limit %s" % bad)
            contains(r.json()["error"], "1..10000")
        eq(s.get("/api/v1/state/whatever").status, 404)
        eq(s.post("/api/v1/state/counts").status, 405)
        # a clean restart answers the same
        s.stop()
        s.start()
        m.check_all(s)


@suite.test
def random_reports_then_flush_and_restart():
    rnd = random.Random(7)
    m = Model()
    states = ["on", "off", "fault"]
    with Server(args=["--flush-interval-ms", "300ms"]) as s:
        for batch in range(30):
            lines = []
            for _ in range(20):
                dev = "d%02d" % rnd.randrange(25)
                ts = T0 + rnd.randrange(500) * 1000
                st = rnd.choice(states + [None])
                met = {"env.a": float(rnd.randrange(1000))} if rnd.random() < 0.8 else {}
                if rnd.random() < 0.5:
                    met["env.b"] = rnd.randrange(1000) / 4.0
                if not met and st is None:
                    met = {"env.a": 1.0}
                lines.append(line(dev, ts, st, met))
                m.apply(dev, ts, st, met)
            s.write(lines, precision="ms")
            if batch == 10:
                s.flush()
        m.check_all(s)
        s.stop()
        s.start()
        m.check_all(s)


@suite.test
def tenant_isolation_with_tokens():
    with Server(args=["--auth", "on"]) as s:
        adm = {"Authorization": "Token " + s.token}
        toks = {}
        for name in ("acme", "globex"):
            r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name}),
                          dict(adm, **{"Content-Type": "application/json"}))
            eq(r.status, 201, "create tenant %s (%r)" % (name, r.body[:200]))
            toks[name] = {"Authorization": "Token " + r.json()["token"]}
        r = s.request("POST", "/write?precision=ms",
                      line("valve", T0, "open", {"env.p": 1.0}).encode(), toks["acme"])
        eq(r.status, 204)
        eq(latest(s, "valve", headers=toks["acme"])["state"], "open")
        latest(s, "valve", expect=404, headers=toks["globex"])
        eq(counts(s, headers=toks["globex"])["states"], {})
        eq(counts(s, headers=toks["acme"])["states"], {"open": 1})
        # a tenant token naming another tenant is refused, no token is 401
        r = s.request("GET", "/api/v1/state/counts?tenant=acme", None, toks["globex"])
        eq(r.status, 403)
        eq(s.get("/api/v1/state/counts").status, 401)
        # the admin token may name the tenant
        eq(counts(s, headers=adm, tenant="acme")["states"], {"open": 1})


@suite.test
def cli_query_flags():
    with Server() as s:
        s.write([line("fan-1", T0, "on", {"env.rpm": 900.0}),
                 line("fan-2", T0, "on", {"env.rpm": 950.0}),
                 line("fan-3", T0, "off", {"env.rpm": 0.0})], precision="ms")
        srv = "http://127.0.0.1:%d" % s.port
        rc, out, err = run_bin(["query", "--server", srv, "--latest", "--device", "fan-1"])
        eq(rc, 0, err)
        doc = json.loads(out)
        eq((doc["device"], doc["state"], doc["values"]), ("fan-1", "on", {"env.rpm": 900.0}))
        rc, out, err = run_bin(["query", "--server", srv, "--state", "on", "--limit", "1"])
        eq(rc, 0, err)
        doc = json.loads(out)
        eq(([d["device"] for d in doc["devices"]], doc["next_cursor"]), (["fan-1"], "fan-1"))
        rc, out, err = run_bin(["query", "--server", srv, "--state", "on", "--cursor", "fan-1"])
        eq(rc, 0, err)
        eq([d["device"] for d in json.loads(out)["devices"]], ["fan-2"])
        rc, out, err = run_bin(["query", "--server", srv, "--state-counts"])
        eq(rc, 0, err)
        eq(json.loads(out)["states"], {"off": 1, "on": 2})
        rc, out, err = run_bin(["query", "--server", srv, "--latest"])
        eq(rc, 2, "--latest without --device is a usage error")
        contains(err, "--device")
        rc, out, err = run_bin(["query", "--server", srv, "--latest", "--device", "zzz"])
        eq(rc, 1)
        contains(err, "zzz")


@suite.test
def kill9_keeps_every_acknowledged_event():
    """Writers post out-of-order events over HTTP while flushes run; SIGKILL at a random
    moment; after the restart every device's answer must reflect every acknowledged
    event (requests in flight at the kill may count or not, each as a whole)."""
    rnd = random.Random(int(os.environ.get("STATE_SEED", "11")))
    states = ["ok", "warn", "fail"]
    all_acked, all_maybe = [], []  # across cycles: devices carry over
    with Server(args=["--flush-interval-ms", "200ms", "--wal-segment-bytes", "128KiB"]) as s:
        for cycle in range(3):
            acked, inflight = [], []
            lock = threading.Lock()
            stop = threading.Event()

            def writer(seed, port=s.port):
                r = random.Random(seed)
                for _ in range(10000):
                    if stop.is_set():
                        return
                    evs = []
                    for _ in range(r.randrange(1, 30)):
                        dev = "k%02d" % r.randrange(40)
                        ts = T0 + r.randrange(100000) * 1000
                        met = {"env.v": float(r.randrange(10 ** 6))}
                        evs.append((dev, ts, r.choice(states), met))
                    body = "\n".join(line(*e) for e in evs).encode()
                    with lock:
                        inflight.append(evs)
                    try:
                        resp = http_request(port, "POST", "/write?precision=ms", body)
                        ok = resp.status == 204
                    except OSError:
                        ok = False
                    with lock:
                        if ok:  # a request that failed (the kill) may still be stored:
                            inflight.remove(evs)  # it stays a "maybe"
                            acked.append(evs)
                    if not ok:
                        return

            ts_ = [threading.Thread(target=writer, args=(cycle * 10 + i,)) for i in range(3)]
            for t in ts_:
                t.start()
            time.sleep(rnd.uniform(0.3, 1.5))
            s.kill()  # SIGKILL
            stop.set()
            for t in ts_:
                t.join(timeout=30)
            with lock:
                acked_now = list(acked)
                maybe = list(inflight)
            check(acked_now, "no request acknowledged before the kill")
            all_acked += acked_now
            all_maybe += maybe
            s.start()
            # lower bound: every acked event is reflected (an in-flight one may be newer)
            want = {}
            for evs in all_acked:
                for dev, ts, st, met in evs:
                    w = want.setdefault(dev, [None, None])
                    w[0] = ts if w[0] is None else max(w[0], ts)
                    w[1] = ts if w[1] is None else max(w[1], ts)
            possible = {}
            for evs in all_acked + all_maybe:
                for dev, ts, st, met in evs:
                    possible.setdefault(dev, set()).add(ts)
            for dev, (t_event, t_state) in want.items():
                got = latest(s, dev)
                check(got["time"] >= t_event, "%s: time %d < acked %d after kill -9"
                      % (dev, got["time"], t_event))
                check(got["time"] in possible[dev], "%s: time %d never sent"
                      % (dev, got["time"]))
                check(got["state_time"] >= t_state, "%s: state_time %d < acked %d"
                      % (dev, got["state_time"], t_state))
                check(got["metrics"]["env.v"]["time"] >= t_event, "%s: env.v too old" % dev)
            # counts agree with the per-device answers
            c = counts(s)
            per = {}
            for dev in want:
                st = latest(s, dev)["state"]
                per[st] = per.get(st, 0) + 1
            eq(sum(c["states"].values()), len(want), "devices in a state")
            for st, n in per.items():
                eq(c["states"].get(st), n, "count of %s" % st)


if __name__ == "__main__":
    suite.main()
