#!/usr/bin/env python3
"""What a Cassandra-backed server answers while Cassandra is away, and what its
/metrics say while it is not (issue 20's silent failures), against a real Apache
Cassandra 2.1.0 node.

ONE node is started for the whole file (cassnode.py) and stopped at the end; the
tests stop and restart it (a clean stop, SIGTERM). The tests:
- healthy_start_metrics: a start on a new keyspace and a restart on the same one
  leave bucketdb_cassandra_failures_total and errors_total at 0 (they read 14: one
  refused ALTER TABLE ... ADD per column that exists);
- export_cut_mid_stream: the node stops while two large exports stream (one read
  over HTTP, one by `bucketdb export`); the stream ends with the line
  "# bucketdb-export-error: ..." and no last chunk, never as a complete-looking short
  200; `bucketdb export` keeps the line, says why and exits 1; `bucketdb import` of
  such a file fails naming the line;
- outage_reads: with the node stopped, a raw query answers the head's samples with
  X-Bucketdb-Partial and "partial": true (JSON) or the header alone (CSV) instead of
  a 500, for a device with flushed samples and one whose samples were never flushed;
  tier, fleet, state and device answers (from the local files and index, which hold
  the same data) equal the answers before the outage and carry no partial marker;
  /api/v1/export answers 503 before its status line instead of a 200 that ends after
  0 bytes, and `bucketdb export` exits 1; PromQL answers 503 "unavailable"; after the
  node is back the raw answer is whole again, unmarked.

If Java or the Cassandra package is missing every test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_outage.py"""

import http.client
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import (BIN, Server, Suite, TestFailure, check, contains, eq,  # noqa: E402
                     run_bin, tmpdir)

suite = Suite("test_cassandra_outage", embedded_only="starts its own Cassandra node")
KS = "bdb_outage_it"
MIN, HOUR = 60000, 3600000
# Recent times: the tier files keep 1m windows 90 days, 1h windows a year.
T0 = (int(time.time() * 1000) // HOUR - 3) * HOUR
MARK = "# bucketdb-export-error: "


def cql(*stmts):
    return cassnode.cql(NODE, *stmts)


NODE = cassnode.Node("bucketdb-outage-", "bucketdb-outage-it",
                     cassnode.answers)


def node():
    return cassnode.running(NODE, TestFailure)


def cass_server(ks, extra_args=()):
    # A long flush interval: the test decides what leaves the head. offline_start and a
    # short request timeout: the outage answers come within seconds.
    uri = "cassandra://%s:%d/%s?consistency=ONE&offline_start=true&timeout_ms=2000" % (
        cassnode.ADDR, node().port, ks)
    return Server(args=["--storage", uri, "--flush-interval-ms", "1h"] + list(extra_args))


def cmetrics(server):
    out = {}
    for line in server.metrics_text().splitlines():
        if line.startswith("bucketdb_cassandra_"):
            name, _, v = line.rpartition(" ")
            out[name] = float(v)
    return out


def no_failures(server, when):
    m = cmetrics(server)
    for fam in ("bucketdb_cassandra_failures_total", "bucketdb_cassandra_errors_total",
                "bucketdb_cassandra_connect_failures_total"):
        eq(m.get(fam), 0.0, "%s %s" % (fam, when))
    check(m.get("bucketdb_cassandra_requests_total", 0) > 0, "no request counted: %r" % m)


def stop_node():
    NODE.kill(signal.SIGTERM)  # a clean stop: its confirmed rows stay for the restart


def start_node():
    check(NODE.start(same_ports=True), NODE.error or "node did not restart")


# ------------------------------------------------------------------ tests


@suite.test
def healthy_start_metrics():
    node()
    s = cass_server(KS + "_m").start()
    try:
        no_failures(s, "after a start that created the keyspace")
        s.write(["env,device=m1 t=1 %d" % T0], precision="ms")
        s.flush()
        eq(s.values(device="m1", **{"from": T0, "to": T0 + HOUR}), [(T0, "env.t", 1.0)])
        no_failures(s, "after a write, a flush and a read")
        s.restart()  # the keyspace and every column exist now
        no_failures(s, "after a restart on an existing keyspace")
        check("added " not in s.all_logs(), "a column was added to a keyspace made by "
              "this version: %s" % s.all_logs()[-2000:])
    finally:
        s.stop()


def lp_line(dev, pad, t, v):
    return "env,device=%s,pad=%s t=%r %d" % (dev, pad, v, t)


@suite.test
def export_cut_mid_stream():
    """A read that fails after the status line: the stream says so in its last line."""
    node()
    s = cass_server(KS + "_x").start()
    try:
        # Lines of about 1 KB (a long tag): 24,000 lines, about 24 MB, so the server
        # is still reading partitions when the node stops (a socket holds a few MB).
        pad = "p" * 900
        for d in range(12):
            lines = [lp_line("x%02d" % d, pad, T0 + i * 5000, float(i)) for i in range(2000)]
            s.write(lines, precision="ms")
        s.flush()
        # Not reading while the node stops leaves the server blocked on a full socket
        # (the kernel's default buffers hold a few MB) with most partitions unread.
        conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
        conn.request("GET", "/api/v1/export")
        r = conn.getresponse()
        eq(r.status, 200, "export status with the node up")
        first = r.read(64 * 1024)
        check(first.startswith(b"env,device=x00,"), "first bytes %r" % first[:80])
        # `bucketdb export` at the same time, paused the same way (its stdout unread)
        cli = subprocess.Popen([BIN, "export", "--server", "http://127.0.0.1:%d" % s.port,
                                "--token", s.token], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
        cli_first = cli.stdout.read(64 * 1024)
        check(cli_first.startswith(b"env,device=x00,"), "CLI first bytes %r" % cli_first[:80])
        stop_node()
        try:
            cli_rest, cli_err = cli.communicate(timeout=120)
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait()
        cli_err = cli_err.decode()
        eq(cli.returncode, 1, "bucketdb export cut by the server: %s" % cli_err)
        contains(cli_err, "the server could not complete the export: partial answer")
        cli_lines = (cli_first + cli_rest).decode().splitlines()
        check(cli_lines[-1].startswith(MARK), "bucketdb export's last line %r"
              % cli_lines[-1][:120])
        rest = b""
        cut = False
        deadline = time.monotonic() + 120
        try:
            while time.monotonic() < deadline:
                chunk = r.read(1 << 20)
                if not chunk:
                    break
                rest += chunk
        except http.client.IncompleteRead as e:  # no last chunk: a cut transfer
            rest += e.partial
            cut = True
        conn.close()
        body = (first + rest).decode()
        lines = body.splitlines()
        check(len(lines) < 24000, "the whole export arrived (%d lines): the server read "
              "every partition before the node stopped" % len(lines))
        check(lines and lines[-1].startswith(MARK),
              "the stream did not end with %r: last line %r, %d lines, cut %s"
              % (MARK, lines[-1][:120] if lines else None, len(lines), cut))
        contains(lines[-1], "partial answer")
        check(cut, "the failed stream ended with its last chunk, as a complete one does")
        check(all(ln.startswith("env,device=x") for ln in lines[:-1]), "a stray line")
        contains(s.log(), "stream ended early")
        # bucketdb import refuses the file, naming the marker's line
        d = tmpdir()
        path = os.path.join(d, "cut.lp")
        with open(path, "w") as f:
            f.write(body if body.endswith("\n") else body + "\n")
        start_node()
        imp = Server().start()
        try:
            rc, _, err = run_bin(["import", "--server", "http://127.0.0.1:%d" % imp.port,
                                  "--token", imp.token, path], timeout=300)
            eq(rc, 1, "import of a cut export: " + err)
            contains(err, "line %d: the export this file holds was cut short" % len(lines))
        finally:
            imp.stop()
    finally:
        s.stop()
        if not NODE.pid:
            start_node()


def tier_answer(s, dev, res):
    r = s.get("/api/v1/query", device=dev, resolution=res, **{"from": T0 - HOUR,
                                                              "to": T0 + 2 * HOUR})
    eq(r.status, 200, "resolution=%s of %s: %r" % (res, dev, r.body[:300]))
    check("x-bucketdb-partial" not in r.headers, "a tier answer marked partial")
    doc = r.json()
    check("partial" not in doc, "a tier answer marked partial: %r" % doc)
    return doc["values"]


def answers(s):
    """Tier, fleet, state and registry answers, which the local files and index give
    whole during an outage."""
    out = {}
    for dev in ("a", "b"):
        for res in ("1m", "1h"):
            out[(dev, res)] = tier_answer(s, dev, res)
    r = s.get("/api/v1/fleet", metric="env.t", resolution="1h",
              **{"from": T0 - HOUR, "to": T0 + 2 * HOUR})
    eq(r.status, 200, "fleet: %r" % r.body[:300])
    check("x-bucketdb-partial" not in r.headers, "fleet marked partial")
    out["fleet"] = r.json()["values"]
    for dev in ("a", "b"):
        r = s.get("/api/v1/state/latest", device=dev)
        eq(r.status, 200, "state of %s: %r" % (dev, r.body[:300]))
        out[("state", dev)] = r.json()
    r = s.get("/api/v1/state/devices", state="on")
    eq(r.status, 200, "devices in state on: %r" % r.body[:300])
    out["in_state"] = r.json()
    r = s.get("/api/v1/devices")
    eq(r.status, 200, "devices: %r" % r.body[:300])
    out["devices"] = r.json()
    return out


@suite.test
def outage_reads():
    node()
    s = cass_server(KS + "_r").start()
    try:
        # a: two samples flushed, one in the head; b: never flushed
        s.write(['env,device=a t=1,state="on" %d' % T0, "env,device=a t=2 %d" % (T0 + MIN)],
                precision="ms")
        s.flush()
        s.write(["env,device=a t=3 %d" % (T0 + 2 * MIN), 'env,device=b t=5,state="on" %d' % T0],
                precision="ms")
        rng = {"from": T0 - HOUR, "to": T0 + 2 * HOUR}
        eq(s.values(device="a", **rng), [(T0, "env.t", 1.0), (T0 + MIN, "env.t", 2.0),
                                         (T0 + 2 * MIN, "env.t", 3.0)])
        before = answers(s)
        eq([v[2] for v in before[("a", "1h")]], [3], "1h count of a")
        eq(before["in_state"]["total"], 2, "devices in state on")

        stop_node()
        # raw: the head's samples, marked partial
        for dev, want in (("a", [[T0 + 2 * MIN, "env.t", 3]]), ("b", [[T0, "env.t", 5]])):
            r = s.get("/api/v1/query", device=dev, **rng)
            eq(r.status, 200, "raw query of %s during the outage: %r" % (dev, r.body[:300]))
            eq(r.headers.get("x-bucketdb-partial"), "sink unavailable", "partial header")
            doc = r.json()
            eq(doc.get("partial"), True, "partial field: %r" % doc)
            eq(doc.get("partial_reason"), "sink unavailable", "partial reason")
            eq(doc["values"], want, "the head's samples of %s" % dev)
            eq(doc["count"], len(want))
        r = s.get("/api/v1/query", device="b", format="csv", **rng)
        eq(r.status, 200, "csv during the outage: %r" % r.body[:300])
        eq(r.headers.get("x-bucketdb-partial"), "sink unavailable", "csv partial header")
        eq(r.text, "time,metric,value\n%d,env.t,5\n" % T0)
        r = s.get("/api/v1/query", device="a", order="desc", limit="1", **rng)
        eq(r.status, 200, "desc limit 1: %r" % r.body[:300])
        eq(r.json()["values"], [[T0 + 2 * MIN, "env.t", 3]])
        eq(r.json().get("partial"), True, "desc limit 1 partial")
        # tiers, fleet, state, registry: whole from the local files and index
        during = answers(s)
        for k in before:
            eq(during[k], before[k], "%r during the outage" % (k,))
        # export: an error before the status line, not a 200 cut after 0 bytes
        r = s.get("/api/v1/export")
        eq(r.status, 503, "export during the outage: %r" % r.body[:300])
        contains(r.json()["error"], "export failed")
        eq(r.headers.get("retry-after"), "1", "Retry-After of the export's 503")
        rc, out, err = run_bin(["export", "--server", "http://127.0.0.1:%d" % s.port,
                                "--token", s.token], timeout=120)
        eq(rc, 1, "bucketdb export during the outage: %r %r" % (out[:200], err))
        contains(err, "HTTP 503")
        # PromQL: Prometheus' 503 "unavailable", never the head's part as the answer
        r = s.get("/prometheus/api/v1/query", query='env_t{device="a"}',
                  time="%.3f" % ((T0 + 2 * MIN + 1000) / 1000.0))
        eq(r.status, 503, "PromQL during the outage: %r" % r.body[:300])
        eq(r.json().get("errorType"), "unavailable", "PromQL errorType: %r" % r.body[:300])
        contains(r.json()["error"], "could not be read")

        start_node()
        deadline = time.monotonic() + 60
        while True:  # the session reconnects on the next request after its backoff
            r = s.get("/api/v1/query", device="a", **rng)
            if "x-bucketdb-partial" not in r.headers or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        eq(r.status, 200, "raw query after the node is back")
        check("x-bucketdb-partial" not in r.headers, "still partial after the node is back")
        doc = r.json()
        check("partial" not in doc, "partial field after the node is back: %r" % doc)
        eq(len(doc["values"]), 3, "a's samples after the node is back")
        r = s.get("/api/v1/export")
        eq(r.status, 200, "export after the node is back")
        eq(len(r.text.splitlines()), 4, "exported lines: %r" % r.text[:400])
    finally:
        if not NODE.pid:  # a failure during the outage: the clean stop flushes
            start_node()
        s.stop()


if __name__ == "__main__":
    cassnode.main(suite, NODE)
