#!/usr/bin/env python3
"""Randomized model test: random writes (line protocol in every precision and JSON;
several tenants, devices and metrics; out-of-order times, duplicates, states) over
three days of event time, with flushes, bucket-size changes, a clean restart and a
kill -9 in between, checked by a few hundred random range queries against an
in-memory reference model, compared exactly; then the device registry and the
export are compared too.

Each run prints its seed and how to reproduce it (BDB_SEED sets the base seed,
BDB_ONLY picks one test)."""

import datetime
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import DAY, HOUR, MIN, Server, Suite, TestFailure, eq  # noqa: E402

suite = Suite("test_random_model")
# Base seed; the three runs use SEED, SEED+1 and SEED+2 (each prints its own).
SEED = int(os.environ.get("BDB_SEED", "20240917"))
T0 = 1718409600000  # 2024-06-15T00:00:00Z
SPAN = 3 * DAY
TENANTS = ["default", "acme", "globex"]
DEVICES = ["dev-%d" % i for i in range(6)]
LP_METRICS = ["s.a", "s.b", "t.c", "power.kw", "power.kvar"]
JSON_METRICS = LP_METRICS + ["u", "v.w"]
STATES = ["on", "off", "fault", "idle"]
BUCKETS = ["10m", "15m", "1h", "6h", "1d", "auto"]


def rfc3339(ms):
    dt = datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % (ms % 1000)


class Model:
    def __init__(self):
        self.data = {}  # (tenant, device) -> {(metric, ts): value}
        self.known = set()  # (tenant, device) known to the server, even without samples
        self.state = {}  # (tenant, device) -> (ts, state)
        self.times = {}  # (tenant, device) -> [first, last] over every report

    def report(self, tenant, dev, ts, metrics, state=None):
        key = (tenant, dev)
        self.known.add(key)
        d = self.data.setdefault(key, {})
        for m, v in metrics.items():
            d[(m, ts)] = v
        if state is not None:
            old = self.state.get(key)
            if old is None or ts >= old[0]:
                self.state[key] = (ts, state)
        t = self.times.setdefault(key, [ts, ts])
        t[0] = min(t[0], ts)
        t[1] = max(t[1], ts)

    def rows(self, tenant, dev, lo, hi, metrics, limit, desc):
        d = self.data.get((tenant, dev), {})
        out = [(ts, m, v) for (m, ts), v in d.items()
               if lo <= ts < hi and (metrics is None or m in metrics)]
        # Ascending: time, then metric name. Descending: time from newest, and rows
        # with equal times still in metric name order (what the server documents).
        if desc:
            out.sort(key=lambda r: (-r[0], r[1]))
        else:
            out.sort(key=lambda r: (r[0], r[1]))
        return out[:limit] if limit else out


def random_value(rng):
    k = rng.random()
    if k < 0.4:
        return rng.uniform(-1e6, 1e6)
    if k < 0.6:
        return float(rng.randint(-1000, 1000))
    if k < 0.7:
        return rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300)
    if k < 0.8:
        return rng.choice([0.0, 1.0, 0.1, 1e-9, 123456789.125, 2 ** 53 + 0.0])
    return round(rng.uniform(0, 100), 2)


def lp_escape_tag(s):
    return s.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=").replace(" ", "\\ ")


class Writer:
    """Generates random batches and applies them to the server and the model."""

    def __init__(self, rng, server, model):
        self.rng = rng
        self.s = server
        self.m = model
        self.cursor = {}  # (tenant, device) -> advancing event time
        self.written_keys = []  # (tenant, dev, metric, ts) for duplicates
        self.tags = {}

    def pick_time(self, key):
        rng = self.rng
        cur = self.cursor.get(key, T0 + rng.randint(0, 6 * HOUR))
        k = rng.random()
        if k < 0.65:
            ts = cur + rng.randint(1, 3 * MIN)  # in order
            self.cursor[key] = min(ts, T0 + SPAN - 1)
        elif k < 0.9:
            ts = cur - rng.randint(0, 12 * HOUR)  # out of order
        else:
            ts = T0 + rng.randint(0, SPAN - 1)  # anywhere
        return max(T0, min(ts, T0 + SPAN - 1))

    def batch(self):
        rng = self.rng
        tenant = rng.choice(TENANTS)
        use_json = rng.random() < 0.3
        prec = rng.choice(["ns", "u", "ms", "s"])
        npoints = rng.randint(20, 250)
        reports = []
        for _ in range(npoints):
            dev = rng.choice(DEVICES)
            key = (tenant, dev)
            if self.written_keys and rng.random() < 0.1:
                # Duplicate of an earlier sample of this tenant: new value, later wins.
                cands = [k for k in self.written_keys[-500:] if k[0] == tenant]
                if cands:
                    _, dev, metric, ts = rng.choice(cands)
                    if use_json or "." in metric:
                        if prec == "s" and not use_json and ts % 1000:
                            continue
                        reports.append((dev, ts, {metric: random_value(rng)}, None))
                        continue
            ts = self.pick_time(key)
            if prec == "s" and not use_json:
                ts -= ts % 1000
            pool = JSON_METRICS if use_json else LP_METRICS
            metrics = {m: random_value(rng) for m in rng.sample(pool, rng.randint(1, 3))}
            state = rng.choice(STATES) if rng.random() < 0.1 else None
            reports.append((dev, ts, metrics, state))
        if use_json:
            self.send_json(tenant, reports)
        else:
            self.send_lp(tenant, reports, prec)
        for dev, ts, metrics, state in reports:
            self.m.report(tenant, dev, ts, metrics, state)
            for metric in metrics:
                self.written_keys.append((tenant, dev, metric, ts))

    def send_lp(self, tenant, reports, prec):
        rng = self.rng
        lines = []
        for dev, ts, metrics, state in reports:
            if prec == "ns":
                t = ts * 1000000 + rng.randint(0, 999999)
            elif prec == "u":
                t = ts * 1000 + rng.randint(0, 999)
            elif prec == "ms":
                t = ts
            else:
                t = ts // 1000
            by_meas = {}
            for m, v in metrics.items():
                meas, field = m.split(".", 1)
                by_meas.setdefault(meas, []).append("%s=%r" % (field, v))
            for i, (meas, fields) in enumerate(sorted(by_meas.items())):
                if state is not None and i == 0:
                    fields = fields + ['state="%s"' % state]
                lines.append("%s,device=%s %s %d" % (meas, lp_escape_tag(dev), ",".join(fields),
                                                    t))
        params = {"precision": prec}
        if tenant != "default":
            params[rng.choice(["tenant", "db"])] = tenant
        self.s.write(lines, gz=rng.random() < 0.3, **params)

    def send_json(self, tenant, reports):
        rng = self.rng
        out = []
        for dev, ts, metrics, state in reports:
            r = {"device": dev, "time": ts if rng.random() < 0.7 else rfc3339(ts),
                 "metrics": metrics}
            if state is not None:
                r["state"] = state
            out.append(r)
        params = {"tenant": tenant} if tenant != "default" else {}
        self.s.write_json({"reports": out}, **params)


def random_query(rng, model):
    tenant = rng.choice(TENANTS)
    dev = rng.choice(DEVICES + ["ghost"])
    k = rng.random()
    if k < 0.15:
        lo, hi = T0 - DAY, T0 + SPAN + DAY
    elif k < 0.6:
        lo = T0 + rng.randint(-HOUR, SPAN)
        hi = lo + rng.choice([1, 1000, MIN, 10 * MIN, HOUR, 7 * HOUR, DAY, 2 * DAY])
    elif k < 0.9:
        lo = T0 + rng.randint(0, SPAN // MIN) * MIN  # on minute boundaries
        hi = lo + rng.randint(1, 48) * 15 * MIN
    else:
        lo = T0 + SPAN + rng.randint(1, DAY)  # after everything
        hi = lo + DAY
    metrics = None
    if rng.random() < 0.5:
        metrics = rng.sample(JSON_METRICS + ["nope"], rng.randint(1, 3))
    limit = rng.choice([None, None, None, 1, 2, 7, 50, 500])
    desc = rng.random() < 0.4
    params = {"device": dev, "from": lo, "to": hi}
    if rng.random() < 0.2:
        params["from"], params["to"] = rfc3339(lo), rfc3339(hi)
    if metrics:
        params["metric"] = ",".join(metrics)
    if limit:
        params["limit"] = limit
    if desc or rng.random() < 0.3:
        params["order"] = "desc" if desc else "asc"
    if tenant != "default":
        params["tenant"] = tenant
    return tenant, dev, lo, hi, (set(metrics) if metrics else None), limit, desc, params


def run_queries(rng, s, model, n, label, stats):
    for i in range(n):
        tenant, dev, lo, hi, metrics, limit, desc, params = random_query(rng, model)
        if (tenant, dev) not in model.known:
            r = s.get("/api/v1/query", **params)
            eq(r.status, 404, "%s: query %r of an unknown device" % (label, params))
            stats["q404"] += 1
            continue
        want = model.rows(tenant, dev, lo, hi, metrics, limit, desc)
        got = s.values(**params)
        stats["queries"] += 1
        stats["rows"] += len(want)
        if got != want:
            sg, sw = set(got), set(want)
            raise TestFailure(
                "%s: query %d %r differs: got %d rows, want %d\n  missing %r\n  extra %r\n"
                "  first difference at %r" % (
                    label, i, params, len(got), len(want), sorted(sw - sg)[:5],
                    sorted(sg - sw)[:5],
                    next(((j, got[j] if j < len(got) else None, want[j] if j < len(want)
                           else None) for j in range(max(len(got), len(want)))
                          if j >= len(got) or j >= len(want) or got[j] != want[j]), None)))


def check_registry(s, model, label):
    for tenant in TENANTS:
        params = {"tenant": tenant} if tenant != "default" else {}
        doc = s.devices(**params)
        byname = {d["device"]: d for d in doc["devices"]}
        want = sorted(dev for (t, dev) in model.known if t == tenant)
        eq(sorted(byname), want, "%s: devices of %s" % (label, tenant))
        for dev in want:
            d = byname[dev]
            key = (tenant, dev)
            mets = sorted(set(m for (m, _) in model.data.get(key, {})))
            eq(d["metrics"], mets, "%s: metrics of %s/%s" % (label, tenant, dev))
            if key in model.times:
                eq((d["first_time"], d["last_time"]), tuple(model.times[key]),
                   "%s: first/last of %s/%s" % (label, tenant, dev))
            st = model.state.get(key)
            eq((d["state_time"], d["state"]) if d["state"] is not None else None, st,
               "%s: state of %s/%s" % (label, tenant, dev))


def parse_export(text):
    """Line protocol from /api/v1/export -> {(device, metric, ts_ms): value}."""
    out = {}
    for line in text.splitlines():
        if not line:
            continue
        head, fields, ts = line.rsplit(" ", 2)
        meas, tags = head.split(",", 1)
        dev = None
        for kv in tags.split(","):
            k, v = kv.split("=", 1)
            if k == "device":
                dev = v
        key, val = fields.split("=", 1)
        eq(int(ts) % 1000000, 0, "export timestamps are whole ms in ns")
        out[(dev, meas + "." + key if key != "value" else meas, int(ts) // 1000000)] = float(val)
    return out


def server_flushes(s):
    for ln in s.metrics_text().splitlines():
        if ln.startswith("bucketdb_flushes_total "):
            return int(ln.split()[1])
    raise TestFailure("no bucketdb_flushes_total in /metrics")


def run_model(name, offset, args):
    seed = SEED + offset
    print("  seed %d (reproduce: BDB_SEED=%d BDB_ONLY=%s)" % (seed, SEED, name), flush=True)
    rng = random.Random(seed)
    model = Model()
    stats = {"queries": 0, "rows": 0, "q404": 0, "batches": 0, "flushes": 0, "profiles": 0,
             "server_flushes": 0}
    rounds = 48
    with Server(args=args) as s:
        w = Writer(rng, s, model)
        for rnd in range(rounds):
            w.batch()
            stats["batches"] += 1
            k = rng.random()
            if k < 0.15:
                s.flush()
                stats["flushes"] += 1
            elif k < 0.35:
                tenant = rng.choice(TENANTS)
                dev = rng.choice(DEVICES)
                params = {"tenant": tenant} if tenant != "default" else {}
                s.set_bucket(dev, rng.choice(BUCKETS), **params)
                model.known.add((tenant, dev))
                stats["profiles"] += 1
            if rnd == 12:
                run_queries(rng, s, model, 40, "round 12", stats)
            if rnd == rounds // 2:
                run_queries(rng, s, model, 40, "before restart", stats)
                stats["server_flushes"] += server_flushes(s)
                s.restart()
                run_queries(rng, s, model, 40, "after restart", stats)
                check_registry(s, model, "after restart")
            if rnd == 3 * rounds // 4:
                run_queries(rng, s, model, 30, "before kill -9", stats)
                stats["server_flushes"] += server_flushes(s)
                s.kill()
                s.start()
                run_queries(rng, s, model, 40, "after kill -9", stats)
        run_queries(rng, s, model, 40, "end", stats)
        check_registry(s, model, "end")
        s.flush()
        run_queries(rng, s, model, 40, "end, flushed", stats)
        stats["server_flushes"] += server_flushes(s)
        s.restart()
        run_queries(rng, s, model, 40, "end, restarted", stats)
        check_registry(s, model, "end, restarted")
        # The export of each tenant is exactly the model.
        for tenant in TENANTS:
            params = {"tenant": tenant} if tenant != "default" else {}
            r = s.get("/api/v1/export", **params)
            eq(r.status, 200)
            got = parse_export(r.text)
            want = {(dev, m, ts): v for (t, dev), d in model.data.items() if t == tenant
                    for (m, ts), v in d.items()}
            if got != want:
                raise TestFailure("export of %s: %d samples, want %d; missing %r extra %r" % (
                    tenant, len(got), len(want), sorted(set(want) - set(got))[:5],
                    sorted(set(got) - set(want))[:5]))
    samples = sum(len(d) for d in model.data.values())
    print("  %d batches, %d distinct samples, %d explicit flushes (%d by the servers in "
          "all), %d profile changes; %d queries compared (%d rows), %d unknown-device 404s" % (
              stats["batches"], samples, stats["flushes"], stats["server_flushes"],
              stats["profiles"], stats["queries"], stats["rows"], stats["q404"]), flush=True)


@suite.test
def model_small_blocks_small_head():
    # Small block windows and a small head: many blocks, and the background flusher
    # runs on its own (head over its limit) while writes and queries go on.
    run_model("model_small_blocks_small_head", 0, ["--block-window-ms", "1h", "--head-max-bytes",
                                                   os.environ.get("BDB_HEAD_MAX", "65536")])


@suite.test
def model_default_engine_settings():
    run_model("model_default_engine_settings", 1, [])


@suite.test
def model_periodic_sync_one_worker_daily_blocks():
    run_model("model_periodic_sync_one_worker_daily_blocks", 2,
              ["--sync", "periodic", "--sync-interval-ms", "20", "--query-workers", "1",
               "--block-window-ms", "1d"])


suite.main()
