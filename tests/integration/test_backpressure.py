#!/usr/bin/env python3
"""Backpressure: bounded in-flight work instead of unbounded memory.

- admission rules, made deterministic by holding requests open (headers and part of
  the body sent, the rest held back) so the in-flight budgets are exactly known:
  429 for a tenant over its share of writes or bytes, 503 for the server-wide
  budgets, Retry-After on both, nothing of a refused request written, /health
  unhealthy with the reason and ok again after, the gauges and counters in /metrics;
- a chunked body and a gzip body that grow past the budget while being received;
- "Expect: 100-continue": a refused request is answered before its body is sent;
- the head guard: with flushing made impossible (the blocks directory replaced by a
  file), writes get 503 once the head holds more than 2 x head_max_bytes, /health
  says why, and after flushing works again the head drains and writes pass;
- overload: many threads posting large bodies far beyond capacity; the server stays
  up, its RSS stays under a bound derived from the budgets, every refusal carries
  Retry-After, /health flips to unhealthy and back, and every acknowledged sample is
  stored while nothing of a refused request is (checked by export).
"""

import json
import os
import re
import socket
import sys
import threading
import time
import gzip
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import BIN, Server, Suite, TestFailure, check, contains, eq  # noqa: E402
from bdbtest import ON_CASSANDRA  # noqa: E402

suite = Suite("backpressure")
T0 = 1705327200000  # 2024-01-15T14:00:00Z
MIB = 1 << 20
WAIT = float(os.environ.get("BDB_BP_WAIT", "30"))  # bound of every wait for a state


def lines_body(tenant, tag, n_lines, size=None, t0=T0, devices=1):
    """Line protocol of n_lines samples (device tag-<i % devices>, value i) padded with
    comment lines to exactly `size` bytes when given."""
    out = []
    for i in range(n_lines):
        out.append("m,device=%s-%d v=%d %d" % (tag, i % devices, i, t0 + i))
    body = ("\n".join(out) + "\n").encode()
    if size is not None:
        check(len(body) <= size, "body of %d lines is larger than %d" % (n_lines, size))
        pad = size - len(body)
        while pad > 0:
            chunk = min(pad, 4000)
            if chunk == 1:
                body += b"\n"
            else:
                body += b"#" + b"x" * (chunk - 2) + b"\n"
            pad -= chunk
        eq(len(body), size, "padded body size")
    return body


class Held:
    """A write request sent up to part of its body, so the server has admitted it (or
    refused it) and it holds its reservation until finish()."""

    def __init__(self, port, tenant, body, sent=64, expect=False, extra_headers=None,
                 path="/write"):
        self.body = body
        self.sent = min(sent, len(body))
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        q = urllib.parse.urlencode({"db": tenant, "precision": "ms"})
        head = "POST %s?%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n" % (
            path, q, len(body))
        if expect:
            head += "Expect: 100-continue\r\n"
        for k, v in (extra_headers or {}).items():
            head += "%s: %s\r\n" % (k, v)
        self.sock.sendall((head + "\r\n").encode())
        if self.sent and not expect:
            self.sock.sendall(body[:self.sent])

    def finish(self):
        """Sends the rest and reads the answer: (status, headers dict, body bytes)."""
        try:
            self.sock.sendall(self.body[self.sent:])
        except OSError:
            pass
        return read_response(self.sock)

    def answer(self):
        """Reads an answer without sending more."""
        return read_response(self.sock)


def read_response(sock):
    data = b""
    deadline = time.monotonic() + WAIT
    while b"\r\n\r\n" not in data and time.monotonic() < deadline:
        part = sock.recv(65536)
        if not part:
            break
        data += part
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    check(lines and lines[0].startswith("HTTP/1.1 "), "no HTTP answer: %r" % data[:300])
    status = int(lines[0].split()[1])
    if status == 100:  # 100 Continue came first: not expected by callers here
        raise TestFailure("got 100 Continue")
    headers = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", "0"))
    while len(rest) < n and time.monotonic() < deadline:
        part = sock.recv(65536)
        if not part:
            break
        rest += part
    sock.close()
    return status, headers, rest[:n]


def post_chunked(port, path, body, piece=32768):
    """POSTs body with Transfer-Encoding: chunked: (status, headers, body)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    sock.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                  % path).encode())
    try:
        for i in range(0, len(body), piece):
            part = body[i:i + piece]
            sock.sendall(b"%x\r\n" % len(part) + part + b"\r\n")
        sock.sendall(b"0\r\n\r\n")
    except OSError:
        pass  # answered and closed early: read the answer
    return read_response(sock)


def metric(s, name, labels=None):
    text = s.metrics_text()
    want = name + ("{%s}" % labels if labels else "")
    for ln in text.splitlines():
        if ln.startswith(want + " "):
            return float(ln.split()[-1])
    raise TestFailure("metric %s not in /metrics" % want)


def wait_for(what, fn, timeout=WAIT):
    """Polls fn() until it returns a true value (bounded)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(0.05)
    raise TestFailure("timed out waiting for %s (last %r)" % (what, last))


def wait_inflight(s, nbytes, writes):
    wait_for("in flight = %d bytes, %d writes" % (nbytes, writes),
             lambda: (metric(s, "bucketdb_inflight_request_bytes") == nbytes and
                      metric(s, "bucketdb_inflight_write_requests") == writes))


def health(s):
    r = s.get("/health")
    return r.status, r.json()


def check_refusal(status, headers, body, want_status, want_reason, tenant=None):
    eq(status, want_status, "refusal status (%r)" % body[:300])
    check("retry-after" in headers, "no Retry-After on %d: %r" % (status, headers))
    check(int(headers["retry-after"]) >= 1, "Retry-After %r" % headers["retry-after"])
    doc = json.loads(body)
    eq(doc["reason"], want_reason, "reason of the refusal (%r)" % doc)
    eq(doc["retry_after"], int(headers["retry-after"]), "retry_after in the body")
    contains(doc["error"], "nothing of this request was written")
    if tenant:
        eq(doc["tenant"], tenant, "tenant of a 429")
    check("x-influxdb-error" in headers, "no X-Influxdb-Error on a /write refusal")


def count(s, tenant, device):
    r = s.get("/api/v1/query", db=tenant, device=device, **{"from": T0, "to": T0 + 10**7})
    if r.status == 404:
        return 0
    eq(r.status, 200, "query %s/%s (%r)" % (tenant, device, r.body[:200]))
    return r.json()["count"]


# Budgets of the deterministic tests: B = 5 MiB, W = 6, share 50 % (2.5 MiB and 3
# writes per tenant), bodies up to 1 MiB. A write with Content-Length n reserves
# (1 + PARSE_FACTOR) x n when its headers arrive (BDB_BP_PARSE_FACTOR).
PARSE_FACTOR = 4
B = 5 * MIB
ADMIT_ARGS = ["--max-inflight-bytes", str(B), "--max-inflight-writes", "6",
              "--tenant-inflight-share", "50", "--max-body-bytes", "1MiB"]


def reserved(n):
    return (1 + PARSE_FACTOR) * n


@suite.test
def write_budget_tenant_share_and_server():
    with Server(args=ADMIT_ARGS) as s:
        eq(health(s)[0], 200, "healthy at start")
        small = 1000
        held = [Held(s.port, "a", lines_body("a", "held%d" % i, 10, small)) for i in range(3)]
        wait_inflight(s, 3 * reserved(small), 3)
        # A fourth write of tenant a: over its share of writes (3) -> 429.
        st, hd, body = Held(s.port, "a", lines_body("a", "refused", 10, small),
                            sent=small).answer()
        check_refusal(st, hd, body, 429, "tenant_writes", tenant="a")
        # Another tenant still gets in until the server-wide budget of 6 writes.
        held += [Held(s.port, "b", lines_body("b", "held%d" % i, 10, small)) for i in range(3)]
        wait_inflight(s, 6 * reserved(small), 6)
        st, hd, body = Held(s.port, "c", lines_body("c", "refused", 10, small),
                            sent=small).answer()
        check_refusal(st, hd, body, 503, "inflight_writes")
        code, doc = health(s)
        eq(code, 503, "/health while shedding")
        eq(doc["status"], "unhealthy")
        contains(doc["reason"], "inflight_writes")
        eq(doc["backpressure"]["inflight_writes"], 6)
        eq(doc["backpressure"]["shedding"], True)
        # Reads are not write requests: they still work.
        eq(s.get("/api/v1/devices", db="a").status, 200, "a read during overload")
        # The held requests complete normally.
        for h in held:
            st, hd, body = h.finish()
            eq(st, 204, "held write (%r)" % body[:300])
        wait_inflight(s, 0, 0)
        for t in ("a", "b"):
            for i in range(3):
                eq(count(s, t, "held%d-0" % i), 10, "samples of %s/held%d" % (t, i))
            eq(count(s, t, "refused-0"), 0, "nothing of the refused write of %s" % t)
        eq(count(s, "c", "refused-0"), 0, "nothing of the refused write of c")
        eq(metric(s, "bucketdb_backpressure_events_total", 'reason="tenant_writes"'), 1)
        eq(metric(s, "bucketdb_backpressure_events_total", 'reason="inflight_writes"'), 1)
        eq(metric(s, "bucketdb_inflight_write_requests_limit"), 6)
        eq(metric(s, "bucketdb_inflight_request_bytes_limit"), B)
        # /health is ok again once nothing has been shed for a while (bounded wait).
        wait_for("/health ok again", lambda: health(s)[0] == 200)
        doc = health(s)[1]
        eq(doc["status"], "ok")
        eq(doc["reason"], None)
        eq(doc["reasons"], [])
        eq(doc["backpressure"]["shedding"], False)
        s.write("m,device=after v=1 %d" % T0, precision="ms")


@suite.test
def byte_budget_tenant_share_and_server():
    with Server(args=ADMIT_ARGS) as s:
        n = 256 * 1024  # reserves 1.25 MiB: two of them are a tenant's share
        held = [Held(s.port, "a", lines_body("a", "big%d" % i, 100, n)) for i in range(2)]
        wait_inflight(s, 2 * reserved(n), 2)
        # a holds its whole share of bytes: a little more is over it -> 429.
        st, hd, body = Held(s.port, "a", lines_body("a", "refused", 10, 1000),
                            sent=1000).answer()
        check_refusal(st, hd, body, 429, "tenant_bytes", tenant="a")
        eq(hd["retry-after"], "1", "Retry-After of an in-flight refusal")
        eq(health(s)[0], 200, "a tenant over its share does not make the server unhealthy")
        held += [Held(s.port, "b", lines_body("b", "big%d" % i, 100, n)) for i in range(2)]
        wait_inflight(s, B, 4)
        # The budget is full: a small write of tenant c is over it.
        st, hd, body = Held(s.port, "c", lines_body("c", "refused", 10, 1000),
                            sent=1000).answer()
        check_refusal(st, hd, body, 503, "inflight_bytes")
        code, doc = health(s)
        eq(code, 503)
        contains(doc["reason"], "inflight_bytes")
        # the tenant is named to the admin token only (test_isolation.py checks B's view)
        eq(doc["backpressure"]["last_tenant_refusal"]["tenant"], None, "tenant without a token")
        adoc = s.request("GET", "/health", None, {"Authorization": "Token " + s.token}).json()
        eq(adoc["backpressure"]["last_tenant_refusal"]["tenant"], "a")
        # Expect: 100-continue: the refusal comes before the body is sent.
        h = Held(s.port, "c", lines_body("c", "expect", 10, 1000), expect=True)
        st, hd, body = h.answer()
        check_refusal(st, hd, body, 503, "inflight_bytes")
        for h in held:
            st, hd, body = h.finish()
            eq(st, 204, "held write (%r)" % body[:300])
        wait_inflight(s, 0, 0)
        for t in ("a", "b"):
            for i in range(2):
                eq(count(s, t, "big%d-0" % i), 100, "%s/big%d" % (t, i))
        eq(count(s, "a", "refused-0"), 0)
        eq(count(s, "c", "refused-0"), 0)
        eq(count(s, "c", "expect-0"), 0)
        eq(metric(s, "bucketdb_backpressure_events_total", 'reason="tenant_bytes"'), 1)
        eq(metric(s, "bucketdb_backpressure_events_total", 'reason="inflight_bytes"'), 2)
        # With room again, the same request passes, with Expect too.
        h = Held(s.port, "c", lines_body("c", "expect", 10, 1000), expect=True)
        status_line = h.sock.recv(100)
        check(status_line.startswith(b"HTTP/1.1 100"), "100 Continue with room: %r"
              % status_line)
        h.sent = 0
        st, _, body = h.finish()
        eq(st, 204, "write after 100 Continue (%r)" % body[:300])
        eq(count(s, "c", "expect-0"), 10)


@suite.test
def chunked_and_gzip_bodies_stop_at_the_budget():
    with Server(args=ADMIT_ARGS) as s:
        n = 256 * 1024
        held = [Held(s.port, "a", lines_body("a", "h%d" % i, 100, n)) for i in range(2)]
        held.append(Held(s.port, "b", lines_body("b", "h0", 100, n)))
        extra = Held(s.port, "b", lines_body("b", "h1", 100, 100000))
        holding = 3 * reserved(n)
        wait_inflight(s, holding + reserved(100000), 4)
        room = B - holding - reserved(100000)
        # Chunked: no Content-Length, so it is admitted with nothing and charged as
        # its buffer grows (64 KiB, doubling); the step to 1 MiB does not fit.
        body = lines_body("c", "chunked", 20000)
        check(512 * 1024 <= room < MIB and 512 * 1024 < len(body) < MIB,
              "test set-up: room %d, body %d" % (room, len(body)))
        st, hd, rbody = post_chunked(s.port, "/write?db=c&precision=ms", body)
        check_refusal(st, hd, rbody, 503, "inflight_bytes")
        st, _, rb = extra.finish()
        eq(st, 204, "held write (%r)" % rb[:300])
        wait_inflight(s, holding, 3)
        # gzip: 1 MiB of text compresses to a small body, admitted on its
        # Content-Length; decompressing it needs more than the budget has left.
        room = B - holding
        gz = gzip.compress(lines_body("c", "gz", 20000, MIB))
        check(reserved(len(gz)) + 64 * 1024 <= room < reserved(len(gz)) + MIB,
              "test set-up: room %d, compressed %d" % (room, len(gz)))
        st, hd, rbody = Held(s.port, "c", gz, sent=len(gz),
                             extra_headers={"Content-Encoding": "gzip"}).answer()
        check_refusal(st, hd, rbody, 503, "inflight_bytes")
        for h in held:
            st, hd, rb = h.finish()
            eq(st, 204, "held write (%r)" % rb[:300])
        wait_inflight(s, 0, 0)
        eq(count(s, "c", "chunked-0"), 0, "nothing of the refused chunked body")
        eq(count(s, "c", "gz-0"), 0, "nothing of the refused gzip body")
        # The same bodies pass once there is room.
        r = s.request("POST", "/write?db=c&precision=ms", gz, {"Content-Encoding": "gzip"})
        eq(r.status, 204, "gzip body with room (%r)" % r.body[:300])
        eq(count(s, "c", "gz-0"), 20000)
        st, _, rbody = post_chunked(s.port, "/write?db=c&precision=ms", body)
        eq(st, 204, "chunked body with room (%r)" % rbody[:300])
        eq(count(s, "c", "chunked-0"), 20000)


@suite.test
def head_guard_sheds_writes_until_flushing_catches_up():
    # A small head limit; flushing is made impossible (block_flush: the blocks
    # directory replaced with a file, or Cassandra's telemetry table dropped; the flush
    # fails and retries every second, keeping the head in memory), so the head grows
    # past 2 x head_max_bytes deterministically.
    head_max = 64 * 1024
    with Server(args=ADMIT_ARGS + ["--head-max-bytes", str(head_max)]) as s:
        s.block_flush()
        acked = []
        refused = refused_i = None
        for i in range(200):
            body = lines_body("h", "w%d" % i, 2000, devices=200)
            r = s.request("POST", "/write?db=h&precision=ms", body)
            if r.status == 204:
                acked.append(i)
                continue
            refused, refused_i = r, i
            break
        check(refused is not None, "the head guard never refused a write")
        eq(refused.status, 503, "head guard status (%r)" % refused.body[:300])
        check("retry-after" in refused.headers, "Retry-After on a head-guard 503")
        doc = refused.json()
        eq(doc["reason"], "head_memory")
        contains(doc["error"], "head_max_bytes")
        code, hdoc = health(s)
        eq(code, 503, "/health while the head is over its limit")
        contains(hdoc["reason"], "storage head")
        eq(hdoc["backpressure"]["head_shedding"], True)
        check(hdoc["backpressure"]["head_bytes"] > 2 * head_max, "head bytes %r" % hdoc)
        eq(metric(s, "bucketdb_head_shedding"), 1)
        check(metric(s, "bucketdb_backpressure_events_total", 'reason="head_memory"') >= 1,
              "head_memory events counted")
        # Still shedding: the next write is refused too, nothing of it written.
        r = s.request("POST", "/write?db=h&precision=ms", lines_body("h", "still", 10))
        eq(r.status, 503)
        # Flushing works again: the head drains, writes pass, /health is ok.
        s.unblock_flush()
        wait_for("/health ok after the head drained", lambda: health(s)[0] == 200)
        eq(metric(s, "bucketdb_head_shedding"), 0)
        s.write(lines_body("h", "late", 10).decode(), db="h", precision="ms")
        for i in acked:
            eq(count(s, "h", "w%d-%d" % (i, i % 200)), 10, "acknowledged write %d" % i)
        eq(count(s, "h", "w%d-0" % refused_i), 0, "nothing of the refused write")
        eq(count(s, "h", "late-0"), 10)
        eq(count(s, "h", "still-0"), 0, "nothing of the second refused write")


# ------------------------------------------------------------------ overload

def rss_kib(pid):
    """(VmRSS, RssAnon, RssFile) of a process in KiB, or None when it is gone."""
    got = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for ln in f:
                k, _, v = ln.partition(":")
                if k in ("VmRSS", "RssAnon", "RssFile"):
                    got[k] = int(v.split()[0])
    except OSError:
        return None
    if "VmRSS" not in got:
        return None
    return got["VmRSS"], got.get("RssAnon", 0), got.get("RssFile", 0)


ASAN_QUARANTINE_MB = 16


def asan_binary(path):
    """ASan builds keep freed memory in quarantine and carry shadow memory: the RSS
    bound below is for release builds."""
    try:
        with open(path, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


OVERLOAD_B = 8 * MIB
OVERLOAD_HEAD = 1 * MIB
OVERLOAD_BODY = 1 * MIB
OVERLOAD_THREADS = 24
OVERLOAD_REQS = 12          # per thread
OVERLOAD_SECONDS = 25       # and no longer than this
OVERLOAD_DEVICES = 300      # per thread, the same in every request
OVERLOAD_LINES = 18000      # per request, ~900 KB of line protocol


def overload_body(t, k):
    """Request k of client thread t: OVERLOAD_LINES samples over the thread's devices;
    the value says which request and line it came from, the time is unique."""
    out = []
    base = T0 + k * OVERLOAD_LINES
    for i in range(OVERLOAD_LINES):
        out.append("m,device=t%d-%d v=%d %d" % (t, i % OVERLOAD_DEVICES, k * 100000 + i, base + i))
    return ("\n".join(out) + "\n").encode()


@suite.test
def overload_bounded_memory_and_no_acknowledged_loss():
    args = ["--max-inflight-bytes", str(OVERLOAD_B), "--max-inflight-writes", "16",
            "--tenant-inflight-share", "100", "--max-body-bytes", str(OVERLOAD_BODY),
            "--head-max-bytes", str(OVERLOAD_HEAD)]
    env = None
    asan = asan_binary(BIN)
    if asan:
        # ASan keeps freed memory in a quarantine (256 MiB by default): make it small
        # and count it in the bound.
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":quarantine_size_mb=%d:"
                               "thread_local_quarantine_size_kb=64" % ASAN_QUARANTINE_MB)
    with Server(args=args, env=env) as s:
        pid = s.proc.pid
        # Create every device first: the catalog (devices, series) is data the server
        # keeps whatever the load, so the baseline is taken with it in place.
        for t in range(OVERLOAD_THREADS):
            s.write("\n".join("m,device=t%d-%d v=-1 %d" % (t, j, T0 - 1000)
                              for j in range(OVERLOAD_DEVICES)), db="o", precision="ms")
        s.flush()
        base = rss_kib(pid)
        results = []  # (thread, req, status, retry_after, reason)
        errors = []
        health_seen = set()
        peak = list(base)
        stop = threading.Event()
        lock = threading.Lock()
        deadline = time.monotonic() + OVERLOAD_SECONDS

        def sampler():
            while not stop.is_set():
                v = rss_kib(pid)
                if v:
                    for i in range(3):
                        peak[i] = max(peak[i], v[i])
                try:
                    r = s.get("/health")
                    health_seen.add((r.status, r.json()["status"]))
                except Exception:
                    pass
                time.sleep(0.02)

        def client(t):
            for k in range(OVERLOAD_REQS):
                if time.monotonic() > deadline:
                    return
                body = overload_body(t, k)
                try:
                    r = s.request("POST", "/write?db=o&precision=ms", body)
                except OSError as e:
                    with lock:
                        errors.append("t%d r%d: %s" % (t, k, e))
                    continue
                reason = None
                if r.status in (429, 503):
                    reason = r.json().get("reason")
                with lock:
                    results.append((t, k, r.status, r.headers.get("retry-after"), reason))

        smp = threading.Thread(target=sampler)
        smp.start()
        threads = [threading.Thread(target=client, args=(t,)) for t in range(OVERLOAD_THREADS)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(OVERLOAD_SECONDS + 60)
        stop.set()
        smp.join(30)
        check(s.running(), "the server died under overload:\n" + s.log()[-3000:])
        eq(errors, [], "connection errors")
        statuses = {}
        for _, _, st, ra, _ in results:
            statuses[st] = statuses.get(st, 0) + 1
            if st in (429, 503):
                check(ra is not None and int(ra) >= 1, "refusal without Retry-After")
        reasons = sorted({x[4] for x in results if x[4]})
        print("  overload: %d requests %r reasons %r; health seen %r"
              % (len(results), statuses, reasons, sorted(health_seen)))
        print("  RSS KiB (VmRSS, RssAnon, RssFile): base %r, peak %r" % (base, peak))
        check(set(statuses) <= {204, 503}, "unexpected statuses %r" % statuses)
        check(statuses.get(204, 0) > 0, "nothing was acknowledged")
        check(statuses.get(503, 0) > 0, "the load never reached the budgets (no 503)")
        check((503, "unhealthy") in health_seen, "/health never said unhealthy")
        # The bound, from the budgets: requests hold at most max_inflight_bytes (counted
        # on the high side), twice that for what the allocator and the parser hold
        # beyond the count; the head is shed above 2 x head_max_bytes, plus what the
        # admitted writes add and what a flush decodes: 8 x head_max_bytes; and 64 KiB
        # per connection (libmicrohttpd's buffers, the thread's stack pages). Under ASan
        # twice that plus its quarantine.
        extra = (2 * OVERLOAD_B + 8 * OVERLOAD_HEAD + OVERLOAD_THREADS * 64 * 1024) // 1024
        if ON_CASSANDRA:
            # the flush's requests in flight to Cassandra (16 batches of up to 100 rows,
            # the tier and state writes) and the session's frame buffers
            extra += 4 * 1024
        if asan:
            extra = 2 * extra + ASAN_QUARANTINE_MB * 1024
        bound = base[0] + extra
        print("  VmRSS bound %d KiB = base %d + %d KiB (2 x max_inflight_bytes + 8 x "
              "head_max_bytes + 64 KiB per connection%s); peak %d KiB"
              % (bound, base[0], extra, (" + 4 MiB of Cassandra requests" if ON_CASSANDRA else "") +
                 (", x2 + quarantine under ASan" if asan else ""), peak[0]))
        check(peak[0] <= bound, "VmRSS %d KiB over the bound %d KiB" % (peak[0], bound))
        # Back to healthy once the load is gone.
        wait_for("/health ok after the overload", lambda: s.get("/health").status == 200,
                 timeout=60)
        # Every acknowledged sample is stored; nothing of a refused request is.
        s.flush()
        got = {}
        r = s.get("/api/v1/export", db="o")
        eq(r.status, 200)
        pat = re.compile(r"m,device=t(\d+)-(\d+) v=(-?\d+) (\d+)$")
        for ln in r.text.splitlines():
            m = pat.match(ln)
            check(m, "export line %r" % ln)
            v = int(m.group(3))
            if v < 0:
                continue  # the warm-up sample
            k, i = divmod(v, 100000)
            t = int(m.group(1))
            check(int(m.group(2)) == i % OVERLOAD_DEVICES and
                  int(m.group(4)) // 10**6 == T0 + k * OVERLOAD_LINES + i,
                  "device and time of %r" % ln)
            got[(t, k)] = got.get((t, k), 0) + 1
        for t, k, st, _, _ in results:
            if st == 204:
                eq(got.get((t, k), 0), OVERLOAD_LINES, "samples of acknowledged t%d r%d" % (t, k))
            else:
                eq(got.get((t, k), 0), 0, "samples of refused t%d r%d" % (t, k))


if __name__ == "__main__":
    suite.main()
