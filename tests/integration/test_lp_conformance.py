#!/usr/bin/env python3
"""Line protocol against InfluxDB itself (issue 19, item 6): the same bodies go to
bucketdb and to Debian's influxd 1.6 (/usr/bin/influxd, started here on 127.0.0.1
with a temporary configuration and directories, nothing but HTTP), and what each
stored is compared:

- a quoted string holding newlines is one value, never lines of its own;
- a string holding a NUL byte is never stored cut short (influxd keeps it whole;
  bucketdb refuses the line, docs/API.md);
- `time` as a tag or field key is refused by both;
- two points of one series less than a millisecond apart are one sample in bucketdb
  (millisecond resolution), and the counters say one."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, http_request, tmpdir  # noqa: E402

suite = Suite("lp_conformance")
T0 = 1705327200000  # ms, 2024-01-15T14:00:00Z
INFLUXD = "/usr/bin/influxd"
START_WAIT = 60


def free_port():
    with socket.socket() as t:
        t.bind(("127.0.0.1", 0))
        return t.getsockname()[1]


class Influxd:
    """influxd 1.6 on loopback with auth off, its files in a temp dir; stopped by PID."""

    def __enter__(self):
        check(os.path.exists(INFLUXD), "%s missing: scripts/setup.sh --test installs influxdb"
              % INFLUXD)
        d = tmpdir("influxd-")
        self.port = free_port()
        conf = os.path.join(d, "influxdb.conf")
        with open(conf, "w") as f:
            f.write('reporting-disabled = true\n'
                    'bind-address = "127.0.0.1:%d"\n'
                    '[meta]\n  dir = "%s/meta"\n'
                    '[data]\n  dir = "%s/data"\n  wal-dir = "%s/wal"\n'
                    '  query-log-enabled = false\n'
                    '[http]\n  enabled = true\n  bind-address = "127.0.0.1:%d"\n'
                    '  auth-enabled = false\n  log-enabled = false\n'
                    '[monitor]\n  store-enabled = false\n'
                    '[subscriber]\n  enabled = false\n'
                    '[continuous_queries]\n  enabled = false\n'
                    % (free_port(), d, d, d, self.port))
        self.log = open(os.path.join(d, "influxd.log"), "w")
        self.proc = subprocess.Popen([INFLUXD, "run", "-config", conf], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_WAIT
        while True:
            check(self.proc.poll() is None, "influxd exited: see %s" % self.log.name)
            try:
                if http_request(self.port, "GET", "/ping", timeout=2).status == 204:
                    break
            except OSError:
                pass
            check(time.monotonic() < deadline, "influxd not up in %d s" % START_WAIT)
            time.sleep(0.2)
        eq(self.query("CREATE DATABASE conf", method="POST").status, 200)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.log.close()

    def query(self, q, method="GET"):
        path = "/query?" + urllib.parse.urlencode({"db": "conf", "q": q, "epoch": "ms"})
        return http_request(self.port, method, path)

    def write(self, body, precision="ms"):
        return http_request(self.port, "POST", "/write?db=conf&precision=" + precision,
                            body if isinstance(body, bytes) else body.encode())

    def rows(self, measurement):
        r = self.query('SELECT * FROM "%s"' % measurement)
        eq(r.status, 200, r.body[:300])
        series = r.json()["results"][0].get("series", [])
        if not series:
            return []
        cols = series[0]["columns"]
        return [dict(zip(cols, v)) for v in series[0]["values"]]


def bdb_write(s, body, precision="ms"):
    return s.request("POST", "/write?precision=" + precision,
                     body if isinstance(body, bytes) else body.encode())


def state_of(s, device):
    r = s.get("/api/v1/state/latest", device=device)
    if r.status == 404:
        return None
    eq(r.status, 200, r.body[:300])
    return r.json().get("state")


def metric_total(s, name, label):
    m = re.search(r"^%s\{%s\} (\d+)$" % (re.escape(name), re.escape(label)), s.metrics_text(),
                  re.M)
    check(m, "%s{%s} in /metrics" % (name, label))
    return int(m.group(1))


@suite.test
def newline_inside_a_quoted_string():
    # The text inside the quotes was stored as a point of its own (m f=2) with a 400.
    body = 'm,device=d1 state="a\nm,device=d1 f=2 %d\nb" %d\n' % (T0 + 5, T0)
    with Influxd() as ix, Server() as s:
        eq(ix.write(body).status, 204)
        rows = ix.rows("m")
        eq(len(rows), 1, rows)
        eq(rows[0]["state"], "a\nm,device=d1 f=2 %d\nb" % (T0 + 5))
        check(rows[0].get("f") is None, "influxd stored no f")
        r = bdb_write(s, body)
        eq(r.status, 204, r.body[:300])
        eq(state_of(s, "d1"), "a\nm,device=d1 f=2 %d\nb" % (T0 + 5))
        r = s.get("/api/v1/query", device="d1", metric="m.f", **{"from": T0, "to": T0 + 10})
        check(r.status == 404 or r.json()["count"] == 0, "m.f stored: %r" % r.body[:300])
        # An unterminated string runs to the end of the body in both: the lines after
        # it are not stored.
        bad = 'u,device=d2 state="open\nu,device=d2 f=1 %d\n' % T0
        eq(ix.write(bad).status, 400)
        eq(ix.rows("u"), [])
        r = bdb_write(s, bad)
        eq(r.status, 400)
        contains(r.json()["error"], "unbalanced quotes")
        eq(s.get("/api/v1/query", device="d2", metric="u.f", **{"from": T0,
                                                                 "to": T0 + 10}).status, 404)


@suite.test
def nul_inside_a_string_is_never_cut():
    # bdb stored state="a<NUL>b" as "a" with 204; influxd keeps all three bytes.
    body = b'n,device=d3 state="a\x00b" %d\n' % T0
    with Influxd() as ix, Server() as s:
        eq(ix.write(body).status, 204)
        eq(ix.rows("n")[0]["state"], "a\x00b")
        r = bdb_write(s, body)
        eq(r.status, 400, r.body[:300])
        contains(r.json()["error"], "NUL byte")
        eq(state_of(s, "d3"), None)


@suite.test
def time_is_no_tag_or_field_key():
    with Influxd() as ix, Server() as s:
        for line in ("t,device=d4 time=1 %d" % T0, "t,device=d4,time=x v=1 %d" % T0):
            r = ix.write(line + "\n")
            eq(r.status, 400, "influxd: %s (%r)" % (line, r.body[:200]))
            r = bdb_write(s, line + "\n")
            eq(r.status, 400, "bucketdb: %s (%r)" % (line, r.body[:200]))
            contains(r.json()["error"], '"time"')
        eq(ix.rows("t"), [])
        eq(s.get("/api/v1/devices").json()["count"], 0)


@suite.test
def sub_millisecond_points_count_once():
    # Two points 0.5 ms apart are one sample at millisecond resolution; the counters
    # said two were ingested.
    ns = T0 * 10**6
    body = "s,device=d5 v=1 %d\ns,device=d5 v=2 %d\n" % (ns, ns + 500000)
    with Server() as s:
        r = bdb_write(s, body, precision="ns")
        eq(r.status, 204, r.body[:300])
        vals = s.values(device="d5", **{"from": T0, "to": T0 + 10})
        eq(vals, [(T0, "s.v", 2.0)], "the later point wins")
        eq(metric_total(s, "bucketdb_samples_ingested_total", 'protocol="line"'), 1)
        eq(metric_total(s, "bucketdb_lines_total", 'result="accepted"'), 1)
        # in a partial write, `accepted` counts the lines kept
        r = bdb_write(s, body.replace("d5", "d6") + "s,device=d6 v=oops\n", precision="ns")
        eq(r.status, 400)
        doc = r.json()
        eq((doc["accepted"], doc["overridden"], doc["rejected"]), (1, 1, 1), doc)
        contains(doc["error"], "1 line(s) accepted, 1 overridden")
        eq(metric_total(s, "bucketdb_samples_ingested_total", 'protocol="line"'), 2)


if __name__ == "__main__":
    suite.main()
