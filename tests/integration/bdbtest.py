"""bdbtest: shared helpers for the bucketdb integration tests (standard library only).

A test script builds a Suite, registers functions with @suite.test and calls
suite.main(). Each test prints "name ... ok" or "name ... FAIL" (with the traceback
and the log of every server it started); the last line is "N passed, M failed" and
the exit status is non-zero when anything failed.

Servers run the binary named by $BUCKETDB_BIN (default build/bucketdb) on
127.0.0.1 port 0 in a fresh temporary data directory; the port and token come from
the ready block the server prints on stdout. Every server a test starts is stopped
(or killed) when the test ends, whatever happened, and its temp dirs are removed.
"""

import gzip
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse

BIN = os.environ.get("BUCKETDB_BIN", "build/bucketdb")
# ASan builds are several times slower; every wait below is bounded by these.
START_TIMEOUT = float(os.environ.get("BDB_START_TIMEOUT", "60"))
STOP_TIMEOUT = float(os.environ.get("BDB_STOP_TIMEOUT", "60"))
HTTP_TIMEOUT = float(os.environ.get("BDB_HTTP_TIMEOUT", "60"))
KEEP = os.environ.get("BDB_KEEP") == "1"  # keep temp dirs for debugging


class TestFailure(AssertionError):
    pass


def check(cond, msg="check failed"):
    if not cond:
        raise TestFailure(msg)


def eq(got, want, msg=""):
    if got != want:
        raise TestFailure("%s%sgot %r, want %r" % (msg, ": " if msg else "", got, want))


def contains(haystack, needle, msg=""):
    if needle not in haystack:
        raise TestFailure("%s%s%r not found in %r" % (msg, ": " if msg else "", needle,
                                                       haystack[:2000]))


# ------------------------------------------------------------------ temp dirs

_tmpdirs = []


def tmpdir(prefix="bdbtest-"):
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


def _cleanup_tmpdirs():
    while _tmpdirs:
        d = _tmpdirs.pop()
        if KEEP:
            print("  kept %s" % d)
        else:
            shutil.rmtree(d, ignore_errors=True)


# ------------------------------------------------------------------ HTTP


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # dict, lower-case names
        self.body = body  # bytes

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise TestFailure("response is not JSON (%s): %r" % (e, self.body[:500]))

    def __repr__(self):
        return "<Response %d %r>" % (self.status, self.body[:300])


def http_request(port, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT):
    """One request on a fresh connection to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = dict(headers or {})
        if body is not None and isinstance(body, str):
            body = body.encode()
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


def qs(params):
    """Query string from a dict, skipping None values."""
    items = [(k, str(v)) for k, v in params.items() if v is not None]
    return urllib.parse.urlencode(items) if items else ""


def path_with(path, params):
    q = qs(params)
    return path + ("?" + q if q else "")


# ------------------------------------------------------------------ server


_live_servers = []  # every server started and not yet stopped (for cleanup)
_test_servers = []  # servers started during the current test (for logs on failure)


class Server:
    """A bucketdb server process on 127.0.0.1 with its own data directory."""

    def __init__(self, data=None, args=(), binary=None, env=None):
        self.dir = tmpdir("bdbsrv-")
        self.data = data or os.path.join(self.dir, "data")
        self.args = list(args)
        self.binary = binary or BIN
        self.env = env
        self.proc = None
        self.port = None
        self.token = None
        self.starts = 0
        self.log_path = None
        _test_servers.append(self)

    # -- lifecycle
    def start(self):
        check(self.proc is None, "server already running")
        self.starts += 1
        self.log_path = os.path.join(self.dir, "stderr.%d.log" % self.starts)
        out_path = os.path.join(self.dir, "stdout.%d.log" % self.starts)
        # Tests write fixed historical times (2023-2024), older than the default raw
        # retention of 30 days: keep everything unless the test sets retention itself.
        keep = [] if any(a.startswith("--retention-ms") for a in self.args) else \
            ["--retention-ms", "0"]
        cmd = [self.binary, "serve", "--data", self.data, "--listen", "127.0.0.1:0"] + keep + \
            self.args
        with open(self.log_path, "wb") as err, open(out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=self.env)
        _live_servers.append(self)
        deadline = time.monotonic() + START_TIMEOUT
        text = ""
        while time.monotonic() < deadline:
            with open(out_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if re.search(r"^\s*token \S+\s*$", text, re.M):
                break
            if self.proc.poll() is not None:
                raise TestFailure("server exited with %d before it was ready:\n%s"
                                  % (self.proc.returncode, self.log()))
            time.sleep(0.02)
        else:
            raise TestFailure("server not ready after %.0fs:\n%s" % (START_TIMEOUT, self.log()))
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", text)
        check(m, "no 'listening on' line in %r" % text)
        self.port = int(m.group(1))
        check(self.port > 0, "port 0 in the ready block")
        self.token = re.search(r"^\s*token (\S+)\s*$", text, re.M).group(1)
        self.ready_text = text
        contains(text, "data directory %s" % self.data)
        # Ready means /ping answers.
        while time.monotonic() < deadline:
            try:
                if self.get("/ping").status == 204:
                    return self
            except OSError:
                pass
            time.sleep(0.02)
        raise TestFailure("/ping never answered 204:\n%s" % self.log())

    def stop(self, expect_clean=True):
        """SIGTERM; checks exit code 0 and 'stopped cleanly' in the log."""
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TestFailure("server did not stop within %.0fs of SIGTERM" % STOP_TIMEOUT)
        self._gone()
        if expect_clean:
            eq(rc, 0, "exit code after SIGTERM\n" + self.log())
            contains(self.log(), "stopped cleanly", "server log after SIGTERM")
        return rc

    def kill(self):
        """SIGKILL: no flush, no clean shutdown."""
        if self.proc is None:
            return None
        self.proc.kill()
        rc = self.proc.wait(timeout=STOP_TIMEOUT)
        self._gone()
        return rc

    def restart(self):
        self.stop()
        return self.start()

    def _gone(self):
        self.proc = None
        if self in _live_servers:
            _live_servers.remove(self)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def all_logs(self):
        parts = []
        for i in range(1, self.starts + 1):
            p = os.path.join(self.dir, "stderr.%d.log" % i)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    parts.append("--- server stderr (start %d, data %s)\n%s"
                                 % (i, self.data, f.read().decode("utf-8", "replace")))
        return "\n".join(parts)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        if self.proc is not None:
            if exc[0] is None:
                self.stop()
            else:
                self.kill()
        return False

    # -- HTTP
    def request(self, method, path, body=None, headers=None, params=None):
        if params:
            path = path_with(path, params)
        return http_request(self.port, method, path, body, headers)

    def get(self, path, **params):
        return self.request("GET", path_with(path, params))

    def post(self, path, body=b"", headers=None, **params):
        return self.request("POST", path_with(path, params), body, headers)

    def write(self, lines, gz=False, expect=204, headers=None, **params):
        """POST /write; lines is a string or a list of lines."""
        if isinstance(lines, (list, tuple)):
            lines = "\n".join(lines) + "\n"
        body = lines.encode() if isinstance(lines, str) else lines
        hdrs = dict(headers or {})
        if gz:
            body = gzip.compress(body)
            hdrs["Content-Encoding"] = "gzip"
        r = self.request("POST", path_with("/write", params), body, hdrs)
        if expect is not None:
            eq(r.status, expect, "POST /write status (%r)" % r.body[:300])
        return r

    def write_json(self, doc, expect=204, **params):
        body = doc if isinstance(doc, (bytes, str)) else json.dumps(doc)
        r = self.request("POST", path_with("/api/v1/write/json", params), body,
                         {"Content-Type": "application/json"})
        if expect is not None:
            eq(r.status, expect, "POST /api/v1/write/json status (%r)" % r.body[:300])
        return r

    def query(self, expect=200, **params):
        """GET /api/v1/query; returns the parsed JSON (or the Response if not 200)."""
        r = self.get("/api/v1/query", **params)
        if expect is not None:
            eq(r.status, expect, "GET /api/v1/query %r status (%r)" % (params, r.body[:300]))
        return r.json() if r.status == 200 and params.get("format") != "csv" else r

    def values(self, **params):
        """Rows [[ms, metric, value], ...] of a query, checked against its count."""
        doc = self.query(**params)
        eq(doc["count"], len(doc["values"]), "count vs values")
        return [tuple(v) for v in doc["values"]]

    def flush(self):
        r = self.post("/internal/flush")
        eq(r.status, 204, "POST /internal/flush (%r)" % r.body[:300])

    def device(self, dev, expect=200, **params):
        r = self.get("/api/v1/devices/" + urllib.parse.quote(dev, safe=""), **params)
        eq(r.status, expect, "GET device %s" % dev)
        return r.json()

    def devices(self, **params):
        r = self.get("/api/v1/devices", **params)
        eq(r.status, 200, "GET /api/v1/devices")
        return r.json()

    def partitions(self, dev, **params):
        r = self.get("/api/v1/devices/%s/partitions" % urllib.parse.quote(dev, safe=""), **params)
        eq(r.status, 200, "GET partitions of %s (%r)" % (dev, r.body[:300]))
        return r.json()["partitions"]

    def set_bucket(self, dev, bucket, **params):
        r = self.request("PUT", path_with("/api/v1/devices/%s/profile"
                                          % urllib.parse.quote(dev, safe=""),
                                          dict(bucket=bucket, **params)))
        eq(r.status, 200, "PUT profile %s bucket=%s (%r)" % (dev, bucket, r.body[:300]))
        return r.json()

    def metrics_text(self):
        r = self.get("/metrics")
        eq(r.status, 200, "GET /metrics")
        return r.text


def run_bin(args, timeout=60, env=None, input=None):
    """Runs the bucketdb binary to completion: (rc, stdout, stderr) as text."""
    p = subprocess.run([BIN] + list(args), capture_output=True, timeout=timeout, env=env,
                       input=input)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def now_ms():
    return int(time.time() * 1000)


HOUR = 3600 * 1000
MIN = 60 * 1000
DAY = 24 * HOUR


# ------------------------------------------------------------------ registry


class Suite:
    def __init__(self, name):
        self.name = name
        self.tests = []

    def test(self, fn):
        self.tests.append(fn)
        return fn

    def main(self):
        only = os.environ.get("BDB_ONLY")  # run one test by name (debugging)
        passed = failed = 0
        t_all = time.monotonic()
        check_bin = os.path.exists(BIN) and os.access(BIN, os.X_OK)
        print("%s: binary %s" % (self.name, BIN), flush=True)
        for fn in self.tests:
            if only and fn.__name__ != only:
                continue
            del _test_servers[:]
            t0 = time.monotonic()
            ok = False
            err = ""
            try:
                if not check_bin:
                    raise TestFailure("binary %s not found or not executable" % BIN)
                fn()
                ok = True
            except Exception:
                err = traceback.format_exc()
            finally:
                # Anything still running is killed; a test that leaves one behind fails.
                leftover = list(_live_servers)
                for s in leftover:
                    try:
                        s.kill()
                    except Exception:
                        pass
                if ok and leftover:
                    ok = False
                    err = "test left %d server(s) running" % len(leftover)
            dt = time.monotonic() - t0
            if ok:
                passed += 1
                print("%-50s ok (%.1fs)" % (fn.__name__, dt), flush=True)
            else:
                failed += 1
                print("%-50s FAIL (%.1fs)" % (fn.__name__, dt), flush=True)
                print(err.rstrip())
                for s in _test_servers:
                    logs = s.all_logs()
                    if logs:
                        tail = logs[-6000:]
                        print(tail.rstrip())
                sys.stdout.flush()
            _cleanup_tmpdirs()
        print("%s: %.1fs" % (self.name, time.monotonic() - t_all))
        print("%d passed, %d failed" % (passed, failed), flush=True)
        sys.exit(1 if failed or passed == 0 else 0)
