#!/usr/bin/env python3
"""Operator tools against real servers: `bucketdb plan` (the seeds' figures through the
binary, --measure on a loaded server), `bucketdb load` (the server stores exactly what
the summary says, per tenant with registered tokens; the same seed stores the same
samples whatever the connection count), and `bucketdb export` / `import` (line
protocol and CSV round trips into a second server answer identical queries)."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, eq, contains, now_ms, run_bin, tmpdir, MIN  # noqa: E402

suite = Suite("ops")


def load(srv, *args):
    rc, out, err = run_bin(["load", "--server", "127.0.0.1:%d" % srv.port, "--json"] +
                           list(args), timeout=120)
    eq(rc, 0, "load exit status (stderr %r, stdout %r)" % (err, out))
    return json.loads(out)


def stored(srv, tenant=None):
    """(devices, samples) the server holds for a tenant, from /api/v1/devices."""
    params = {"tenant": tenant} if tenant else {}
    r = srv.request("GET", "/api/v1/devices", params=params,
                    headers={"Authorization": "Token " + srv.token})
    eq(r.status, 200, r.text)
    d = r.json()
    return d["count"], sum(x["samples"] for x in d["devices"])


def export(srv, *args):
    rc, out, err = run_bin(["export", "--server", "127.0.0.1:%d" % srv.port,
                            "--token", srv.token] + list(args), timeout=120)
    eq(rc, 0, "export exit status: " + err)
    return out


@suite.test
def plan_reproduces_the_seed():
    rc, out, err = run_bin(["plan", "--json"])
    eq(rc, 0, err)
    p = json.loads(out)
    eq(p["writes"]["reports_per_s"], 100000)
    eq(p["writes"]["samples_per_s"], 1000000)
    s = p["storage"]
    eq(s["device_day_bytes"], 8640000)
    eq(round(s["fleet_day_bytes"] / 1e12, 2), 8.64)
    eq(round(s["retention_raw_bytes"] / 1e12), 259)
    eq(round(s["total_bytes"] / 1e12), 285)
    eq(round(s["replicated_bytes"] / 1e12), 855)
    eq(p["recommended_bucket"], "1d")
    eq([b["verdict"] for b in p["buckets"]],
       ["too small", "too small", "too small", "ok", "ok"])
    rc, out, err = run_bin(["plan"])
    eq(rc, 0, err)
    for figure in ("8.64 MB", "8.64 TB", "259 TB", "285 TB", "855 TB", "<- recommended"):
        contains(out, figure)
    # the seeds' mistakes become warnings; bad input names the flag
    rc, out, err = run_bin(["plan", "--json", "--gc-grace", "1h", "--repair-interval", "7d",
                            "--query-range", "unbounded", "--interval", "1ms"])
    eq(rc, 0, err)
    w = " ".join(json.loads(out)["warnings"])
    for text in ("gc_grace_seconds", "unbounded query range", "bucket too large"):
        contains(w, text)
    rc, out, err = run_bin(["plan", "--interval", "soon"])
    eq(rc, 2)
    contains(err, "--interval 'soon'")


@suite.test
def load_stores_what_the_summary_says():
    with Server() as srv:
        s = load(srv, "--admin-token", srv.token, "--tenants", "3", "--devices", "20",
                 "--hot", "2", "--hot-factor", "5", "--metrics", "3", "--interval", "5s",
                 "--duration", "20m", "--late", "0.1", "--out-of-order", "0.1",
                 "--connections", "3", "--batch", "300", "--seed", "7")
        eq(s["errors"], 0)
        eq(s["lines_rejected"], 0)
        # 18 devices x 240 reports + 2 hot x 1200, per tenant, 3 metrics each
        eq(s["reports"], 3 * (18 * 240 + 2 * 1200))
        eq(s["samples"], s["reports"] * 3)
        total = 0
        for t in s["per_tenant"]:
            devices, samples = stored(srv, t["tenant"])
            eq((devices, samples), (t["devices"], t["samples"]), "tenant %s" % t["tenant"])
            total += samples
        eq(total, s["samples"])
        # registered tenants: a write without a token is refused
        r = srv.request("POST", "/write", body=b"sim,device=x v=1", params={"db": "load-1"})
        eq(r.status, 401)
        # device states were sent: the state index knows every device of a tenant
        r = srv.request("GET", "/api/v1/state/counts", params={"tenant": "load-2"},
                        headers={"Authorization": "Token " + srv.token})
        eq(r.status, 200, r.text)
        eq(r.json()["devices"], 20)
        eq(r.json()["no_state"], 0)


@suite.test
def load_is_deterministic_and_bounded():
    end = str(now_ms() - MIN)
    common = ["--devices", "15", "--metrics", "2", "--interval", "2s", "--samples", "5001",
              "--late", "0.2", "--out-of-order", "0.2", "--hot", "1", "--seed", "42",
              "--end", end]
    with Server() as a, Server() as b:
        sa = load(a, "--connections", "1", *common)
        sb = load(b, "--connections", "4", "--batch", "50", *common)
        eq(sa["samples"], 5002)  # rounded up to whole reports of 2 metrics
        eq(sb["samples"], 5002)
        eq(stored(a)[1], 5002)
        ea, eb = export(a), export(b)
        eq(len(ea.splitlines()), 5002)
        check(sorted(ea.splitlines()) == sorted(eb.splitlines()),
              "same seed, different connections: different samples")
    # --max-seconds bounds a live run by wall time
    with Server() as c:
        s = load(c, "--live", "--interval", "200ms", "--duration", "1h", "--max-seconds", "1",
                 "--devices", "3")
        eq(s["stopped_early"], True)
        check(s["seconds"] < 10, "live run not stopped: %r" % s)
        eq(stored(c)[1], s["samples"])


def query_all(srv, tenant, devices):
    out = {}
    for d in devices:
        r = srv.request("GET", "/api/v1/query",
                        params={"tenant": tenant, "device": d, "from": "0",
                                "to": str(now_ms() + MIN)},
                        headers={"Authorization": "Token " + srv.token})
        eq(r.status, 200, r.text)
        j = r.json()
        out[d] = (j["count"], j["values"])
    return out


@suite.test
def export_import_round_trip():
    d = tmpdir("bdbops-")
    with Server() as a, Server() as b:
        s = load(a, "--devices", "12", "--metrics", "4", "--interval", "3s", "--duration",
                 "30m", "--late", "0.05", "--out-of-order", "0.05", "--seed", "3")
        # a metric without a dot (JSON) and one device tag, which CSV keeps by name
        a.write_json({"reports": [{"device": "pump-7", "time": now_ms() - MIN,
                                   "metrics": {"pressure": 3.25}}]})
        devices = ["dev-%06d" % i for i in range(1, 13)] + ["pump-7"]
        want = query_all(a, "default", devices)
        eq(sum(c for c, _ in want.values()), s["samples"] + 1)
        lp, csv = os.path.join(d, "all.lp"), os.path.join(d, "all.csv")
        export(a, "--output", lp)
        export(a, "--format", "csv", "--output", csv)
        with open(csv) as f:
            rows = f.read().splitlines()
        eq(rows[0], "tenant,device,metric,time,value")
        eq(len(rows) - 1, s["samples"] + 1)
        for tenant, path in (("viaLP", lp), ("viaCSV", csv)):
            rc, out, err = run_bin(["import", "--server", "127.0.0.1:%d" % b.port, "--token",
                                    b.token, "--tenant", tenant, "--chunk-bytes", "65536", path],
                                   timeout=120)
            eq(rc, 0, err)
            contains(err, "%d stored, 0 refused" % (s["samples"] + 1))
        got_csv = query_all(b, "viaCSV", devices)
        eq(got_csv, want, "CSV round trip")
        # line protocol renames a bare metric (pressure -> pressure.value, docs/API.md)
        got_lp = query_all(b, "viaLP", devices)
        for dev in devices[:-1]:
            eq(got_lp[dev], want[dev], "LP round trip of %s" % dev)
        eq(got_lp["pump-7"][1], [[want["pump-7"][1][0][0], "pressure.value", 3.25]])
        # --measure reads the fleet off a running server
        rc, out, err = run_bin(["plan", "--json", "--measure", "127.0.0.1:%d" % a.port])
        eq(rc, 0, err)
        p = json.loads(out)
        eq(p["inputs"]["devices"], 13)
        check(abs(p["inputs"]["interval_s"] - 3) < 0.5, "measured interval %r" % p["inputs"])
    # a refused line is counted and makes import fail
    bad = os.path.join(d, "bad.lp")
    with open(bad, "w") as f:
        f.write("env,device=d1 temp=1 %d\nnot line protocol\n" % (now_ms() * 1000000))
    with Server() as c:
        rc, out, err = run_bin(["import", "--server", "127.0.0.1:%d" % c.port, bad])
        eq(rc, 1)
        contains(err, "1 stored, 1 refused")


if __name__ == "__main__":
    suite.main()
