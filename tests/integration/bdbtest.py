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
# The storage backend under test (tests/cassandra-suite sets it). Empty: the embedded
# engine. cassandra://HOST:PORT/PREFIX?OPTIONS: every Server that does not choose its
# own --storage gets a keyspace of its own (PREFIX_1, PREFIX_2, ... per data directory
# of a test), created by the server (schema=create) and emptied before a later test
# reuses it, so tests never see each other's rows. One test process at a time per
# PREFIX.
STORAGE = os.environ.get("BDB_TEST_STORAGE", "")
ON_CASSANDRA = STORAGE.startswith("cassandra://")
ENGINE = "cassandra" if ON_CASSANDRA else "embedded"  # /health's storage.engine


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


# ------------------------------------------------------------------ storage backend

_keyspaces = {}  # realpath of a data directory -> (keyspace, URI); a restart keeps them
_fresh = set()  # keyspaces the next server start creates
_ks_tokens = {}  # keyspace -> the admin token a server of it printed (docs/CASSANDRA.md)


def _split_storage():
    """(hosts, prefix, query) of STORAGE."""
    m = re.match(r"cassandra://([^/?]+)/?([A-Za-z0-9_]*)(\?.*)?$", STORAGE)
    if not m:
        raise TestFailure("BDB_TEST_STORAGE=%r: expected cassandra://HOST:PORT/PREFIX?..."
                          % STORAGE)
    return m.group(1), (m.group(2) or "bdbt")[:32].lower(), m.group(3) or ""


def cql_contact():
    """(host, port) of the first contact point of STORAGE."""
    host = _split_storage()[0].split(",")[0]
    h, _, p = host.partition(":")
    return h, int(p or 9042)


def _cql(*stmts):
    h, p = cql_contact()
    # TRUNCATE waits for the node to flush the table: slow on a loaded machine
    cmd = [BIN, "cql", "--host", h, "--port", str(p), "--timeout", "60000"]
    for st in stmts:
        cmd += ["-e", st]
    r = subprocess.run(cmd, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise TestFailure("bucketdb cql %r: %s" % (stmts, r.stderr.decode("utf-8", "replace")))
    return r.stdout.decode("utf-8", "replace")


def _purged_marker(ks):
    """A file that says a server on keyspace ks answered a tenant DELETE: the purge then
    wrote tombstones (docs/CASSANDRA.md#deleting-a-tenant-on-cassandra), which count(*)
    does not see but which hide a later test's rows of the same tenant key (state cells
    carry their event time as write time). A file, not a set: the suite's next test
    file, another process, may take the keyspace."""
    h, p = cql_contact()
    return os.path.join(tempfile.gettempdir(), "bdbtest-purged-%s-%d-%s" % (h, p, ks))


def _empty_keyspace(ks):
    """Truncates every table of keyspace ks, if it exists. Keyspaces are reused from
    test to test because creating one with its tables costs a second or more of schema
    changes on the node, a truncation a few milliseconds per table. Done when a test
    takes the keyspace, not when the previous one ends, so a test that died half-way
    leaves nothing behind for the next."""
    tables = _cql("SELECT columnfamily_name FROM system.schema_columnfamilies "
                  "WHERE keyspace_name = '%s'" % ks).split()[1:]
    if tables:
        # only the tables holding a row: most tests fill two or three of them
        counts = _cql(*["SELECT count(*) FROM %s.%s LIMIT 1" % (ks, t) for t in tables])
        counts = counts.split()[1::2]  # "count", N per statement
        check(len(counts) == len(tables), "counts of %s: %r" % (tables, counts))
        full = [t for t, n in zip(tables, counts) if n != "0"]
        if os.path.exists(_purged_marker(ks)):
            full = tables
            os.unlink(_purged_marker(ks))
        if full:
            _cql(*["TRUNCATE %s.%s" % (ks, t) for t in full])
    return bool(tables)


def storage_uri(data):
    """The --storage value for a server on data directory data: one keyspace per data
    directory, so that a second server on the same directory finds its rows; the nth
    data directory of a test gets keyspace PREFIX_n, emptied first."""
    hosts, prefix, query = _split_storage()
    key = os.path.realpath(data)
    if key not in _keyspaces:
        ks = "%s_%d" % (prefix, len(_keyspaces) + 1)
        # A keyspace made by an earlier test has every table already: schema=none
        # saves the server's round of CREATE ... IF NOT EXISTS.
        made = _empty_keyspace(ks)
        if made and "schema=" not in query:
            query += ("&" if query else "?") + "schema=none"
        if not made:
            _fresh.add(ks)
        _keyspaces[key] = (ks, "cassandra://%s/%s%s" % (hosts, ks, query))
    return _keyspaces[key][1]


def _no_compaction(ks):
    """Turns compaction off on every table of a keyspace the server just created.
    Cassandra 2.1.0 (the test node) can spin for minutes in a compaction of a partition
    holding many range tombstones (RangeTombstone$Tracker.isDeleted; each overwrite of
    a collection column writes one), burning a core and making TRUNCATE wait 60 s.
    Compaction does not change what a read returns, so the tests lose nothing."""
    tables = _cql("SELECT columnfamily_name FROM system.schema_columnfamilies "
                  "WHERE keyspace_name = '%s'" % ks).split()[1:]
    if tables:
        _cql(*["ALTER TABLE %s.%s WITH compaction = {'class': 'SizeTieredCompactionStrategy', "
               "'enabled': 'false'}" % (ks, t) for t in tables])


def embedded_only(reason):
    """Marks a test as being about the embedded engine's own files (block files, their
    corruption, quotas measured on them, ...): on another backend it is reported as
    "skipped on cassandra: <reason>" instead of run. Keep the list short and honest;
    docs/TESTING.md names each one."""
    def mark(fn):
        fn.embedded_only = reason
        return fn
    return mark


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
        self.keyspace = None  # with BDB_TEST_STORAGE=cassandra://...: the server's keyspace
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
        if ON_CASSANDRA and not any(a == "--storage" or a.startswith("--storage=")
                                    for a in self.args):
            cmd += ["--storage", storage_uri(self.data)]
            self.keyspace = _keyspaces[os.path.realpath(self.data)][0]
        with open(self.log_path, "wb") as err, open(out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         env=self.env)
        _live_servers.append(self)
        deadline = time.monotonic() + START_TIMEOUT
        text = ""
        while time.monotonic() < deadline:
            with open(out_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if re.search(r"^\s*WAL sync \S+\s*$", text, re.M):
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
        # a directory without the keyspace's admin token prints none (docs/CASSANDRA.md
        # "The admin token"): a test sets the token of the server that made it
        m = re.search(r"^\s*token (\S+)\s*$", text, re.M)
        ks = self._keyspace_named()
        if m:
            self.token = m.group(1)
            if ks:
                _ks_tokens[ks] = self.token
        else:
            self.token = _ks_tokens.get(ks)
        if self.keyspace in _fresh:  # created by this start (schema=create)
            _fresh.discard(self.keyspace)
            _no_compaction(self.keyspace)
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

    def stored(self):
        """How much flushed data the storage backend holds (0: nothing flushed yet):
        the block files of the data directory on the embedded engine, the rows of the
        server's telemetry table on Cassandra. Works with the server stopped too."""
        if self.keyspace:
            out = _cql("SELECT count(*) FROM %s.telemetry" % self.keyspace).split()
            return int(out[-1])
        blocks = os.path.join(self.data, "blocks")
        if not os.path.isdir(blocks):
            return 0
        return len([f for f in os.listdir(blocks) if f.endswith(".blk")])

    def block_flush(self):
        """Makes every flush fail until unblock_flush(), the head keeping what it holds
        (the server retries): the blocks directory becomes a file on the embedded
        engine; the telemetry table is dropped on Cassandra."""
        if self.keyspace:
            _cql("DROP TABLE %s.telemetry" % self.keyspace)
            return
        blocks = os.path.join(self.data, "blocks")
        os.rename(blocks, os.path.join(self.dir, "blocks.aside"))
        with open(blocks, "w") as f:
            f.write("not a directory\n")

    def unblock_flush(self):
        if self.keyspace:
            # the server's own DDL (bucketdb schema, IF NOT EXISTS): only the dropped
            # table is created again; raw TTLs come with each row, so default TTL 0
            p = subprocess.run([BIN, "schema", "--keyspace", self.keyspace, "--ttl", "0",
                                "--replication", "simple:1", "--server-version", "2.1.0"],
                               capture_output=True, timeout=60)
            check(p.returncode == 0, "bucketdb schema: %r" % p.stderr)
            h, port = cql_contact()
            r = subprocess.run([BIN, "cql", "--host", h, "--port", str(port), "--timeout",
                                "60000", "-f", "/dev/stdin"],
                               input=p.stdout, capture_output=True, timeout=120)
            check(r.returncode == 0, "bucketdb cql -f: %r" % r.stderr)
            return
        blocks = os.path.join(self.data, "blocks")
        os.remove(blocks)
        os.rename(os.path.join(self.dir, "blocks.aside"), blocks)

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
        r = http_request(self.port, method, path, body, headers)
        if ON_CASSANDRA and method == "DELETE" and path.startswith("/api/v1/admin/tenants/"):
            key = os.path.realpath(self.data)
            if key in _keyspaces:
                open(_purged_marker(_keyspaces[key][0]), "w").close()
        return r

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

    def _keyspace_named(self):
        """The keyspace of this server's Cassandra storage, or None."""
        if self.keyspace:
            return self.keyspace
        args = list(self.args)
        for i, a in enumerate(args):
            uri = args[i + 1] if a == "--storage" and i + 1 < len(args) else (
                a[len("--storage="):] if a.startswith("--storage=") else "")
            if uri.startswith("cassandra://"):
                parts = uri.split("?")[0].split("/", 3)
                return parts[3] if len(parts) > 3 and parts[3] else None
        return None

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
        """Every partition in the range, following next_cursor across pages."""
        path = "/api/v1/devices/%s/partitions" % urllib.parse.quote(dev, safe="")
        params.setdefault("limit", 10000)
        out = []
        while True:
            r = self.get(path, **params)
            eq(r.status, 200, "GET partitions of %s (%r)" % (dev, r.body[:300]))
            doc = r.json()
            out += doc["partitions"]
            if doc.get("next_cursor") is None:
                return out
            params["cursor"] = doc["next_cursor"]

    def set_bucket(self, dev, bucket, **params):
        r = self.request("PUT", path_with("/api/v1/devices/%s/profile"
                                          % urllib.parse.quote(dev, safe=""),
                                          dict(bucket=bucket, **params)))
        eq(r.status, 200, "PUT profile %s bucket=%s (%r)" % (dev, bucket, r.body[:300]))
        return r.json()

    def metrics_text(self):
        # the admin token: /metrics takes it wherever tenants are registered or tokens
        # are required (metrics_auth = auto, docs/API.md#get-metrics)
        r = self.request("GET", "/metrics", None, {"Authorization": "Token " + self.token})
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
    def __init__(self, name, embedded_only=None):
        """embedded_only: a reason when the whole file is about the embedded engine
        (or starts its own Cassandra nodes): on another backend it is skipped."""
        self.name = name
        self.tests = []
        self.embedded_only = embedded_only

    def test(self, fn):
        self.tests.append(fn)
        return fn

    def main(self):
        only = os.environ.get("BDB_ONLY")  # run one test by name (debugging)
        passed = failed = 0
        t_all = time.monotonic()
        check_bin = os.path.exists(BIN) and os.access(BIN, os.X_OK)
        print("%s: binary %s%s" % (self.name, BIN, ", storage " + STORAGE if STORAGE else ""),
              flush=True)
        skipped = 0
        if ON_CASSANDRA and self.embedded_only:
            print("%s: skipped on cassandra: %s" % (self.name, self.embedded_only))
            print("0 passed, 0 failed, %d skipped" % len(self.tests), flush=True)
            sys.exit(0)
        for fn in self.tests:
            if only and fn.__name__ != only:
                continue
            if ON_CASSANDRA and getattr(fn, "embedded_only", None):
                skipped += 1
                print("%-50s skipped on cassandra: %s" % (fn.__name__, fn.embedded_only),
                      flush=True)
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
            _keyspaces.clear()  # the next test takes (and empties) them again
        print("%s: %.1fs" % (self.name, time.monotonic() - t_all))
        print("%d passed, %d failed%s" % (passed, failed,
                                           ", %d skipped" % skipped if skipped else ""),
              flush=True)
        sys.exit(1 if failed or (passed == 0 and not skipped) else 0)
