#!/usr/bin/env python3
"""bench/grafana_bench.py: Grafana's typical panel queries against bucketdb, InfluxDB 1.x
(Debian's influxd) and VictoriaMetrics, on the same data, in the same run, on the same
machine (issue 19). See bench/README.md ("Grafana panels") for what is measured.

  bench/grafana_bench.py                  build/bucketdb, 1,000 devices x 4 fields
  bench/grafana_bench.py --fields 10      10 fields per device (a load of about 5 min)
  bench/grafana_bench.py --devices 100 --days 7 --runs 20      a short trial
  BUCKETDB=build-x/bucketdb bench/grafana_bench.py --peers bucketdb,influxd

Panels, sent as Grafana sends them (InfluxQL with epoch=ms to bucketdb's /query and to
influxd; PromQL query_range with step-aligned start and end to VictoriaMetrics and, as an
extra row, to bucketdb's /prometheus):
  q24h     one device, the last 24 h at 1 m   (mean("temp") ... GROUP BY time(1m))
  q30d     one device, the last 30 d at 1 h   (Grafana's $__interval for 30 d)
  qtag24h  mean over the devices of one site (a tag group), the last 24 h at 1 h
  qtag30d  the same over the last 30 d
Each query: --warm warm-up runs, then --runs timed runs (or as many as fit in
--query-limit seconds), one at a time on one keep-alive connection, from sending the
request to the last byte; p50 and p99 by nearest rank. bucketdb's and influxd's answers
to the same panels over one fixed absolute range are compared: the same series and
points, values within 1e-9 relative; a difference stops the bench.
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
INFLUXD = "/usr/bin/influxd"
FIELDS = ("temp", "hum", "pres", "volt", "curr", "pwr", "rssi", "co2", "lux", "batt")
DB = "bench"
DEVICE = "d-1"
SITE = "s3"


def log(msg):
    sys.stderr.write("[grafana-bench %s] %s\n" % (time.strftime("%H:%M:%S"), msg))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        st = f.read().rsplit(")", 1)[1].split()
    return int(st[11]) + int(st[12])


class Peer:
    def __init__(self, name, cmd, port, work):
        self.name, self.port = name, port
        self.out = open(os.path.join(work, name + ".log"), "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=self.out,
                                     stdin=subprocess.DEVNULL)
        self.conn = None
        self.load_s = 0.0

    def wait_ready(self, path, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                st, _, _ = self.req("GET", path)
                if st < 500:
                    return
            except OSError:
                self.conn = None
            if self.proc.poll() is not None:
                raise SystemExit("%s exited early (see its log)" % self.name)
            time.sleep(0.1)
        raise SystemExit("%s not ready after %ds" % (self.name, timeout))

    def req(self, method, path, body=None, headers=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            self.conn.request(method, path, body=body, headers=headers or {})
            r = self.conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        return r.status, data, r

    def write(self, body):
        t0 = time.perf_counter()
        st, data, _ = self.req("POST", "/write?db=%s&precision=ms" % DB, body)
        self.load_s += time.perf_counter() - t0
        if st // 100 != 2:
            raise SystemExit("%s refused a write: %d %r" % (self.name, st, data[:300]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        if not self.out.closed:
            self.out.close()


def influxd_conf(work, port):
    d = os.path.join(work, "influxd-data")
    os.makedirs(d)
    conf = os.path.join(work, "influxdb.conf")
    with open(conf, "w") as f:
        f.write("""reporting-disabled = true
bind-address = "127.0.0.1:%d"
[meta]
  dir = "%s/meta"
[data]
  dir = "%s/data"
  wal-dir = "%s/wal"
  query-log-enabled = false
  cache-max-memory-size = "4g"
[coordinator]
  max-select-point = 0
  max-select-series = 0
[http]
  enabled = true
  bind-address = "127.0.0.1:%d"
  log-enabled = false
[monitor]
  store-enabled = false
[continuous_queries]
  enabled = false
[subscriber]
  enabled = false
""" % (free_port(), d, d, d, port))
    return conf


class Fleet:
    """`devices` devices (tag `site`, `sites` values) with `fields` fields each: one
    report per `coarse` seconds for `days` days, then one per 10 s (`fine`) for the last
    `fine_hours` hours, up to `end`. Each device reports at its own phase inside the
    interval (never on a minute boundary, so that windows closed on either side hold
    the same samples); values are random walks with two decimals from a fixed seed."""

    def __init__(self, a, end):
        self.devices, self.fields = a.devices, FIELDS[:a.fields]
        self.end = end
        self.fine_start = end - a.fine_hours * HOUR
        self.start = self.fine_start - a.days * DAY
        self.coarse, self.fine = a.coarse * 1000, a.fine * 1000
        rnd = random.Random(19)
        self.steps = [rnd.randint(-40, 40) for _ in range(8191)]
        self.state = [[rnd.randint(1500, 2500) for _ in self.fields]
                      for _ in range(a.devices)]
        self.prefix = ["env,device=d-%d,site=s%d " % (d, d % a.sites) for d in range(a.devices)]
        self.phase = [1 + (d * 997) % (min(self.coarse, self.fine) - 2) for d in range(a.devices)]

    def ticks(self):
        t = self.start
        while t < self.fine_start:
            yield t
            t += self.coarse
        t = self.fine_start
        while t < self.end:
            yield t
            t += self.fine

    def lines(self):
        """Lines in time order, as a fleet sends them; also counts samples."""
        k = 0
        steps, ns = self.steps, len(self.steps)
        names = ["%s=" % f for f in self.fields]
        for t in self.ticks():
            for d in range(self.devices):
                st = self.state[d]
                parts = []
                for i, nm in enumerate(names):
                    v = st[i] + steps[(k * 7 + i) % ns]
                    if v < 0 or v > 9999:
                        v = st[i] - steps[(k * 7 + i) % ns]
                    st[i] = v
                    parts.append("%s%d.%02d" % (nm, v // 100, v % 100))
                k += 1
                yield "%s%s %d" % (self.prefix[d], ",".join(parts), t + self.phase[d])

    def samples(self):
        return sum(1 for _ in self.ticks()) * self.devices * len(self.fields)


def load(peers, fleet, chunk, limit):
    """Every chunk to every peer in turn (one generation for all), bounded in time."""
    deadline = time.monotonic() + limit
    report = time.monotonic() + 30
    buf = []
    n = 0
    for line in fleet.lines():
        buf.append(line)
        if len(buf) >= chunk:
            body = ("\n".join(buf) + "\n").encode()
            for p in peers:
                p.write(body)
            n += len(buf)
            buf = []
            if time.monotonic() > report:
                report += 30
                log("%d lines sent (%s)" % (n, ", ".join("%s %.1f s" % (p.name, p.load_s)
                                                         for p in peers)))
            if time.monotonic() > deadline:
                raise SystemExit("load did not finish in --load-limit %d s (%d lines sent)"
                                 % (limit, n))
    if buf:
        body = ("\n".join(buf) + "\n").encode()
        for p in peers:
            p.write(body)
        n += len(buf)
    return n


def quiesce(peers, limit=180):
    """Wait until every server is idle (under 5% of a core for a second), so that no
    background merge or compaction runs during another peer's timing."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = {p.name: cpu_ticks(p.proc.pid) for p in peers}
        time.sleep(1.0)
        busy = [p.name for p in peers
                if cpu_ticks(p.proc.pid) - before[p.name] > 0.05 * os.sysconf("SC_CLK_TCK")]
        if not busy:
            return
    log("servers still busy after %d s: %s" % (limit, ", ".join(busy)))


def influxql_panels(span_24h, span_30d):
    """The panel statements, with `{tf}` for Grafana's $timeFilter."""
    sel = 'SELECT mean("temp") FROM "env" WHERE %s AND {tf} GROUP BY time(%s) fill(null)'
    return [
        ("q24h", "1 device 24 h at 1m", sel % ('"device" = \'%s\'' % DEVICE, "1m"), span_24h),
        ("q30d", "1 device 30 d at 1h", sel % ('"device" = \'%s\'' % DEVICE, "1h"), span_30d),
        ("qtag24h", "site %s mean 24 h at 1h" % SITE, sel % ('"site" = \'%s\'' % SITE, "1h"),
         span_24h),
        ("qtag30d", "site %s mean 30 d at 1h" % SITE, sel % ('"site" = \'%s\'' % SITE, "1h"),
         span_30d),
    ]


def promql_panels(now, span_24h, span_30d):
    """The same panels in PromQL, start and end aligned to the step as Grafana does."""
    one = 'avg_over_time(env_temp{device="%s"}[%s])'
    # the mean of the devices' means: equal to InfluxQL's mean over the group's samples
    # here, where every device reports as often in each hour (bucketdb's PromQL has no
    # vector / vector for sum / count)
    tag = 'avg(avg_over_time(env_temp{site="%s"}[{w}]))' % SITE
    out = []
    for qid, q, step, span in (("q24h", one % (DEVICE, "1m"), MINUTE, span_24h),
                               ("q30d", one % (DEVICE, "1h"), HOUR, span_30d),
                               ("qtag24h", tag.replace("{w}", "1h"), HOUR, span_24h),
                               ("qtag30d", tag.replace("{w}", "1h"), HOUR, span_30d)):
        start = (now - span) // step * step
        end = now // step * step
        out.append((qid, q, {"query": q, "start": start / 1000, "end": end / 1000,
                             "step": step // 1000}))
    return out


def influx_path(stmt):
    return "/query?" + urllib.parse.urlencode({"db": DB, "epoch": "ms", "q": stmt})


def timed(peer, path, runs, warm, limit):
    data = b""
    tier = None
    for _ in range(warm):
        st, data, r = peer.req("GET", path)
        if st != 200 or b'"error"' in data:
            raise SystemExit("%s %s: %d %r" % (peer.name, path, st, data[:300]))
        tier = r.getheader("X-Bucketdb-Tier")
    lat = []
    deadline = time.monotonic() + limit
    while len(lat) < runs and (len(lat) < 3 or time.monotonic() < deadline):
        t0 = time.perf_counter()
        st, data, _ = peer.req("GET", path)
        lat.append((time.perf_counter() - t0) * 1000)
        if st != 200:
            raise SystemExit("%s %s: %d" % (peer.name, path, st))
    lat.sort()

    def rank(q):
        return lat[min(len(lat) - 1, max(0, int(q * len(lat) + 0.999999) - 1))]
    return rank(0.50), rank(0.99), len(lat), data, tier


def points(doc):
    """{(name, tags): [(time, value), ...]} of an InfluxQL answer."""
    res = doc["results"][0]
    if "error" in res:
        raise SystemExit("statement error: %s" % res["error"])
    return {(s["name"], json.dumps(s.get("tags", {}), sort_keys=True)):
            [tuple(v) for v in s["values"]] for s in res.get("series", [])}


def compare(qid, want, got):
    """influxd's answer (want) against bucketdb's (got): '' and the figures, or why not."""
    if sorted(want) != sorted(got):
        return "%s: series %s vs %s" % (qid, sorted(want), sorted(got)), 0, 0.0
    n, worst = 0, 0.0
    for k in want:
        a, b = want[k], got[k]
        if len(a) != len(b):
            return "%s: %d points from influxd, %d from bucketdb" % (qid, len(a), len(b)), 0, 0
        for (ta, va), (tb, vb) in zip(a, b):
            if ta != tb or (va is None) != (vb is None):
                return "%s: point (%r, %r) vs (%r, %r)" % (qid, ta, va, tb, vb), 0, 0
            if va is not None:
                rel = abs(va - vb) / max(abs(va), abs(vb), 1e-300)
                worst = max(worst, rel)
                if rel > 1e-9:
                    return "%s at %d: %r vs %r" % (qid, ta, va, vb), 0, 0
        n += len(a)
    return "", n, worst


def compare_prom(want, got):
    """VictoriaMetrics' query_range answer (want) against bucketdb's: (why, points, worst
    relative difference); reported, not fatal (VM is not the reference)."""
    def series(data):
        # VM 1.79 keeps __name__ after avg_over_time and labels line protocol written
        # with ?db= by `db`; bucketdb drops the name, as Prometheus does, and has no `db`
        return {json.dumps({k: v for k, v in r["metric"].items() if k not in ("__name__", "db")},
                           sort_keys=True): r["values"]
                for r in json.loads(data)["data"]["result"]}
    a, b = series(want), series(got)
    if sorted(a) != sorted(b):
        return "series differ: %s vs %s" % (sorted(a)[:3], sorted(b)[:3]), 0, 0.0
    n, worst = 0, 0.0
    for k in a:
        if len(a[k]) != len(b[k]):
            return "%d points from VM, %d from bucketdb" % (len(a[k]), len(b[k])), 0, 0.0
        for (ta, va), (tb, vb) in zip(a[k], b[k]):
            if ta != tb:
                return "time %r vs %r" % (ta, tb), 0, 0.0
            va, vb = float(va), float(vb)
            worst = max(worst, abs(va - vb) / max(abs(va), abs(vb), 1e-300))
        n += len(a[k])
    return "", n, worst


def goal_lines(by):
    """Issue 19's goals per panel at p50: bucketdb (InfluxQL) at most 0.1x influxd's
    time, and at most VictoriaMetrics' (1.0x)."""
    out = []
    for qid in ("q24h", "q30d", "qtag24h", "qtag30d"):
        b = by.get(("bucketdb", qid))
        if not b:
            continue
        parts = []
        for den, limit, what in (("influxd", 0.1, "<= 0.1x influxd"), ("vm", 1.0, "<= VM")):
            if (den, qid) in by:
                r = b[0] / by[(den, qid)][0]
                parts.append("%s %s (%.3fx)" % (what, "met" if r <= limit else "NOT met", r))
        if parts:
            out.append("goal %-8s %s" % (qid, ", ".join(parts)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--fields", type=int, default=4, help="fields (metrics) per device, 1..10")
    ap.add_argument("--sites", type=int, default=8, help="values of the tag `site`")
    ap.add_argument("--days", type=int, default=30,
                    help="days of history at --coarse before the last --fine-hours")
    ap.add_argument("--coarse", type=int, default=3600, help="seconds between reports "
                    "in the history")
    ap.add_argument("--fine-hours", type=int, default=24, help="hours at --fine at the end")
    ap.add_argument("--fine", type=int, default=10, help="seconds between recent reports")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per query and peer")
    ap.add_argument("--warm", type=int, default=5, help="warm-up runs per query and peer")
    ap.add_argument("--query-limit", type=int, default=60,
                    help="seconds of timed runs per query and peer (at least 3 runs)")
    ap.add_argument("--load-limit", type=int, default=900, help="seconds for the whole load")
    ap.add_argument("--chunk", type=int, default=5000, help="lines per write request")
    ap.add_argument("--peers", default="bucketdb,influxd,vm")
    ap.add_argument("--panels", default="q24h,q30d,qtag24h,qtag30d",
                    help="the panels to time (the equality check covers them all)")
    ap.add_argument("--vm-nocache", action="store_true",
                    help="send nocache=1 to VictoriaMetrics: no rollup result cache")
    ap.add_argument("--bdb-nocache", action="store_true",
                    help="start bucketdb with --group-cache-bytes 0: no kept group windows "
                         "or PromQL steps (its read and catalog caches stay)")
    a = ap.parse_args()
    bounds = {"devices": (2, 1000000), "fields": (1, len(FIELDS)), "sites": (1, 1000),
              "days": (1, 365), "coarse": (60, 86400), "fine_hours": (1, 168),
              "fine": (1, 60), "runs": (1, 100000), "warm": (0, 1000),
              "query_limit": (1, 3600), "load_limit": (10, 86400), "chunk": (1, 100000)}
    for k, (lo, hi) in bounds.items():
        if not lo <= getattr(a, k) <= hi:
            raise SystemExit("--%s must be in %d..%d" % (k.replace("_", "-"), lo, hi))
    if a.coarse % 60 or 60 % a.fine:
        raise SystemExit("--coarse must be whole minutes and --fine divide a minute (1, 2, "
                         "3, 4, 5, 6, 10, 12, 15, 20, 30, 60), so that no report falls on a "
                         "minute boundary")
    if a.sites <= int(SITE[1:]) or a.devices <= int(DEVICE[2:]):
        raise SystemExit("--sites must be above %s and --devices above 1" % SITE[1:])
    if a.days * 24 < 30 * 24 - a.fine_hours:
        log("--days %d: the 30 d panels reach before the data (fine: they read less)" % a.days)
    panels_wanted = a.panels.split(",")
    for q in panels_wanted:
        if q not in ("q24h", "q30d", "qtag24h", "qtag30d"):
            raise SystemExit("--panels: q24h, q30d, qtag24h, qtag30d")
    peers_wanted = a.peers.split(",")
    for p in peers_wanted:
        if p not in ("bucketdb", "influxd", "vm"):
            raise SystemExit("--peers: bucketdb, influxd, vm")
    bdb = os.environ.get("BUCKETDB") or os.path.join(ROOT, "build", "bucketdb")
    if "bucketdb" in peers_wanted and not os.access(bdb, os.X_OK):
        raise SystemExit("%s missing: run make, or set BUCKETDB" % bdb)
    vm = shutil.which("victoria-metrics")
    if "vm" in peers_wanted and not vm:
        raise SystemExit("victoria-metrics missing (apt-get install victoria-metrics, or "
                         "bench/run installs it)")
    if "influxd" in peers_wanted and not os.access(INFLUXD, os.X_OK):
        raise SystemExit("%s missing (apt-get install influxdb)" % INFLUXD)

    now0 = int(time.time() * 1000)
    fleet = Fleet(a, now0 - now0 % MINUTE)
    nsamples = fleet.samples()
    work = tempfile.mkdtemp(prefix="bucketdb-grafanabench.")
    started = {}
    rows, checks, pchecks, tiers = [], [], [], {}
    try:
        for name in peers_wanted:
            port = free_port()
            if name == "bucketdb":
                # raw retention off: the history reaches back past the default 30 days
                cmd = [bdb, "serve", "--data", os.path.join(work, "bucketdb-data"),
                       "--listen", "127.0.0.1:%d" % port, "--retention-ms", "0"]
                if a.bdb_nocache:
                    cmd += ["--group-cache-bytes", "0"]
                ready = "/ping"
            elif name == "influxd":
                cmd = [INFLUXD, "-config", influxd_conf(work, port)]
                ready = "/ping"
            else:
                cmd = [vm, "-storageDataPath", os.path.join(work, "vm-data"),
                       "-httpListenAddr", "127.0.0.1:%d" % port, "-retentionPeriod", "100y",
                       "-search.latencyOffset", "0s"]
                ready = "/health"
            p = Peer(name, cmd, port, work)
            started[name] = p
            p.wait_ready(ready)
        if "influxd" in started:
            st, data, _ = started["influxd"].req(
                "POST", "/query", urllib.parse.urlencode({"q": "CREATE DATABASE " + DB}),
                {"Content-Type": "application/x-www-form-urlencoded"})
            if st != 200:
                raise SystemExit("influxd CREATE DATABASE: %d %r" % (st, data[:200]))
        peers = list(started.values())
        log("loading %d devices x %d fields, %d samples, into %s" %
            (a.devices, a.fields, nsamples, ", ".join(started)))
        t0 = time.monotonic()
        nlines = load(peers, fleet, a.chunk, a.load_limit)
        log("loaded %d lines in %.1f s (%s)" % (nlines, time.monotonic() - t0, ", ".join(
            "%s %.1f s" % (p.name, p.load_s) for p in peers)))
        if "bucketdb" in started:
            started["bucketdb"].req("POST", "/internal/flush")
        if "vm" in started:
            started["vm"].req("GET", "/internal/force_flush")
            time.sleep(2)  # VM makes flushed rows searchable within a second
        quiesce(peers)

        # the same panels over one fixed absolute range (Grafana's $timeFilter for an
        # absolute range): bucketdb's answer must be influxd's
        qnow = int(time.time() * 1000)
        if "bucketdb" in started and "influxd" in started:
            for qid, label, stmt, span in influxql_panels(DAY, 30 * DAY):
                tf = "time >= %dms and time <= %dms" % (qnow - span, qnow)
                docs = []
                for nm in ("influxd", "bucketdb"):
                    st, data, _ = started[nm].req("GET", influx_path(stmt.format(tf=tf)))
                    if st != 200:
                        raise SystemExit("%s %s: %d %r" % (nm, qid, st, data[:300]))
                    docs.append(points(json.loads(data)))
                why, n, worst = compare(qid, docs[0], docs[1])
                if why:
                    raise SystemExit("bucketdb and influxd differ: " + why)
                nonnull = sum(1 for s in docs[0].values() for _, v in s if v is not None)
                checks.append((qid, n, nonnull, worst))
                log("check %s: %d points (%d with a value) equal, largest relative "
                    "difference %.3g" % (qid, n, nonnull, worst))

        # one fixed range for both PromQL peers, so that their answers can be compared
        prom_panels = promql_panels(int(time.time() * 1000), DAY, 30 * DAY)
        answers = {}
        for name in peers_wanted:
            p = started[name]
            runs = []
            if name in ("bucketdb", "influxd"):
                for qid, label, stmt, span in influxql_panels(DAY, 30 * DAY):
                    runs.append((name, qid, label + " (InfluxQL)",
                                 influx_path(stmt.format(tf="time >= now() - %s" %
                                                         ("24h" if span == DAY else "30d")))))
            if name in ("bucketdb", "vm"):
                pre = "/prometheus" if name == "bucketdb" else ""
                extra = {"tenant": DB} if name == "bucketdb" else (
                    {"nocache": 1} if a.vm_nocache else {})
                pname = "bucketdb-prom" if name == "bucketdb" else "vm"
                labels = {q: lab for q, lab, _, _ in influxql_panels(DAY, 30 * DAY)}
                for qid, q, params in prom_panels:
                    params = dict(params, **extra)
                    runs.append((pname, qid, labels[qid] + " (PromQL)", pre +
                                 "/api/v1/query_range?" + urllib.parse.urlencode(params)))
            for pname, qid, label, path in runs:
                if qid not in panels_wanted:
                    continue
                p50, p99, n, data, tier = timed(p, path, a.runs, a.warm, a.query_limit)
                size = len(data)
                answers[(pname, qid)] = data
                rows.append((pname, qid, label, p50, p99, n, size))
                if tier:
                    tiers[(pname, qid)] = tier
                log("%s %s: p50 %.3f ms, p99 %.3f ms (%d runs)%s" %
                    (pname, qid, p50, p99, n, " tier " + tier if tier else ""))
        for qid, _, _ in prom_panels:
            if ("vm", qid) in answers and ("bucketdb-prom", qid) in answers:
                pchecks.append((qid,) + compare_prom(answers[("vm", qid)],
                                                     answers[("bucketdb-prom", qid)]))
    finally:
        for p in started.values():
            p.stop()
        shutil.rmtree(work, ignore_errors=True)

    with open("/proc/meminfo") as f:
        mem = round(int(f.readline().split()[1]) / 1048576)
    print("grafana_bench on a %d-core %d GiB shared machine, load average %s" %
          (os.cpu_count(), mem, open("/proc/loadavg").read().split()[0]))
    print("data: %d devices x %d fields (site: %d values), %d d every %d s then %d h every "
          "%d s: %d samples per peer" % (a.devices, a.fields, a.sites, a.days, a.coarse,
                                         a.fine_hours, a.fine, nsamples))
    if a.vm_nocache:
        print("VictoriaMetrics queried with nocache=1 (its rollup result cache off)")
    if a.bdb_nocache:
        print("bucketdb started with --group-cache-bytes 0 (no kept group windows or steps)")
    print("load (per peer, its own request time): " + ", ".join(
        "%s %.1f s" % (n, started[n].load_s) for n in peers_wanted))
    print("%-14s %-8s %-34s %10s %10s %5s %8s  %s" %
          ("peer", "query", "panel", "p50 ms", "p99 ms", "runs", "bytes", "tier"))
    for pname, qid, label, p50, p99, n, size in rows:
        print("%-14s %-8s %-34s %10.3f %10.3f %5d %8d  %s" %
              (pname, qid, label, p50, p99, n, size, tiers.get((pname, qid), "")))
    by = {(pn, q): (p50, p99) for pn, q, _, p50, p99, _, _ in rows}
    for num, den, what in (("bucketdb", "influxd", "ratio bdb/influxd"),
                           ("bucketdb", "vm", "ratio bdb/VM"),
                           ("bucketdb-prom", "vm", "ratio bdb-prom/VM")):
        for qid in ("q24h", "q30d", "qtag24h", "qtag30d"):
            if (num, qid) in by and (den, qid) in by:
                b, v = by[(num, qid)], by[(den, qid)]
                print("%-18s %-8s %10.3fx %9.3fx" % (what, qid, b[0] / v[0], b[1] / v[1]))
    for line in goal_lines(by):
        print(line)
    for qid, n, nonnull, worst in checks:
        print("check bucketdb = influxd %-8s %6d points (%d with a value), largest "
              "relative difference %.3g" % (qid, n, nonnull, worst))
    for qid, why, n, worst in pchecks:
        print("check bucketdb-prom vs VM %-8s %s" % (qid, why or (
            "%6d points, largest relative difference %.3g" % (n, worst))))


if __name__ == "__main__":
    main()
