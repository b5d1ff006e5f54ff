#!/usr/bin/env python3
"""bench/agg_bench.py: aggregate and current-state query latencies of bucketdb beside
VictoriaMetrics' answers to the equivalent queries, on the same data, in the same run,
on the same machine. See bench/README.md ("Aggregates and state") for what is measured.

  bench/agg_bench.py                 build/bucketdb, 10,000 devices, 50 runs per query
  bench/agg_bench.py --runs 200 --devices 10000 --peers bucketdb,vm
  BUCKETDB=build-x/bucketdb bench/agg_bench.py

Queries (p50/p99 over --runs timed runs after 5 warm-up runs, one at a time on one
keep-alive connection, from sending the request to the last byte of the answer):
  q30d   one device, 30 days at 1 h resolution (bucketdb: its nine statistics per hour;
         VictoriaMetrics: the mean)
         (and q30d-mean: the same with stats=mean, VM's avg_over_time's one column)
  q1h    one device, one hour at 1 m resolution (noon yesterday: inside a whole day file)
  q24h1m one device reporting every 10 s (`fast`, 6 samples a minute), the last 24 h at
         1 m resolution (VictoriaMetrics: avg_over_time(...[1m]) at step 1m)
  q7d1m  the same over the last 7 days (10,080 minutes)
  qfleet fleet hourly average of one metric over a tenant of --devices devices, 24 h
  qstate devices in a state now (bucketdb only: VictoriaMetrics stores no strings)
Standard library only; every wait is bounded; servers are stopped by their PID."""

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

MINUTE, HOUR, DAY = 60000, 3600000, 86400000
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(msg):
    sys.stderr.write("[agg-bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Peer:
    def __init__(self, name, cmd, port, work):
        self.name, self.port = name, port
        self.out = open(os.path.join(work, name + ".log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.out,
                                     stdin=subprocess.DEVNULL)
        self.conn = None

    def wait_ready(self, path, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                st, _ = self.req("GET", path)
                if st < 500:
                    return
            except OSError:
                self.conn = None
            if self.proc.poll() is not None:
                raise SystemExit("%s exited early (see its log)" % self.name)
            time.sleep(0.1)
        raise SystemExit("%s not ready after %ds" % (self.name, timeout))

    def req(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            self.conn.request(method, path, body=body)
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        return r.status, data

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.out.close()


def lines_solo(now, days):
    """One device, one reading a minute for `days` days up to a minute ago."""
    rnd = random.Random(1)
    end = now - now % 60000 - 60000
    t = end - days * DAY
    v = 20.0
    while t < end:
        v += rnd.uniform(-0.5, 0.5)
        yield "env,device=solo temp=%.2f %d" % (v, t)
        t += 60000


def lines_fast(now, days):
    """One device (`fast`, metric env.hum), one reading every 10 s for `days` days up to
    the current minute: six samples a minute, as devices of real fleets report. Its own
    metric, so the fleet queries over env.temp see the same data as before."""
    rnd = random.Random(3)
    end = now - now % 60000
    t = end - days * DAY
    v = 50.0
    while t < end:
        v += rnd.uniform(-0.2, 0.2)
        yield "env,device=fast hum=%.2f %d" % (v, t)
        t += 10000


def lines_fleet(now, devices, per_hour, hours):
    """`devices` devices, `per_hour` readings an hour each for `hours` hours; every
    report also carries a state (bucketdb keeps it; VictoriaMetrics drops strings, so
    its copy omits it)."""
    rnd = random.Random(2)
    end = now - now % HOUR
    step = HOUR // per_hour
    for t in range(end - hours * HOUR, end, step):
        for d in range(devices):
            st = "alarm" if (d * 7 + t // step) % 50 == 0 else "ok"
            yield ("env,device=d%05d,site=s%d temp=%.2f" % (d, d % 8, 15 + 10 * rnd.random()),
                   ' state="%s"' % st, " %d" % (t + d * 997 % step))


def ingest(peer, gen, with_state, chunk=5000):
    buf = []
    n = 0

    def send():
        body = "\n".join(buf).encode()
        st, data = peer.req("POST", "/write?precision=ms", body)
        if st // 100 != 2:
            raise SystemExit("%s refused a write: %d %r" % (peer.name, st, data[:200]))

    for item in gen:
        if isinstance(item, tuple):
            buf.append(item[0] + ("," + item[1].strip() if with_state else "") + item[2])
        else:
            buf.append(item)
        n += 1
        if len(buf) >= chunk:
            send()
            buf = []
    if buf:
        send()
    return n


def timed(peer, path, runs, warm=5, check=None):
    for _ in range(warm):
        st, data = peer.req("GET", path)
        if st != 200:
            raise SystemExit("%s %s: %d %r" % (peer.name, path, st, data[:300]))
    if check:
        check(json.loads(data))
    lat = []
    for _ in range(runs):
        t0 = time.perf_counter()
        st, data = peer.req("GET", path)
        lat.append((time.perf_counter() - t0) * 1000)
        if st != 200:
            raise SystemExit("%s %s: %d" % (peer.name, path, st))
    lat.sort()

    def rank(q):
        return lat[min(len(lat) - 1, max(0, int(q * len(lat) + 0.999999) - 1))]
    return rank(0.50), rank(0.99), len(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=10000)
    ap.add_argument("--per-hour", type=int, default=4, help="fleet readings per device-hour")
    ap.add_argument("--hours", type=int, default=24, help="fleet data and query span")
    ap.add_argument("--days", type=int, default=30, help="span of the one-device data")
    ap.add_argument("--fast-days", type=int, default=7,
                    help="span of the 10 s device's data and of q7d1m")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--peers", default="bucketdb,vm")
    a = ap.parse_args()
    for k in ("devices", "per_hour", "hours", "days", "fast_days", "runs"):
        if getattr(a, k) < 1:
            raise SystemExit("--%s must be positive" % k.replace("_", "-"))
    peers = a.peers.split(",")
    bdb = os.environ.get("BUCKETDB") or os.path.join(ROOT, "build", "bucketdb")
    if "bucketdb" in peers and not os.access(bdb, os.X_OK):
        raise SystemExit("%s missing: run make, or set BUCKETDB" % bdb)
    vm = shutil.which("victoria-metrics")
    if "vm" in peers and not vm:
        raise SystemExit("victoria-metrics missing (apt-get install victoria-metrics, or "
                         "bench/run installs it)")
    work = tempfile.mkdtemp(prefix="bucketdb-aggbench.")
    started = []
    now = int(time.time() * 1000)
    rows = []
    try:
        for name in peers:
            port = free_port()
            data = os.path.join(work, name + "-data")
            if name == "bucketdb":
                # raw retention off: the one-device data reaches back 30 days, the
                # default raw retention
                cmd = [bdb, "serve", "--data", data, "--listen", "127.0.0.1:%d" % port,
                       "--retention-ms", "0"]
                ready = "/ping"
            else:
                cmd = [vm, "-storageDataPath", data, "-httpListenAddr", "127.0.0.1:%d" % port,
                       "-retentionPeriod", "100y", "-search.latencyOffset", "0s"]
                ready = "/health"
            p = Peer(name, cmd, port, work)
            started.append(p)
            p.wait_ready(ready)
            t0 = time.monotonic()
            n1 = ingest(p, lines_solo(now, a.days), False)
            n2 = ingest(p, lines_fleet(now, a.devices, a.per_hour, a.hours), name == "bucketdb")
            n3 = ingest(p, lines_fast(now, a.fast_days), False)
            if name == "bucketdb":
                p.req("POST", "/internal/flush")
            else:
                p.req("GET", "/internal/force_flush")
                time.sleep(2)  # VM makes flushed rows searchable within a second
            log("%s: ingested %d + %d + %d samples in %.1f s" % (name, n1, n2, n3,
                                                                time.monotonic() - t0))
            end_solo = now - now % 60000
            frm = end_solo - a.days * DAY
            fend = now - now % HOUR
            # an hour inside a whole day (the 1m tier keeps a file per day): noon yesterday
            h1 = now - now % DAY - 12 * HOUR
            ffrm = fend - a.hours * HOUR
            # the 10 s device's minutes: the last 24 h and the last --fast-days days
            end_fast = end_solo
            fast_spans = (("q24h1m", "q24h1m 1 device (10 s) 24 h at 1m", DAY),
                          ("q7d1m", "q7d1m 1 device (10 s) %d d at 1m" % a.fast_days,
                           a.fast_days * DAY))
            if name == "bucketdb":
                qs = [
                    ("q30d", "q30d 1 device 30 d at 1h", "/api/v1/query?" + urllib.parse.urlencode(
                        {"device": "solo", "metric": "env.temp", "resolution": "1h",
                         "from": frm, "to": end_solo})),
                    ("q30d-mean", "q30d 1 device 30 d at 1h, stats=mean", "/api/v1/query?" +
                     urllib.parse.urlencode(
                         {"device": "solo", "metric": "env.temp", "resolution": "1h",
                          "stats": "mean", "from": frm, "to": end_solo})),
                    ("q1h", "q1h 1 device 1 hour at 1m (yesterday)", "/api/v1/query?" +
                     urllib.parse.urlencode(
                         {"device": "solo", "metric": "env.temp", "resolution": "1m",
                          "from": h1, "to": h1 + HOUR})),
                ] + [
                    (qid, label, "/api/v1/query?" + urllib.parse.urlencode(
                        {"device": "fast", "metric": "env.hum", "resolution": "1m",
                         "from": end_fast - span, "to": end_fast}))
                    for qid, label, span in fast_spans
                ] + [
                    ("qfleet", "qfleet avg/h %d devices (fleet tables)" % a.devices, "/api/v1/fleet?" +
                     urllib.parse.urlencode({"metric": "env.temp", "resolution": "1h",
                                             "from": ffrm, "to": fend})),
                    ("qfleet-adhoc", "qfleet avg/h %d devices (ad hoc, device tiers)" % a.devices,
                     "/api/v1/fleet/query?" + urllib.parse.urlencode(
                         {"metric": "env.temp", "resolution": "1h", "from": ffrm, "to": fend})),
                    ("qtag", "qfleet avg/h tag site:s3 (ad hoc)", "/api/v1/fleet/query?" +
                     urllib.parse.urlencode({"metric": "env.temp", "resolution": "1h",
                                             "tag": "site:s3", "from": ffrm, "to": fend})),
                    ("qstate", "qstate devices in state alarm",
                     "/api/v1/state/devices?state=alarm&limit=10000"),
                ]
            else:
                # VM's [1h] window at step t covers (t-1h, t]; evaluated 1 ms before each
                # hour's end it covers [start, end) of millisecond data, as bucketdb does
                qs = [
                    ("q30d", "q30d 1 device 30 d at 1h", "/api/v1/query_range?" + urllib.parse.urlencode(
                        {"query": 'avg_over_time(env_temp{device="solo"}[1h])',
                         "start": (frm + HOUR - 1) / 1000, "end": (end_solo - 1) / 1000, "step": "1h"})),
                    ("q1h", "q1h 1 device 1 hour at 1m (yesterday)", "/api/v1/query_range?" +
                     urllib.parse.urlencode(
                         {"query": 'avg_over_time(env_temp{device="solo"}[1m])',
                          "start": (h1 + MINUTE - 1) / 1000, "end": (h1 + HOUR - 1) / 1000,
                          "step": "1m"})),
                ] + [
                    (qid, label, "/api/v1/query_range?" + urllib.parse.urlencode(
                        {"query": 'avg_over_time(env_hum{device="fast"}[1m])',
                         "start": (end_fast - span + MINUTE - 1) / 1000,
                         "end": (end_fast - 1) / 1000, "step": "1m"}))
                    for qid, label, span in fast_spans
                ] + [
                    ("qfleet", "qfleet avg/h %d devices" % a.devices, "/api/v1/query_range?" +
                     urllib.parse.urlencode(
                         {"query": "sum(sum_over_time(env_temp[1h])) / "
                                   "sum(count_over_time(env_temp[1h]))",
                          "start": (ffrm + HOUR - 1) / 1000, "end": (fend - 1) / 1000, "step": "1h"})),
                    ("qtag", "qfleet avg/h tag site:s3", "/api/v1/query_range?" + urllib.parse.urlencode(
                        {"query": 'sum(sum_over_time(env_temp{site="s3"}[1h])) / '
                                  'sum(count_over_time(env_temp{site="s3"}[1h]))',
                         "start": (ffrm + HOUR - 1) / 1000, "end": (fend - 1) / 1000, "step": "1h"})),
                ]
            def minutes_check(qid):
                """every minute of the span answered, with its six samples"""
                want = dict((q, span // MINUTE) for q, _, span in fast_spans).get(qid)
                if want is None:
                    return None

                def check(d):
                    if name == "bucketdb":
                        got = [r[2] for r in d["values"]]
                    else:
                        r = d["data"]["result"]
                        got = [6] * len(r[0]["values"]) if r else []
                    if len(got) != want or set(got) != {6}:
                        raise SystemExit("%s %s: %d minutes (counts %s), expected %d of 6" %
                                         (name, qid, len(got), sorted(set(got))[:5], want))
                return check

            for qid, label, path in qs:
                p50, p99, size = timed(p, path, a.runs, check=minutes_check(qid))
                rows.append((name, qid, label, p50, p99, size))
                log("%s %s: p50 %.3f ms, p99 %.3f ms" % (name, label, p50, p99))
            # the same question: bucketdb's fleet average of the first hour beside VM's
            fleet_path = next(path for qid, _, path in qs if qid == "qfleet")
            if name == "bucketdb":
                _, d = p.req("GET", fleet_path)
                rows.append((name, "check", "(check) first hour fleet avg",
                             json.loads(d)["values"][0][5], 0, 0))
            else:
                _, d = p.req("GET", fleet_path)
                r = json.loads(d)["data"]["result"]
                rows.append((name, "check", "(check) first hour fleet avg",
                             float(r[0]["values"][0][1]) if r else float("nan"), 0, 0))
            p.stop()
    finally:
        for p in started:
            p.stop()
        shutil.rmtree(work, ignore_errors=True)
    ncpu = os.cpu_count()
    mem = 0
    with open("/proc/meminfo") as f:
        mem = round(int(f.readline().split()[1]) / 1048576)
    print("agg_bench on a %d-core %d GiB shared machine, load average %s" %
          (ncpu, mem, open("/proc/loadavg").read().split()[0]))
    print("%-10s %-48s %10s %10s %8s" % ("peer", "query", "p50 ms", "p99 ms", "bytes"))
    for name, qid, label, p50, p99, size in rows:
        if qid == "check":
            print("%-10s %-48s %10.6f" % (name, label, p50))
        else:
            print("%-10s %-48s %10.3f %10.3f %8d" % (name, label, p50, p99, size))
    by = {(n, q): (p50, p99) for n, q, _, p50, p99, _ in rows if q != "check"}
    for bq, vq in (("q30d", "q30d"), ("q30d-mean", "q30d"), ("q1h", "q1h"), ("q24h1m", "q24h1m"),
                   ("q7d1m", "q7d1m"), ("qfleet", "qfleet"), ("qfleet-adhoc", "qfleet"),
                   ("qtag", "qtag")):
        if ("bucketdb", bq) in by and ("vm", vq) in by:
            b, v = by[("bucketdb", bq)], by[("vm", vq)]
            print("ratio bdb/VM %-35s %10.2fx %9.2fx" % (bq + " vs " + vq, b[0] / v[0],
                                                         b[1] / v[1]))
    print("qstate: VictoriaMetrics has no equivalent (it stores no string values, so no "
          "current state per device)")


if __name__ == "__main__":
    main()
