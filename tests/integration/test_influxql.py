#!/usr/bin/env python3
"""InfluxQL on /query against the real InfluxDB 1.6 (Debian's /usr/bin/influxd): the same
generated fleet (20 devices, 2 tags, 3 fields, 3 hours at 10 s, one device with a gap)
is written to both and a list of statements (raw, GROUP BY time 1m/10m/1h/1d, tag
filters, GROUP BY tags, fill, order, limits, SHOW statements) must answer the same
(percentiles from a tier within the sketch's 1 %); the tier that answered is in
X-Bucketdb-Tier. Then the real clients: the influx CLI (-execute, -import, an
interactive `use`), python3-influxdb's InfluxDBClient and DataFrameClient (Debian's
/usr/bin/python3), and a replay of Grafana's requests (tests/fixtures/grafana/)."""

import json
import os
import pty
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import ON_CASSANDRA, Server, Suite, check, contains, eq  # noqa: E402
from bdbtest import http_request, tmpdir  # noqa: E402

suite = Suite("test_influxql")
INFLUXD = "/usr/bin/influxd"
INFLUX = "/usr/bin/influx"
MIN, HOUR, DAY = 60000, 3600000, 86400000
STEP = 10000
# Three hours ending at the start of the current hour: inside every retention, and
# "now() - 1h" still sees some of it.
T1 = (int(time.time() * 1000) // HOUR) * HOUR
T0 = T1 - 3 * HOUR
HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "fixtures", "grafana", "influxql.json")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Influxd:
    """Debian's influxd 1.6 on 127.0.0.1 with everything under a temp dir."""

    def __init__(self):
        self.dir = tmpdir("influxd-")
        self.port = free_port()
        rpc = free_port()
        conf = os.path.join(self.dir, "influxdb.conf")
        with open(conf, "w") as f:
            f.write("""reporting-disabled = true
bind-address = "127.0.0.1:%d"
[meta]
  dir = "%s/meta"
[data]
  dir = "%s/data"
  wal-dir = "%s/wal"
  query-log-enabled = false
[coordinator]
  max-select-point = 0
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
""" % (rpc, self.dir, self.dir, self.dir, self.port))
        self.log = open(os.path.join(self.dir, "influxd.log"), "wb")
        self.proc = subprocess.Popen([INFLUXD, "-config", conf], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if http_request(self.port, "GET", "/ping").status == 204:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise AssertionError("influxd did not start: see %s" % self.log.name)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        self.log.close()


def fleet_lines():
    rnd = random.Random(19)
    lines = []
    for d in range(20):
        site, model = "s%d" % (d % 3), "m%d" % (d % 4)
        t = T0
        while t < T1:
            # d19 misses 30 minutes in its second hour: fill(previous/linear) have a gap
            if not (d == 19 and T0 + HOUR + 10 * MIN <= t < T0 + HOUR + 40 * MIN):
                lines.append("env,device=d%02d,site=%s,model=%s temp=%r,hum=%r,volt=%r %d"
                             % (d, site, model, round(rnd.uniform(15, 30), 2),
                                round(rnd.gauss(50, 8), 3), round(rnd.uniform(3.0, 3.6), 4),
                                t))
            t += STEP
        # a second measurement of another naming: power (field value) every minute
        for t in range(T0, T1, MIN):
            lines.append("power,device=d%02d,site=%s,model=%s value=%r %d"
                         % (d, site, model, round(rnd.uniform(0, 500), 1), t))
    return lines


def write_all(port, lines, db):
    for i in range(0, len(lines), 5000):
        body = ("\n".join(lines[i:i + 5000]) + "\n").encode()
        r = http_request(port, "POST", "/write?db=%s&precision=ms" % db, body)
        eq(r.status, 204, "write to port %d (%r)" % (port, r.body[:300]))


def query(port, q, db="fleet", epoch="ms", method="GET"):
    params = {"db": db, "q": q}
    if epoch:
        params["epoch"] = epoch
    if method == "GET":
        return http_request(port, "GET", "/query?" + urllib.parse.urlencode(params))
    return http_request(port, "POST", "/query", urllib.parse.urlencode(params),
                        {"Content-Type": "application/x-www-form-urlencoded"})


def close(a, b, rel):
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
            return False
        return abs(a - b) <= rel * max(abs(a), abs(b), 1e-12)
    return a == b


def same(want, got, rel, path="results"):
    """want (influxd) and got (bucketdb) equal, numbers within rel: '' or why not."""
    if isinstance(want, dict) and isinstance(got, dict):
        if sorted(want) != sorted(got):
            return "%s: keys %s vs %s" % (path, sorted(want), sorted(got))
        for k in want:
            why = same(want[k], got[k], rel, path + "." + k)
            if why:
                return why
        return ""
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return "%s: %d items vs %d (%r... vs %r...)" % (path, len(want), len(got),
                                                           want[:3], got[:3])
        for i, (a, b) in enumerate(zip(want, got)):
            why = same(a, b, rel, "%s[%d]" % (path, i))
            if why:
                return why
        return ""
    if not close(want, got, rel):
        return "%s: %r vs %r" % (path, want, got)
    return ""


R = "time >= %dms AND time < %dms" % (T0, T1)
R10 = "time >= %dms AND time < %dms" % (T0 + 20 * MIN, T0 + 30 * MIN)
RH = "time >= %dms AND time < %dms" % (T0 + HOUR, T0 + 2 * HOUR)
RU = "time >= %dms AND time <= %dms" % (T0 + 37000, T1 - 13000)
D0 = T0 // DAY * DAY
RD = "time >= %dms AND time < %dms" % (D0, D0 + 2 * DAY)
# (statement, tier bucketdb must name or None, relative tolerance)
STATEMENTS = [
    ("SELECT temp FROM env WHERE device = 'd03' AND %s" % R10, "raw", 1e-12),
    ("SELECT temp, hum FROM env WHERE device = 'd03' AND %s ORDER BY time DESC LIMIT 7 "
     "OFFSET 2" % R10, "raw", 1e-12),
    ("SELECT * FROM env WHERE device =~ /^d0[12]$/ AND %s" % R10, "raw", 1e-12),
    ("SELECT value FROM power WHERE %s GROUP BY device, site" % R10, "raw", 1e-12),
    ("SELECT mean(temp), max(temp), min(temp), count(temp), sum(temp) FROM env WHERE %s "
     "GROUP BY time(1m)" % R, "1m", 1e-9),
    ("SELECT mean(temp), spread(hum), stddev(volt) FROM env WHERE %s GROUP BY time(10m), "
     "site" % R, "1m", 1e-9),
    ("SELECT count(temp), mean(hum) FROM env WHERE %s GROUP BY time(1h) fill(none)" % R,
     "fleet", 1e-9),
    ("SELECT count(volt), max(volt), mean(value) FROM env, power WHERE %s GROUP BY time(1d)"
     % RD, "fleet", 1e-9),
    ("SELECT first(temp), last(temp), median(hum), percentile(volt, 90) FROM env WHERE %s "
     "GROUP BY time(10m), model" % R, "raw", 1e-9),
    ("SELECT mean(temp) FROM env WHERE (site = 's1' OR model =~ /^m[12]$/) AND device != 'd04'"
     " AND %s GROUP BY time(30m)" % R, "1m", 1e-9),
    ("SELECT max(temp) FROM env WHERE site !~ /s0/ AND %s GROUP BY *" % R, "raw", 1e-9),
    ("SELECT max(temp) FROM env WHERE %s" % R, "raw", 1e-9),
    ("SELECT mean(*) FROM env WHERE %s GROUP BY site" % R, "raw", 1e-9),
    ("SELECT min(/^(temp|hum)$/) FROM env WHERE %s" % R, "raw", 1e-9),
    ("SELECT mean(temp) FROM env WHERE device = 'd19' AND %s GROUP BY time(5m) fill(previous)"
     % RH, "1m", 1e-9),
    ("SELECT mean(temp) FROM env WHERE device = 'd19' AND %s GROUP BY time(5m) fill(linear)"
     % RH, "1m", 1e-9),
    ("SELECT mean(temp), count(temp) FROM env WHERE device = 'd19' AND %s GROUP BY time(5m) "
     "fill(-1)" % RH, "1m", 1e-9),
    ("SELECT count(temp) FROM env WHERE device = 'd19' AND %s GROUP BY time(5m)" % RH, "1m",
     1e-9),
    ("SELECT mean(temp) FROM env WHERE %s GROUP BY time(1h), device ORDER BY time DESC LIMIT 2"
     % R, "1h", 1e-9),
    ("SELECT mean(temp) FROM env WHERE %s GROUP BY time(1h), device SLIMIT 3 SOFFSET 2" % R,
     "1h", 1e-9),
    ("SELECT mean(temp) AS t, max(temp) AS t FROM env WHERE %s GROUP BY time(1h, 15m)" % R,
     "1m", 1e-9),
    # percentiles from the sketches where InfluxDB's rank is the sketch's (360 samples an
    # hour), and from raw where it is not (6 a minute; a median of an even count)
    ("SELECT percentile(temp, 95), percentile(hum, 50), percentile(volt, 99) FROM env WHERE %s "
     "GROUP BY time(1h), device SLIMIT 4" % R, "1h", 0.0101),
    ("SELECT percentile(temp, 95) FROM env WHERE %s GROUP BY time(1m), device SLIMIT 2" % RH,
     "raw", 1e-12),
    ("SELECT median(hum) FROM env WHERE %s GROUP BY time(1h), device SLIMIT 2" % R, "raw",
     1e-12),
    # ranges off the tiers' edges: whole windows from the tier, the edges from raw
    ("SELECT mean(temp), count(hum), min(volt), max(volt), spread(temp), stddev(hum), "
     "sum(volt) FROM env WHERE %s GROUP BY time(10m), site" % RU, "1m", 1e-9),
    ("SELECT mean(temp), count(temp) FROM env WHERE %s GROUP BY time(1h) fill(none)" % RU,
     "fleet", 1e-9),
    ("SELECT max(hum), stddev(temp) FROM env WHERE model != 'm3' AND %s GROUP BY time(1h)" % RU,
     "1h", 1e-9),
    ("SELECT count(temp), mean(temp) FROM env WHERE time >= %dms GROUP BY time(30m)"
     % (T0 + 7 * MIN + 3000), "1m", 1e-9),
    ("SELECT mean(temp), count(temp) FROM env WHERE device = 'd19' AND time > %dms AND "
     "time <= %dms GROUP BY time(5m) fill(linear)" % (T0 + HOUR - 1, T0 + 2 * HOUR + 1), "1m",
     1e-9),
    ("SELECT percentile(temp, 95) FROM env WHERE %s GROUP BY time(1h), device SLIMIT 2" % RU,
     "raw", 1e-12),
    # conditions on field values: rows filtered on the fields at their time, from raw
    ("SELECT temp, hum FROM env WHERE device = 'd03' AND temp > 25 AND %s" % R10, "raw", 1e-12),
    ("SELECT mean(temp), count(hum) FROM env WHERE (hum < 45 OR 3.5 < volt) AND site = 's1' "
     "AND %s GROUP BY time(10m)" % R, "raw", 1e-9),
    ("SELECT count(temp) FROM env WHERE hum <= temp + 30 AND %s" % R, None, 0),
    ("SELECT max(volt) FROM env WHERE (temp = 20.5 OR volt != volt) AND %s GROUP BY site" % R,
     "raw", 1e-9),
    ("SELECT mean(value), max(temp) FROM /^(env|pow)/ WHERE device = 'd05' AND %s GROUP BY "
     "time(1h)" % R, "1h", 1e-9),
    ("SHOW MEASUREMENTS WHERE site = 's2'", None, 0),
    ("SHOW TAG KEYS FROM env WHERE site = 's1'", None, 0),
    ("SHOW MEASUREMENTS", None, 0),
    ("SHOW MEASUREMENTS LIMIT 1", None, 0),
    ("SHOW TAG KEYS FROM env", None, 0),
    ("SHOW TAG VALUES FROM env WITH KEY = site", None, 0),
    ("SHOW TAG VALUES WITH KEY IN (site, model)", None, 0),
    ("SHOW TAG VALUES FROM env WITH KEY = device WHERE site = 's1' LIMIT 3", None, 0),
    ("SHOW TAG VALUES FROM env WITH KEY =~ /^(site|model)$/ WHERE device =~ /d1[0-5]/", None, 0),
    ("SHOW FIELD KEYS FROM env", None, 0),
    ("SHOW SERIES FROM power WHERE model = 'm2'", None, 0),
]


def differences(ref_port, port, stmt, tier, rel, db="fleet"):
    """stmt on influxd and on bucketdb (both must answer 200): why the answers differ,
    and a tier other than the one wanted (None: any), as a list of texts."""
    want, got = query(ref_port, stmt, db=db), query(port, stmt, db=db)
    eq(want.status, 200, "influxd %s (%r)" % (stmt, want.body[:300]))
    eq(got.status, 200, "bucketdb %s (%r)" % (stmt, got.body[:300]))
    out = []
    why = same(want.json(), got.json(), rel)
    if why:
        out.append("%s\n    %s" % (stmt, why))
    if tier and got.headers.get("x-bucketdb-tier") != tier:
        out.append("%s\n    tier %r, want %r" % (stmt, got.headers.get("x-bucketdb-tier"), tier))
    return out


@suite.test
def test_same_answers_as_influxd():
    lines = fleet_lines()
    ref = Influxd()
    try:
        eq(query(ref.port, "CREATE DATABASE fleet", epoch=None, method="POST").status, 200)
        write_all(ref.port, lines, "fleet")
        with Server() as s:
            write_all(s.port, lines, "fleet")
            bad = []
            # from the head, then from block, tier and fleet files after a flush
            for stmt, tier, rel in STATEMENTS + [("flush", None, 0)] + STATEMENTS:
                if stmt == "flush":
                    s.flush()
                    continue
                bad += differences(ref.port, s.port, stmt, tier, rel)
            check(not bad, "%d of %d statements differ:\n  %s" % (len(bad), 2 * len(STATEMENTS),
                                                                 "\n  ".join(bad)))
            # several statements: every source that answered, once, in pyramid order
            r = query(s.port, "SELECT mean(temp) FROM env WHERE %s GROUP BY time(1h); "
                              "SELECT temp FROM env WHERE device = 'd01' AND %s; "
                              "SELECT max(temp) FROM env WHERE %s GROUP BY time(1h), site; "
                              "SELECT min(temp) FROM env WHERE %s GROUP BY time(1h)"
                      % (R, R10, R, R))
            eq(r.headers.get("x-bucketdb-tier"), "raw,1h,fleet")
            # RFC 3339 times when epoch is absent, and the same with POST form bodies
            stmt = "SELECT mean(temp) FROM env WHERE %s GROUP BY time(1h)" % R
            why = same(query(ref.port, stmt, epoch=None).json(),
                       query(s.port, stmt, epoch=None, method="POST").json(), 1e-9)
            check(not why, "RFC 3339 answer: " + why)
            for ep in ("s", "u", "ns"):
                why = same(query(ref.port, stmt, epoch=ep).json(),
                           query(s.port, stmt, epoch=ep).json(), 1e-9)
                check(not why, "epoch=%s: %s" % (ep, why))
    finally:
        ref.stop()


def wait_until(ok, step=0.1):
    """Sleeps until ok(now in ms) holds (bounded: the callers ask for a few seconds)."""
    deadline = time.monotonic() + 70
    while not ok(time.time() * 1000):
        check(time.monotonic() < deadline, "the clock never reached the wanted phase")
        time.sleep(step)


def live_fleet(prefix, ndev, in_a, hours, seed):
    """Devices <prefix>0.. (the first in_a of site a, the rest of b) reporting temp every
    STEP for the last `hours` hours up to now: (now, the last report's time, lines)."""
    now = int(time.time() * 1000)
    last = now // STEP * STEP
    rnd = random.Random(seed)
    lines = []
    for d in range(ndev):
        site = "a" if d < in_a else "b"
        for t in range(last - hours * HOUR, last + 1, STEP):
            lines.append("env,device=%s%d,site=%s temp=%r %d"
                         % (prefix, d, site, round(rnd.uniform(10, 30), 2), t))
    return now, last, lines


OPEN = [  # (statement, tier): ranges ending now, as Grafana sends them
    ("SELECT mean(temp), count(temp), max(temp), min(temp) FROM env WHERE site = 'a' AND "
     "time >= now() - 2h GROUP BY time(1h)", "1h"),
    ("SELECT mean(temp), count(temp), stddev(temp) FROM env WHERE site = 'b' AND "
     "time >= now() - 2h GROUP BY time(1h), device", "1h"),
    ("SELECT count(temp), sum(temp) FROM env WHERE time >= now() - 2h GROUP BY time(1h)",
     "fleet"),
    ("SELECT mean(temp), count(temp) FROM env WHERE device = 'e0' AND time >= now() - 30m "
     "GROUP BY time(1m)", "1m"),
    ("SELECT mean(temp), count(temp) FROM env WHERE device = 'e1' AND time >= now() - 30m "
     "GROUP BY time(1m)", "1m"),
    ("SELECT max(temp), spread(temp) FROM env WHERE time >= now() - 90m GROUP BY time(10m), "
     "device", "1m"),
]


@suite.test
def test_open_end_against_influxd():
    """`time >= now() - X` with no end: the window holding now comes whole from the tier
    when no sample of the device reaches now, from raw edges when one does (a sample up
    to max-future-ms ahead, which the answer must leave out): influxd's answers both
    ways, from the head and after a flush."""
    # the current minute and hour must stay current through the writes and queries
    wait_until(lambda t: t % MIN < MIN - 15000 and t % HOUR < HOUR - 15000, 0.5)
    now, last, lines = live_fleet("e", 4, 2, 3, 23)
    # e1: a sample later in the current minute; e3: one at the current hour's end
    lines.append("env,device=e1,site=a temp=99.5 %d" % (now // MIN * MIN + MIN - 1))
    lines.append("env,device=e3,site=b temp=-40.25 %d" % (now // HOUR * HOUR + HOUR - 1))
    ref = Influxd()
    try:
        eq(query(ref.port, "CREATE DATABASE live", epoch=None, method="POST").status, 200)
        write_all(ref.port, lines, "live")
        with Server() as s:
            write_all(s.port, lines, "live")
            bad = []
            for step in ("head", "flushed"):
                if step == "flushed":
                    s.flush()
                for stmt, tier in OPEN:
                    # not where now() - X falls within ms of a sample (10 s apart)
                    wait_until(lambda t: 300 < t % STEP < STEP - 300, 0.05)
                    bad += ["%s: %s" % (step, d)
                            for d in differences(ref.port, s.port, stmt, tier, 1e-9, db="live")]
            check(time.time() * 1000 < now // MIN * MIN + MIN,
                  "the minute passed before the queries ended: e1's sample was not ahead")
            check(not bad, "%d answers differ:\n  %s" % (len(bad), "\n  ".join(bad)))
    finally:
        ref.stop()


def series_values(r):
    eq(r.status, 200, r.body[:300])
    res = r.json()["results"][0]
    return [(ser.get("tags"), ser["values"]) for ser in res.get("series", [])]


@suite.test
def test_catalog_changes_show_at_once():
    """A tenant's catalog is kept from its second listing (catalog_cache_bytes): a new
    device, a device's new tags and a new metric show in the next statement, each
    asked three times so that it is answered from a kept catalog too."""
    t = T1 - HOUR
    rng = "time >= %dms AND time < %dms" % (t, t + HOUR)
    with Server() as s:
        def ask(q):
            out = [series_values(query(s.port, q, db="cc")) for _ in range(3)]
            eq(out[1], out[0], q)
            eq(out[2], out[0], q)
            return out[0]

        def write(lines):
            write_all(s.port, lines, "cc")

        sites = "SHOW TAG VALUES FROM env WITH KEY = site"
        counts = "SELECT count(temp) FROM env WHERE %s GROUP BY site" % rng
        write(["env,device=c1,site=a temp=1 %d" % t])
        eq(ask(sites), [(None, [["site", "a"]])])
        eq(ask(counts), [({"site": "a"}, [[t, 1]])])
        write(["env,device=c2,site=b temp=2 %d" % (t + 1000)])  # a new device
        eq(ask(sites), [(None, [["site", "a"], ["site", "b"]])])
        eq(ask(counts), [({"site": "a"}, [[t, 1]]), ({"site": "b"}, [[t, 1]])])
        write(["env,device=c1,site=b temp=3 %d" % (t + 2000)])  # c1's tags change
        eq(ask(sites), [(None, [["site", "b"]])])
        eq(ask(counts), [({"site": "b"}, [[t, 3]])])
        write(["env,device=c2,site=b hum=5 %d" % (t + 3000)])  # a new metric
        eq(ask("SHOW FIELD KEYS FROM env"),
           [(None, [["hum", "float"], ["temp", "float"]])])
        hits = re.search(r"^bucketdb_catalog_cache_hits_total (\d+)$", s.metrics_text(), re.M)
        check(hits and int(hits.group(1)) >= 8 or ON_CASSANDRA,
              "statements answered from a kept catalog: %r" % (hits and hits.group(0)))


GROUPED = [  # (statement, tier): tag groups over ranges ending now, as Grafana's panels
    ("SELECT mean(temp), count(temp), max(temp), stddev(temp) FROM env WHERE site = 'a' AND "
     "time >= now() - 3h GROUP BY time(10m)", "1m"),
    ("SELECT mean(temp), min(temp), sum(temp) FROM env WHERE site =~ /a|b/ AND "
     "time >= now() - 3h GROUP BY time(1h), site", "1h"),
]


@suite.test
def test_group_cache_against_influxd():
    """Statements over tag groups keep their settled windows (group_cache_bytes): each
    asked three times equals influxd's answer every time, and so after a late sample
    lands in a kept window (the next statement reads it) and after a new device joins
    the group."""
    wait_until(lambda t: t % HOUR < HOUR - 60000, 0.5)
    now, last, lines = live_fleet("g", 6, 4, 4, 29)
    ref = Influxd()
    try:
        eq(query(ref.port, "CREATE DATABASE grp", epoch=None, method="POST").status, 200)
        write_all(ref.port, lines, "grp")
        with Server() as s:
            write_all(s.port, lines, "grp")
            s.flush()

            def ask_all(when):
                bad = []
                for stmt, tier in GROUPED:
                    for _ in range(3):
                        wait_until(lambda t: 300 < t % STEP < STEP - 300, 0.05)
                        bad += ["%s: %s" % (when, d) for d in
                                differences(ref.port, s.port, stmt, tier, 1e-9, db="grp")]
                check(not bad, "%d answers differ:\n  %s" % (len(bad), "\n  ".join(bad)))

            ask_all("written")
            hits = metric_value(s, "bucketdb_group_cache_hits_total")
            check(hits >= 2 or ON_CASSANDRA, "no statement answered from kept windows")
            # late: two hours back, inside a kept window of both statements
            late = ["env,device=g1,site=a temp=500.5 %d" % (last - 2 * HOUR + 5000)]
            write_all(ref.port, late, "grp")
            write_all(s.port, late, "grp")
            ask_all("late sample")
            # a new device of site a, with samples of the last hour only
            new = ["env,device=g9,site=a temp=7.25 %d" % t
                   for t in range(last - HOUR + 5000, last + 1, 60000)]
            write_all(ref.port, new, "grp")
            write_all(s.port, new, "grp")
            ask_all("new device")
            check(metric_value(s, "bucketdb_group_cache_hits_total") >= hits + 4 or ON_CASSANDRA,
                  "kept windows not used after the changes")
    finally:
        ref.stop()


def metric_value(s, name):
    m = re.search(r"^%s (\d+)$" % name, s.metrics_text(), re.M)
    check(m is not None, "%s missing from /metrics" % name)
    return int(m.group(1))


@suite.test
def test_errors_and_limits():
    with Server(args=["--max-query-samples", "1000"]) as s:
        write_all(s.port, fleet_lines()[:3000], "fleet")
        r = query(s.port, "SELEC temp FROM env")
        eq(r.status, 400)
        contains(r.json()["error"], "error parsing query: found SELEC, expected SELECT")
        contains(r.headers.get("x-influxdb-error", ""), "error parsing query")
        r = query(s.port, "SELECT temp FROM env tz('Europe/Paris')")
        eq(r.status, 400)
        contains(r.json()["error"], "tz() is not supported")
        # more samples than max_query_samples: InfluxDB's statement error shape
        r = query(s.port, "SELECT temp FROM env")
        eq(r.status, 200)
        res = r.json()["results"][0]
        eq(res["statement_id"], 0)
        contains(res["error"], "max-select-point limit exceeded")
        contains(res["error"], "max_query_samples 1000")
        r = query(s.port, "SHOW TAG VALUES WITH KEY = site WHERE temp > 20")
        contains(r.json()["results"][0]["error"], "conditions on field values")
        r = query(s.port, "SELECT mean(temp) FROM env WHERE time > now() - 1h OR "
                          "time < now() - 2h GROUP BY time(1m)")
        contains(r.json()["results"][0]["error"], "joined by OR")
        r = query(s.port, "SELECT mean(temp) FROM env GROUP BY time(1h)", epoch="d")
        eq(r.status, 400)
        contains(r.json()["error"], "invalid 'epoch'")
        r = http_request(s.port, "GET", "/query?db=fleet")
        eq(r.status, 400)
        contains(r.json()["error"], "missing required parameter \"q\"")
        # a failed statement stops the ones after it, as InfluxDB
        doc = query(s.port, "SHOW MEASUREMENTS; SELECT temp FROM env; SHOW DATABASES").json()
        eq(len(doc["results"]), 2)
        # chunked: one JSON object per statement
        r = http_request(s.port, "GET", "/query?" + urllib.parse.urlencode(
            {"db": "fleet", "chunked": "true", "q": "SHOW MEASUREMENTS; SHOW FIELD KEYS"}))
        objs = [json.loads(x)["results"][0] for x in r.text.strip().split("\n")]
        # SHOW FIELD KEYS has a series per measurement: one chunk each, partial but the last
        eq([(o["statement_id"], o.get("partial", False)) for o in objs],
           [(0, False), (1, True), (1, False)])
        # an offset past the end leaves no empty series behind
        eq(query(s.port, "SHOW SERIES LIMIT 1 OFFSET 1000000000").json(),
           {"results": [{"statement_id": 0}]})
        r = query(s.port, "SELECT temp FROM env WHERE time > '1677-09-21T00:12:43Z'")
        contains(r.json()["results"][0]["error"], "outside the times bucketdb holds")
        r = query(s.port, "SELECT mean(temp) FROM env GROUP BY time(300000w)")
        eq(r.status, 400)
        contains(r.json()["error"], "invalid duration")
        # ON another database than the request's
        doc = query(s.port, "SHOW TAG KEYS ON other").json()
        contains(doc["results"][0]["error"], "database not found: other")


EXTREMES = [
    "SELECT temp FROM env WHERE time > -9223372036854775808",
    "SELECT temp FROM env WHERE time < 9223372036854775807 AND time > 9223372036854775806",
    "SELECT mean(temp) FROM env WHERE time > now() - 300000w GROUP BY time(1ms)",
    "SELECT mean(temp) FROM env WHERE time > now() - 106751d GROUP BY time(1h)",
    "SELECT mean(temp) FROM env WHERE time > now() + 9223372036854775807ns",
    "SELECT mean(temp) FROM env WHERE time >= '1677-09-21T00:12:43Z' GROUP BY time(1d)",
    "SELECT mean(temp) FROM env WHERE time >= '0001-01-01T00:00:00Z' AND time < '9999-12-31T23:59:59Z' GROUP BY time(1w)",
    "SELECT mean(temp) FROM env GROUP BY time(1ns)",
    "SELECT mean(temp) FROM env GROUP BY time(9223372036854775807ns)",
    "SELECT mean(temp) FROM env WHERE time > 0 GROUP BY time(1h, -9223372036854775807ns)",
    "SELECT mean(temp) FROM env GROUP BY time(1h, 9223372036854775807ns) fill(linear)",
    "SELECT temp FROM env LIMIT 1000000000 OFFSET 1000000000 SLIMIT 1000000000 SOFFSET 1000000000",
    "SELECT percentile(temp, 0), percentile(temp, 100), percentile(temp, 0.0001) FROM env",
    "SELECT mean(temp) FROM env fill(1e300)",
    "SELECT mean(temp) FROM env WHERE time = 1795842000000ms",
    "SELECT * FROM /.*/, /a|b/, \"\" WHERE \"\" = '' OR x !~ /$^/",
    "SHOW TAG VALUES WITH KEY !~ /.*/",
    "SHOW SERIES LIMIT 0 OFFSET 1000000000",
    "SELECT count(*) FROM env GROUP BY *, device, site ORDER BY time DESC",
]


@suite.test
def test_extreme_values():
    """Times at and past the int64 ns range, intervals of 1 ns and of 292 years, offsets,
    limits at their maximum: an answer or a statement error, never a 5xx, a crash or a
    sanitizer report (the server's log is checked when it stops)."""
    with Server(args=["--max-query-samples", "100000"]) as s:
        write_all(s.port, fleet_lines()[:4000], "fleet")
        for q in EXTREMES:
            r = query(s.port, q)
            check(r.status in (200, 400), "%s: %d %r" % (q, r.status, r.body[:300]))
            r.json()


def tenant_token(s, name):
    r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name, "quotas": {}}),
                  {"Authorization": "Token " + s.token, "Content-Type": "application/json"})
    eq(r.status, 201, "create tenant %s (%r)" % (name, r.body[:200]))
    return r.json()["token"]


@suite.test
def test_on_database():
    """ON <db> in a request naming no database (the influx CLI before `use`) reads that
    tenant under the usual rules: the admin token any, a tenant token only its own; with
    db= naming another database it is an error."""
    with Server(args=["--auth", "on"]) as s:
        ta, tb = tenant_token(s, "alpha"), tenant_token(s, "beta")
        r = s.request("POST", "/write?precision=ms", "env,device=d1 temp=1 %d" % T0,
                      {"Authorization": "Token " + ta})
        eq(r.status, 204)

        def show(token, db=None):
            q = {"q": "SHOW MEASUREMENTS ON alpha"}
            if db:
                q["db"] = db
            r = http_request(s.port, "GET", "/query?" + urllib.parse.urlencode(q),
                             headers={"Authorization": "Token " + token})
            eq(r.status, 200, r.text)
            return r.json()["results"][0]

        eq(show(s.token)["series"][0]["values"], [["env"]])
        eq(show(ta)["series"][0]["values"], [["env"]])
        res = show(tb)
        check("series" not in res, res)
        contains(res["error"], "forbidden: the token belongs to tenant 'beta'")
        contains(show(tb, db="beta")["error"], "database not found: alpha")


def run_cli(port, args, stdin=None):
    p = subprocess.run([INFLUX, "-host", "127.0.0.1", "-port", str(port)] + args,
                       input=stdin, capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


@suite.test
def test_influx_cli():
    lines = fleet_lines()
    ref = Influxd()
    try:
        query(ref.port, "CREATE DATABASE fleet", epoch=None, method="POST")
        write_all(ref.port, lines, "fleet")
        with Server() as s:
            write_all(s.port, lines, "fleet")
            stmts = ["SELECT mean(temp) FROM env WHERE time > now() - 1h GROUP BY time(5m)",
                     "SELECT count(hum) FROM env WHERE %s GROUP BY site" % R,
                     "SHOW TAG VALUES WITH KEY = model", "SHOW DATABASES"]
            for st in stmts:
                for fmt in ("column", "csv", "json"):
                    rc, out, err = run_cli(s.port, ["-database", "fleet", "-format", fmt,
                                                    "-execute", st])
                    eq(rc, 0, "influx -execute %r: %s" % (st, err))
                    if st == "SHOW DATABASES":
                        contains(out, "fleet")
                        continue
                    rc2, out2, _ = run_cli(ref.port, ["-database", "fleet", "-format", fmt,
                                                      "-execute", st])
                    if fmt == "json":
                        why = same(json.loads(out2), json.loads(out), 1e-9)
                        check(not why, "%s json: %s" % (st, why))
                    elif "count" in st or "SHOW" in st:
                        eq(out, out2, "influx -format %s -execute %r" % (fmt, st))
            # ON before any `use`
            st = "SHOW TAG KEYS ON fleet FROM env"
            rc, out, err = run_cli(s.port, ["-execute", st])
            eq(rc, 0, err)
            eq(out, run_cli(ref.port, ["-execute", st])[1], st)
            # interactive: `use fleet` checks SHOW DATABASES
            out = interactive(s.port, ["use fleet", "SELECT count(volt) FROM env WHERE " + R,
                                       "INSERT cli,device=typed v=7 %d" % (T0 * 1000000),
                                       "exit"])
            check("DB does not exist" not in out, out)
            contains(out, "Using database fleet")
            contains(out, "%d" % (20 * 3 * 360 - 180))
            # an INSERT after `use` lands in that database (tenant), nowhere else
            doc = query(s.port, "SELECT v FROM cli", db="fleet").json()
            eq(doc["results"][0]["series"][0]["values"], [[T0, 7]], "the INSERT in fleet")
            doc = query(s.port, "SELECT v FROM cli", db="default").json()
            eq(doc["results"][0].get("series"), None, "the INSERT not in default")
            # -import of a file in the CLI's format
            d = tmpdir("import-")
            path = os.path.join(d, "in.txt")
            with open(path, "w") as f:
                f.write("# DML\n# CONTEXT-DATABASE: imported\n")
                for i in range(50):
                    f.write("cpu,device=h%d usage=%d.5 %d\n" % (i % 5, i, (T0 + i * 1000) * 1000000))
            rc, out, err = run_cli(s.port, ["-import", "-path", path])
            eq(rc, 0, out + err)
            doc = query(s.port, "SELECT count(usage) FROM cpu GROUP BY device", db="imported").json()
            eq([v["values"][0][1] for v in doc["results"][0]["series"]], [10] * 5)
    finally:
        ref.stop()


def interactive(port, commands):
    """An interactive influx session on a pseudo-terminal (the CLI runs stdin that is
    not a terminal as one query): each command after the prompt; the output."""
    master, slave = pty.openpty()
    p = subprocess.Popen([INFLUX, "-host", "127.0.0.1", "-port", str(port)], stdin=slave,
                         stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    pending = list(commands)
    try:
        while time.monotonic() < deadline and p.poll() is None:
            r, _, _ = select.select([master], [], [], 0.2)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                out += chunk
            if pending and out.rstrip().endswith(b">"):
                os.write(master, pending.pop(0).encode() + b"\n")
                out += b"\n"
        eq(p.wait(timeout=max(1, deadline - time.monotonic())), 0, out.decode())
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        os.close(master)
    return out.decode("utf-8", "replace")


CLIENT = r"""
import json, sys
from influxdb import InfluxDBClient, DataFrameClient
port, ref, stmt, tok = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {}
for name, p in (("bdb", port), ("ref", ref)):
    # bucketdb reads the password as a token; influxd (auth off) ignores it
    c = InfluxDBClient("127.0.0.1", p, username="u", password=tok, database="fleet")
    rs = c.query(stmt, epoch="ms")
    out[name] = {"points": list(rs.get_points()), "dbs": [d["name"] for d in c.get_list_database()],
                 "meas": [m["name"] for m in c.get_list_measurements()]}
    df = DataFrameClient("127.0.0.1", p, username="u", password=tok, database="fleet").query(stmt)
    frame = df["env"]
    out[name]["df"] = [len(frame), list(frame.columns), [str(t) for t in frame.index[:3]],
                       [float(x) for x in frame.iloc[:, 0][:3]]]
print(json.dumps(out))
"""


@suite.test
def test_python_influxdb_client():
    if not os.path.exists("/usr/bin/python3"):
        raise AssertionError("/usr/bin/python3 missing (setup.sh --test installs it)")
    lines = fleet_lines()
    ref = Influxd()
    try:
        query(ref.port, "CREATE DATABASE fleet", epoch=None, method="POST")
        write_all(ref.port, lines, "fleet")
        with Server() as s:
            write_all(s.port, lines, "fleet")
            stmt = "SELECT mean(temp), max(hum) FROM env WHERE %s GROUP BY time(10m)" % R
            p = subprocess.run(["/usr/bin/python3", "-c", CLIENT, str(s.port), str(ref.port), stmt,
                                s.token],
                               capture_output=True, timeout=120)
            eq(p.returncode, 0, p.stderr.decode()[-2000:])
            doc = json.loads(p.stdout)
            why = same(doc["ref"]["points"], doc["bdb"]["points"], 1e-9)
            check(not why, "InfluxDBClient points: " + why)
            eq(doc["bdb"]["df"][:3], doc["ref"]["df"][:3], "DataFrameClient frame")
            why = same(doc["ref"]["df"][3], doc["bdb"]["df"][3], 1e-9)
            check(not why, "DataFrameClient values: " + why)
            eq(doc["bdb"]["meas"], doc["ref"]["meas"])
            check("fleet" in doc["bdb"]["dbs"], doc["bdb"]["dbs"])
    finally:
        ref.stop()


@suite.test
def test_grafana_replay():
    """Grafana's InfluxQL requests (Save & test, template variables, a panel with
    $__interval substituted): status, shape and the tier header."""
    with open(FIXTURE) as f:
        fx = json.load(f)
    with Server() as s:
        write_all(s.port, fleet_lines(), "fleet")
        for req in fx["requests"]:
            params = dict(req["params"])
            params["q"] = params["q"].replace("$FROM", str(T0)).replace("$TO", str(T1))
            if req.get("method", "GET") == "POST":
                r = http_request(s.port, "POST", "/query?db=" + params.pop("db"),
                                 urllib.parse.urlencode(params),
                                 {"Content-Type": "application/x-www-form-urlencoded"})
            else:
                r = http_request(s.port, "GET", "/query?" + urllib.parse.urlencode(params))
            eq(r.status, req["status"], "%s (%r)" % (req["name"], r.body[:300]))
            doc = r.json()
            res = doc["results"][0]
            check("error" not in res, "%s: %r" % (req["name"], res))
            series = res.get("series", [])
            check(len(series) >= req["min_series"], "%s: %d series" % (req["name"], len(series)))
            for sr in series:
                eq(sr["columns"], req["columns"], req["name"])
                if "tags" in req:
                    eq(sorted(sr.get("tags", {})), req["tags"], req["name"])
                for row in sr["values"]:
                    if req["params"].get("epoch") == "ms" and req["columns"][0] == "time":
                        check(isinstance(row[0], int), "%s: time %r" % (req["name"], row[0]))
            if "tier" in req:
                eq(r.headers.get("x-bucketdb-tier"), req["tier"], req["name"])


if __name__ == "__main__":
    suite.main()
