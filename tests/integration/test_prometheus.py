#!/usr/bin/env python3
"""Self-monitoring: /metrics as a real Prometheus sees it.

- Debian's `prometheus` (installed by scripts/setup.sh) scrapes bucketdb's /metrics
  every second from a temporary configuration on 127.0.0.1; the target must become
  healthy, and bucketdb's metrics (per-tenant ingestion counters, the latency
  histogram, the backpressure counters) must be queryable through Prometheus's HTTP
  API with the values bucketdb reports. Missing prometheus is a failure that says
  how to install it, never a skip.
- The server has a registered tenant, so /metrics takes the admin token
  (metrics_auth = auto): the scrape sends it as `authorization: {type: Bearer,
  credentials: ...}`, the way docs/OPERATIONS.md shows; a second job scraping with
  the tenant's token is refused (target down, 403).
- `promtool check metrics` (same package) accepts the exposition.
- Every metric family named in the metrics reference of docs/API.md is exposed, and
  per-tenant labels stay bounded: registered tenants plus one "(other)" series,
  however many unregistered tenants write.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, TestFailure, check, contains, eq, tmpdir  # noqa: E402
from bdbtest import ON_CASSANDRA  # noqa: E402

suite = Suite("prometheus")
T0 = 1705327200000
WAIT = float(os.environ.get("BDB_PROM_WAIT", "45"))  # bound of every wait
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALL_HINT = ("run scripts/setup.sh, which installs Debian's 'prometheus' package "
                "(apt-get install prometheus)")


def tool(name):
    path = shutil.which(name) or ("/usr/bin/" + name if os.path.exists("/usr/bin/" + name)
                                  else None)
    if not path:
        raise TestFailure("%s not found: %s" % (name, INSTALL_HINT))
    return path


def free_port():
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def http_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def tok(t):
    return {"Authorization": "Token " + t}


class Prometheus:
    """The prometheus binary on 127.0.0.1, scraping one target every second."""

    def __init__(self, target_port, token=None, tenant_token=None):
        self.dir = tmpdir("bdbprom-")
        self.port = None
        self.proc = None
        self.log_path = os.path.join(self.dir, "prometheus.log")
        self.config = os.path.join(self.dir, "prometheus.yml")
        with open(self.config, "w") as f:
            f.write("global:\n"
                    "  scrape_interval: 1s\n"
                    "  evaluation_interval: 1s\n"
                    "scrape_configs:\n"
                    "  - job_name: bucketdb\n"
                    "    scrape_interval: 1s\n"
                    "    scrape_timeout: 1s\n"
                    "    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % target_port)
            # the bearer token of docs/OPERATIONS.md (Authorization: Bearer <token>)
            for job, t in (("bucketdb", token), ("bucketdb-tenant", tenant_token)):
                if not t:
                    continue
                if job != "bucketdb":
                    f.write("  - job_name: %s\n"
                            "    scrape_interval: 1s\n"
                            "    scrape_timeout: 1s\n"
                            "    static_configs:\n"
                            "      - targets: ['127.0.0.1:%d']\n" % (job, target_port))
                f.write("    authorization:\n"
                        "      type: Bearer\n"
                        "      credentials: %s\n" % t)

    def start(self):
        binary = tool("prometheus")
        for attempt in range(3):  # the port is picked free, but may be taken meanwhile
            self.port = free_port()
            cmd = [binary, "--config.file=" + self.config,
                   "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
                   "--web.listen-address=127.0.0.1:%d" % self.port,
                   "--storage.tsdb.retention.time=1h", "--log.level=warn"]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=log,
                                             stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + WAIT
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    with urllib.request.urlopen(self.url("/-/ready"), timeout=2) as r:
                        if r.status == 200:
                            return self
                except OSError:
                    pass
                time.sleep(0.1)
            self.stop()
        raise TestFailure("prometheus did not become ready:\n" + self.log())

    def url(self, path, **params):
        q = urllib.parse.urlencode(params)
        return "http://127.0.0.1:%d%s%s" % (self.port, path, "?" + q if q else "")

    def query(self, expr):
        doc = http_json(self.url("/api/v1/query", query=expr))
        eq(doc["status"], "success", "query %s" % expr)
        return doc["data"]["result"]

    def wait_value(self, expr, want):
        """Waits until the instant query returns one series whose value equals want."""
        deadline = time.monotonic() + WAIT
        last = None
        while time.monotonic() < deadline:
            last = self.query(expr)
            if len(last) == 1 and float(last[0]["value"][1]) == want:
                return last[0]
            time.sleep(0.25)
        raise TestFailure("Prometheus query %s: want %r, last answer %r\n%s"
                          % (expr, want, last, self.log()[-2000:]))

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self.proc = None


def metric_value(text, series):
    for ln in text.splitlines():
        if ln.startswith(series + " "):
            return float(ln.split()[-1])
    raise TestFailure("%s not in /metrics" % series)


@suite.test
def prometheus_scrapes_bucketdb():
    tool("prometheus")  # fail early, with the reason, when it is missing
    with Server() as s:
        # A registered tenant writes; an unregistered one too.
        r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": "acme"}),
                      tok(s.token))
        eq(r.status, 201, "create tenant (%r)" % r.body[:200])
        acme = r.json()["token"]
        lines = "\n".join("env,device=d%d temp=%d %d" % (i % 5, i, T0 + i) for i in range(50))
        r = s.request("POST", "/write?precision=ms", lines, tok(acme))
        eq(r.status, 204, "acme write (%r)" % r.body[:200])
        s.write("env,device=x temp=1 %d" % T0, precision="ms", db="someone")
        # a registered tenant: /metrics takes the admin token (metrics_auth = auto)
        eq(s.get("/metrics").status, 401, "/metrics without a token")
        prom = Prometheus(s.port, token=s.token, tenant_token=acme)
        try:
            prom.start()
            deadline = time.monotonic() + WAIT
            targets = None
            while time.monotonic() < deadline:
                targets = {t["labels"]["job"]: t for t in
                           http_json(prom.url("/api/v1/targets"))["data"]["activeTargets"]}
                if (targets.get("bucketdb", {}).get("health") == "up" and
                        targets.get("bucketdb-tenant", {}).get("health") == "down"):
                    break
                time.sleep(0.25)
            else:
                raise TestFailure("the bucketdb target never became healthy (and the "
                                  "tenant-token one down): %r\n%s" % (targets, prom.log()[-2000:]))
            eq(targets["bucketdb"]["scrapeUrl"], "http://127.0.0.1:%d/metrics" % s.port)
            eq(targets["bucketdb"]["lastError"], "", "scrape error")
            contains(targets["bucketdb-tenant"]["lastError"], "403")
            prom.wait_value('up{job="bucketdb"}', 1)
            prom.wait_value('up{job="bucketdb-tenant"}', 0)
            prom.wait_value('bucketdb_tenant_samples_ingested_total{tenant="acme"}', 50)
            prom.wait_value('bucketdb_tenant_write_requests_total{tenant="acme"}', 1)
            prom.wait_value('bucketdb_tenant_samples_ingested_total{tenant="(other)"}', 1)
            prom.wait_value('bucketdb_write_duration_seconds_count', 2)
            prom.wait_value('bucketdb_backpressure_events_total{reason="inflight_bytes"}', 0)
            prom.wait_value('bucketdb_inflight_request_bytes_limit', 256 * 1024 * 1024)
            # More writes show up at the next scrapes.
            r = s.request("POST", "/write?precision=ms",
                          "env,device=d0 temp=1 %d" % (T0 + 1000), tok(acme))
            eq(r.status, 204)
            prom.wait_value('bucketdb_tenant_samples_ingested_total{tenant="acme"}', 51)
            # The latency histogram works as one: a p99 over it is a number.
            res = prom.query('histogram_quantile(0.99, bucketdb_write_duration_seconds_bucket)')
            eq(len(res), 1, "p99 series")
            check(0 < float(res[0]["value"][1]) <= 2.5, "p99 %r" % res)
        finally:
            prom.stop()


@suite.test
def promtool_accepts_the_exposition():
    promtool = tool("promtool")
    with Server() as s:
        s.write("env,device=d temp=1 %d" % T0, precision="ms")
        text = s.metrics_text()
        p = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                           capture_output=True, timeout=60)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        eq(p.returncode, 0, "promtool check metrics: %s" % out)
        eq(out.strip(), "", "promtool findings")


def documented_metrics():
    """Metric names in the first column of the metrics reference in docs/API.md."""
    with open(os.path.join(ROOT, "docs", "API.md")) as f:
        doc = f.read()
    m = re.search(r"^## Metrics reference\n(.*?)(?=^## )", doc, re.M | re.S)
    check(m, "docs/API.md has no '## Metrics reference' section")
    names = set()
    for ln in m.group(1).splitlines():
        if not ln.startswith("| `"):
            continue
        first = ln.split("|")[1]
        for name in re.findall(r"`([a-z_]+)(?:\{[^`]*\})?`", first):
            names.add(name)
    check(len(names) > 20, "too few metrics documented: %r" % sorted(names))
    return names


@suite.test
def every_documented_metric_is_exposed_with_bounded_labels():
    with Server() as s:
        r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": "acme"}),
                      tok(s.token))
        eq(r.status, 201)
        acme = r.json()["token"]
        eq(s.request("POST", "/write?precision=ms", "m,device=a v=1 %d" % T0,
                     tok(acme)).status, 204)
        # 40 unregistered tenants: one "(other)" series, not 40.
        for i in range(40):
            s.write("m,device=x v=%d %d" % (i, T0), precision="ms", db="anon%d" % i)
        text = s.metrics_text()
        families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        # bucketdb_cassandra_* exist only with --storage cassandra://, where every
        # documented one must be there (their values: test_cassandra_backend.py).
        documented = documented_metrics()
        missing = sorted(n for n in documented if n not in families and
                         (ON_CASSANDRA or not n.startswith("bucketdb_cassandra_")))
        if not ON_CASSANDRA:
            eq(sorted(n for n in families if n.startswith("bucketdb_cassandra_")), [],
               "Cassandra metrics on an embedded server")
        eq(missing, [], "documented metrics missing from /metrics")
        tenants = re.findall(r'^bucketdb_tenant_samples_ingested_total\{tenant="([^"]*)"\}',
                             text, re.M)
        eq(sorted(tenants), ["(other)", "acme"], "tenant label values")
        eq(metric_value(text, 'bucketdb_tenant_samples_ingested_total{tenant="(other)"}'), 40)
        eq(metric_value(text, 'bucketdb_tenant_write_requests_total{tenant="(other)"}'), 40)
        eq(metric_value(text, 'bucketdb_tenant_samples_ingested_total{tenant="acme"}'), 1)
        for reason in ("inflight_bytes", "inflight_writes", "tenant_bytes", "tenant_writes",
                       "head_memory"):
            eq(metric_value(text, 'bucketdb_backpressure_events_total{reason="%s"}' % reason),
               0)
        eq(metric_value(text, "bucketdb_inflight_request_bytes"), 0)
        eq(metric_value(text, "bucketdb_inflight_write_requests"), 0)


if __name__ == "__main__":
    suite.main()
