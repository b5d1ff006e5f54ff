#!/usr/bin/env python3
"""The web dashboard end to end (docs/DASHBOARD.md): a real server with auth on, a
tenant with a small fleet written over HTTP (exact counts to check) and a second one
filled by `bucketdb load`, and Debian's headless Chromium loading
each page with the tenant's token in the URL fragment. Each page writes a JSON summary
of what it drew into #summary; --dump-dom gives us the DOM after the page's requests
have finished, and the summary must match the data written: the number of points in
the charts, the tier that answered resolution=auto, the states, the partition
histogram. Screenshots go under the test output directory (printed in the log).

Chromium is required: without it every test here fails with the reason (CI installs
it with scripts/setup.sh --test)."""

import html
import json
import os
import re
import shutil
import subprocess
import time

from bdbtest import BIN, MIN, Server, Suite, check, contains, eq, now_ms, run_bin, tmpdir
from bdbtest import ON_CASSANDRA

suite = Suite("dashboard")

REPORT_EVERY = 5 * MIN
REPORTS = 288  # one day at 5 minutes
DEVICES = ["pump-%02d" % i for i in range(6)]
STATES = {"pump-00": "running", "pump-01": "running", "pump-02": "running",
          "pump-03": "idle", "pump-04": "fault"}  # pump-05 never reports a state
OUT_DIR = os.environ.get("BDB_TEST_OUTPUT") or os.path.join(
    os.path.dirname(os.path.abspath(BIN)), "test-output", "test_dashboard")


def chromium_bin():
    for name in (os.environ.get("BDB_CHROMIUM"), "chromium", "chromium-browser"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise AssertionError("Debian's chromium is not installed (apt-get install chromium; "
                         "scripts/setup.sh --test installs it): the dashboard cannot be tested")


def chromium(url, dump_dom=False, screenshot=None, budget_ms=8000):
    """One headless Chromium run on a fresh profile (so a fresh session storage)."""
    profile = tmpdir("bdbchrome-")
    cmd = [chromium_bin(), "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
           "--disable-extensions", "--hide-scrollbars", "--user-data-dir=" + profile,
           "--window-size=1280,1000", "--virtual-time-budget=%d" % budget_ms]
    if dump_dom:
        cmd.append("--dump-dom")
    if screenshot:
        cmd.append("--screenshot=" + screenshot)
    cmd.append(url)
    p = subprocess.run(cmd, capture_output=True, timeout=90, stdin=subprocess.DEVNULL)
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise AssertionError("chromium exited with %d:\n%s" % (p.returncode, err[-3000:]))
    return p.stdout.decode("utf-8", "replace")


def summary(dom):
    m = re.search(r'<span id="summary"[^>]*>(.*?)</span>', dom, re.S)
    check(m, "no #summary in the DOM:\n" + dom[:3000])
    doc = json.loads(html.unescape(m.group(1)))
    check(doc.get("ready") is True, "page not ready: %r" % doc)
    return doc


def fleet(srv, token):
    """REPORTS reports per device, every 5 minutes up to 2 minutes ago: temp and
    humidity, and a state on the newest report. Returns the write time."""
    t_end = now_ms() - 2 * MIN
    lines = []
    for d_i, dev in enumerate(DEVICES):
        for k in range(REPORTS):
            ts = t_end - k * REPORT_EVERY
            fields = "temp=%.2f,humidity=%di" % (20 + d_i + (k % 12) * 0.5, 40 + k % 7)
            if k == 0 and dev in STATES:
                fields += ',state="%s"' % STATES[dev]
            lines.append("env,device=%s,site=plant-%d %s %d" % (dev, d_i % 2, fields, ts))
    r = srv.post("/write", "\n".join(lines) + "\n", {"Authorization": "Token " + token},
                 precision="ms")
    eq(r.status, 204, "write the fleet (%r)" % r.body[:300])
    return t_end


def start_filled():
    srv = Server(args=["--auth", "on"]).start()
    admin = {"Authorization": "Token " + srv.token}
    r = srv.post("/api/v1/admin/tenants", json.dumps({"name": "acme"}), admin)
    eq(r.status, 201, "create tenant (%r)" % r.body[:300])
    tok = r.json()["token"]
    fleet(srv, tok)
    r = srv.post("/internal/flush", b"", admin)
    eq(r.status, 204, "flush")
    # the partition sizes are measured by a background thread after the flush (on
    # block files only: with Cassandra there are none to wait for, docs/CASSANDRA.md)
    deadline = time.monotonic() + (0 if ON_CASSANDRA else 20)
    while time.monotonic() < deadline:
        m = re.search(r"^bucketdb_partition_size_bytes_count (\d+)", srv.metrics_text(), re.M)
        if m and int(m.group(1)) > 0:
            break
        time.sleep(0.1)
    else:
        if not ON_CASSANDRA:
            raise AssertionError("partition sizes never measured after the flush")
    return srv, tok


def page_url(srv, frag):
    return "http://127.0.0.1:%d/#%s" % (srv.port, frag)


@suite.test
def static_files_without_token():
    chromium_bin()  # fail early, with the reason, where there is no browser
    with Server(args=["--auth", "on"]) as srv:
        for path in ("/", "/ui/", "/ui/index.html"):
            r = srv.get(path)
            eq(r.status, 200, "GET " + path)
            contains(r.headers.get("content-type", ""), "text/html")
            contains(r.text, "/ui/app.js")
            contains(r.headers.get("content-security-policy", ""), "script-src 'self'")
        r = srv.get("/ui/app.js")
        eq(r.status, 200)
        contains(r.headers.get("content-type", ""), "javascript")
        contains(r.text, "resolution")
        eq(srv.get("/ui/app.css").status, 200)
        eq(srv.get("/ui/nope.js").status, 404)
        eq(srv.get("/ui/../token").status, 404)
        eq(srv.post("/").status, 405)
        # the data APIs keep their authentication
        eq(srv.get("/api/v1/devices").status, 401)


@suite.test
def device_explorer_charts_real_data():
    srv, tok = start_filled()
    try:
        os.makedirs(OUT_DIR, exist_ok=True)
        # 24 hours: resolution=auto answers from the 1-minute tier, one window per report
        shot = os.path.join(OUT_DIR, "device-explorer.png")
        dom = chromium(page_url(srv, "page=devices&device=pump-03&range=24h&token=" + tok),
                       dump_dom=True, screenshot=shot)
        s = summary(dom)
        eq(s.get("error"), None, "error on the page")
        eq(s["tenant"], "acme")
        eq(s["device"], "pump-03")
        eq(s["tier"], "1m", "tier that answered a 24 h range")
        eq(s["charts"], 2, "one chart per metric")
        eq(s["metrics"], {"env.humidity": REPORTS, "env.temp": REPORTS}, "points drawn")
        contains(dom, "answered by tier 1m")
        check(tok not in dom, "the token must not stay in the page or its address")
        # the last hour: raw samples, 12 reports at 5 minutes
        s = summary(chromium(page_url(srv, "page=devices&device=pump-03&range=1h&token=" + tok),
                             dump_dom=True))
        eq(s["tier"], "raw", "tier that answered a 1 h range")
        eq(s["metrics"], {"env.humidity": 12, "env.temp": 12}, "raw points drawn")
        with open(shot, "rb") as f:
            png = f.read()
        eq(png[:8], b"\x89PNG\r\n\x1a\n", "screenshot is a PNG")
        check(len(png) > 20000, "screenshot suspiciously small (%d bytes)" % len(png))
        print("  screenshot: %s" % shot)
        srv.stop()
    finally:
        if srv.running():
            srv.kill()


@suite.test
def state_partitions_overview_pages():
    srv, tok = start_filled()
    try:
        os.makedirs(OUT_DIR, exist_ok=True)
        s = summary(chromium(page_url(srv, "page=state&token=" + tok), dump_dom=True))
        want = {}
        for st in STATES.values():
            want[st] = want.get(st, 0) + 1
        eq(s["states"], want, "devices per state")
        eq(s["no_state"], 1)
        eq(s["bars"], len(want) + 1, "bars drawn (states and no state)")
        eq(s["selected"], "running", "the largest state is listed first")
        eq((s["listed"], s["total"]), (3, 3), "devices listed in state running")

        # a second tenant filled by the fleet simulator, seen with the admin token
        rc, out, err = run_bin(["load", "--server", "http://127.0.0.1:%d" % srv.port,
                                "--token", srv.token, "--tenant", "sim", "--devices", "8",
                                "--metrics", "2", "--interval", "1m", "--duration", "1h",
                                "--states", "running,idle,fault", "--seed", "7", "--json"])
        eq(rc, 0, "bucketdb load: " + err)
        sim = json.loads(out)
        counts = srv.request("GET", "/api/v1/state/counts?tenant=sim", None,
                             {"Authorization": "Token " + srv.token}).json()
        eq(counts["devices"], 8, "devices the simulator created")
        s = summary(chromium(page_url(srv, "page=state&tenant=sim&token=" + srv.token),
                             dump_dom=True))
        eq(s["tenant"], "sim")
        eq((s["states"], s["devices"]), (counts["states"], 8), "sim's states")
        biggest = sorted(counts["states"].items(), key=lambda kv: (-kv[1], kv[0]))[0]
        eq((s["selected"], s["listed"]), biggest, "the largest state is listed")

        # the partition histogram comes from /metrics, which spans every tenant and
        # takes the admin token (metrics_auth = auto): a tenant's token gets the 403
        s = summary(chromium(page_url(srv, "page=partitions&token=" + tok), dump_dom=True))
        eq(s.get("status"), 403, "partitions page with a tenant token")
        s = summary(chromium(page_url(srv, "page=partitions&token=" + srv.token), dump_dom=True))
        m = re.search(r"^bucketdb_partition_size_bytes_count (\d+)", srv.metrics_text(), re.M)
        check(int(m.group(1)) > 0 or ON_CASSANDRA, "partitions measured on block files")
        eq(s["partitions"], int(m.group(1)), "partitions in the histogram")
        eq(s["counted"], s["partitions"], "bars add up to the partition count")
        eq(s["bars"], 10, "one bar per histogram bucket")

        # a tenant's token: the page without the server-wide figures of /metrics
        dom = chromium(page_url(srv, "page=overview&token=" + tok), dump_dom=True)
        s = summary(dom)
        eq(s["health"], "ok")
        eq(s["devices"], None, "server-wide device count hidden from a tenant token")
        contains(s.get("metrics_denied") or "", "admin token")
        contains(dom, "The tenant list needs the admin token")
        contains(dom, "Server-wide figures need the admin token")
        shot = os.path.join(OUT_DIR, "overview.png")
        dom = chromium(page_url(srv, "page=overview&token=" + srv.token), dump_dom=True,
                       screenshot=shot)
        s = summary(dom)
        eq(s["devices"], len(DEVICES) + 8, "devices of both tenants")
        eq(s["samples"], len(DEVICES) * REPORTS * 2 + sim["samples"], "samples ingested")
        eq(s["health"], "ok")
        eq(s["hot"], 0)
        eq(s.get("metrics_denied"), None)
        check(os.path.getsize(shot) > 20000, "overview screenshot too small")
        print("  screenshot: %s" % shot)

        # without a token the page asks for one: the data APIs answered 401
        dom = chromium(page_url(srv, "page=devices"), dump_dom=True)
        s = summary(dom)
        eq(s.get("status"), 401, "status without a token")
        check(re.search(r'<section id="login" class="panel">', dom),
              "login form not shown without a token")
        srv.stop()
    finally:
        if srv.running():
            srv.kill()


@suite.test
def loopback_without_token_asks_for_none():
    """The README's first run: loopback, no token needed. The page must not open with
    the login panel nor the admin API's 401 (issue 18), and shows the data."""
    with Server() as srv:
        srv.write("env,device=d1 temp=21.5 %d" % (int(time.time()) * 1000), precision="ms")
        for page in ("overview", "devices"):
            dom = chromium(page_url(srv, "page=" + page), dump_dom=True)
            s = summary(dom)
            check(re.search(r'<section id="login" class="panel" hidden', dom),
                  "%s: login panel shown on a server that needs no token" % page)
            check("admin API needs the admin token" not in dom,
                  "%s: the admin API's 401 shown to a user who needs no token" % page)
            if page == "overview":
                eq(s["health"], "ok")
                contains(dom, "The tenant list needs the admin token")
            else:
                check(s.get("status") is None, "devices page status %r" % s.get("status"))
                contains(dom, "d1")


if __name__ == "__main__":
    suite.main()
