#!/usr/bin/env python3
"""Crash tests for bucketdb: SIGKILL during ingestion, and torn WAL tails.

Run as   BUCKETDB_BIN=build/bucketdb python3 tests/crash/test_kill9.py
Ends with the line "N passed, M failed"; the exit status is non-zero on failure.
Python 3 standard library only; loopback only; every wait is bounded.

Test 1 (kill -9 loop). One server on port 0 and a temp data directory, with small
settings so that WAL segment rolls (32 KiB), head flushes to block files (500 ms)
and, through /internal/flush, compactions all happen while the kills land. Each
cycle: several writer threads post line-protocol batches of random size over
keep-alive connections (many devices and metrics, timestamps spread over hours,
some out of order); the server gets SIGKILL at a uniformly random moment 0.05-1.5 s
into the ingestion; it is restarted on the same directory and /api/v1/export must
hold every sample whose request got 204, with its exact value. Samples of requests
in flight at the kill may be present or not, but each request all or nothing, and
nothing may appear that was never sent. A sample once seen after a restart must stay.
Every value is derived from (device, metric, timestamp), so a wrong value is caught.
Every CRASH_RESET_EVERY kills (default 10) the server is killed once more, its data
directory (already checked after each of its kills) removed and a fresh one started
with a fresh model: the check after each restart then reads at most 25 kills' data,
so 200 kills fit the time one full-history run of ~110 took, and the guarantee stays
exact - every acknowledged sample of every directory is checked after every restart
of its directory, and the figures sum over the directories.

Test 2 (torn tail). After a SIGKILL the newest non-empty WAL segment is cut inside
its last record (a torn write), sometimes with the cut tail zero-filled, and the
server must start, report the cut in its log, truncate the segment where the record
before it ends, keep every acknowledged sample written before it, and drop the
samples of the cut record (decoded from the WAL record itself, format in
src/storage/embedded/core/db.c and wal.c). Every other round writes batches of thousands
of lines, so the cut record often spans 32 KiB WAL pages.

Environment: BUCKETDB_BIN, CRASH_KILLS (default 200, ASan builds too; ASan detected
through BDB_ASAN=1 or the ASan runtime in the binary; the documented long run is
CRASH_KILLS=1000 CRASH_BUDGET_S=3600), CRASH_RESET_EVERY (default 10; 0 keeps one
directory for the whole run), CRASH_BURST_MS (the kill lands uniformly in
20 ms .. this many ms of ingestion, default 400: short bursts buy many kills per
minute while the flusher, segment rolls and compactions still race them; the
original 1500 gives longer WAL tails), CRASH_TORN (rounds of test 2,
default 8; 4 under ASan), CRASH_SEED (printed; replays the same random choices,
not the same timing), CRASH_PAUSE_MS (mean pause between a writer's requests,
default 20: bounds the data set, which is checked in full after every kill),
CRASH_BUDGET_S (the kill loop stops early past it, default 85; 90 under ASan),
BDB_KEEP=1 keeps the temp directory with every server log.
"""

import http.client
import math
import os
import random
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import zlib

BIN = os.environ.get("BUCKETDB_BIN", "build/bucketdb")
KEEP = os.environ.get("BDB_KEEP") == "1"
SEED = int(os.environ.get("CRASH_SEED", str(int(time.time() * 1000) % 1000000007)))


def is_asan_build(path):
    if os.environ.get("BDB_ASAN") == "1":
        return True
    try:
        with open(path, "rb") as f:
            tail = b""
            for _ in range(4096):  # bounded: 4096 x 1 MiB
                blk = f.read(1 << 20)
                if not blk:
                    break
                if b"__asan_init" in tail + blk:
                    return True
                tail = blk[-32:]
    except OSError:
        pass
    return False


ASAN = is_asan_build(BIN)
KILLS = int(os.environ.get("CRASH_KILLS", "200"))
# Every this many kills the data directory starts afresh (with a fresh model), so the
# full check after each restart stays the size of K kills' data instead of growing
# with the whole run; 0 never resets (the documented long run keeps one directory).
RESET_EVERY = int(os.environ.get("CRASH_RESET_EVERY", "10"))
BURST_S = max(0.03, float(os.environ.get("CRASH_BURST_MS", "400")) / 1000.0)
TORN_ROUNDS = int(os.environ.get("CRASH_TORN", "4" if ASAN else "8"))
SLOW = 4.0 if ASAN else 1.0
# The kill loop stops early (and says so) past this many seconds, so a loaded machine
# cannot stretch the script without bound; it is a bound, never a pass/fail criterion.
KILL_BUDGET_S = float(os.environ.get("CRASH_BUDGET_S", "90" if ASAN else "85"))
START_TIMEOUT = 30.0 * SLOW
HTTP_TIMEOUT = 20.0 * SLOW
WRITERS = 4
DEVICES_PER_WRITER = 24
MEASUREMENTS = 3
FIELDS = 4
SEGMENT_BYTES = 32 * 1024  # test 1: small, so short bursts still roll segments
PAUSE_S = float(os.environ.get("CRASH_PAUSE_MS", "20")) / 1000.0  # mean pause per writer
SPAN_MS = 6 * 3600 * 1000  # timestamps spread over the last 6 hours

T_START = time.monotonic()


def log(msg):
    print("[%6.1fs] %s" % (time.monotonic() - T_START, msg), flush=True)


# ---------------------------------------------------------------- results

RESULTS = []
SERVERS = []  # every process started, so main() can make sure none outlives the test


def record(name, ok, detail=""):
    RESULTS.append((name, ok))
    print("%s ... %s%s" % (name, "ok" if ok else "FAIL", (": " + detail) if detail else ""),
          flush=True)


# ---------------------------------------------------------------- server

class Server:
    """One bucketdb process; stderr goes to its own log file."""

    def __init__(self, data, logdir, args, tag):
        self.data, self.args, self.tag = data, args, tag
        self.log_path = os.path.join(logdir, "%s.log" % tag)
        self.proc = None
        self.port = None
        self.recovery_s = None

    def start(self):
        errf = open(self.log_path, "wb")
        cmd = [BIN, "serve", "--data", self.data, "--listen", "127.0.0.1:0"] + self.args
        t0 = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf,
                                     stdin=subprocess.DEVNULL)
        errf.close()
        SERVERS.append(self)
        deadline = t0 + START_TIMEOUT
        out = b""
        fd = self.proc.stdout.fileno()
        while self.port is None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise RuntimeError("%s: no ready line within %.0f s; log:\n%s"
                                   % (self.tag, START_TIMEOUT, self.log_tail()))
            r, _, _ = select.select([fd], [], [], min(left, 0.5))
            if r:
                chunk = os.read(fd, 4096)
                if not chunk:
                    self.proc.wait(timeout=5)
                    raise RuntimeError("%s: exited with %s before ready; log:\n%s"
                                       % (self.tag, self.proc.returncode, self.log_tail()))
                out += chunk
                m = re.search(rb"listening on http://[^\s:]+:(\d+)", out)
                if m:
                    self.port = int(m.group(1))
        self.proc.stdout.close()
        # Recovery time: spawn until /ping answers.
        while True:
            try:
                st, _ = self.request("GET", "/ping", timeout=2.0 * SLOW)
                if st == 204:
                    break
            except (OSError, http.client.HTTPException):
                pass
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("%s: /ping never answered; log:\n%s"
                                   % (self.tag, self.log_tail()))
            time.sleep(0.005)
        self.recovery_s = time.monotonic() - t0
        return self

    def request(self, method, path, body=None, timeout=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port,
                                       timeout=timeout or HTTP_TIMEOUT)
        try:
            c.request(method, path, body=body)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def kill(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc:
            self.proc.wait(timeout=30)

    def stop(self):
        """SIGTERM and wait; returns the exit status."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60 * SLOW)
        except subprocess.TimeoutExpired:
            self.kill()
            return "timeout"

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=30):
        return "\n".join(self.log_text().splitlines()[-n:])

    def replay_stats(self):
        m = re.search(r"replayed (\d+) WAL records \((\d+) bytes, (\d+) segments\)",
                      self.log_text())
        return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


# ---------------------------------------------------------------- data model

class Model:
    """Everything sent, everything acknowledged, and what must survive.

    A sample key is the text "<measurement>,device=<device> <field> <ts_ms>" (metric =
    measurement.field), made from an export line by dropping the value; text keys keep
    the check of a million samples fast. Its value is value_of(...), unique."""

    def __init__(self):
        self.lock = threading.Lock()
        self.sent = {}        # key -> request id
        self.value = {}       # key -> the value sent
        self.requests = {}    # request id -> list of keys
        self.acked_req = set()
        self.must = set()     # keys that must be present: acknowledged or seen
        self.next_req = 0

    def new_request(self, keys, values):
        with self.lock:
            rid = self.next_req
            self.next_req += 1
            self.requests[rid] = keys
            for k, val in zip(keys, values):
                self.sent[k] = rid
                self.value[k] = val
            return rid

    def ack(self, rid):
        with self.lock:
            self.acked_req.add(rid)
            self.must.update(self.requests[rid])


DEV_IDS = {}


def dev_name(w, d):
    return "w%d-dev%02d" % (w, d)


for _w in range(WRITERS):
    for _d in range(DEVICES_PER_WRITER):
        DEV_IDS[dev_name(_w, _d)] = _w * DEVICES_PER_WRITER + _d


def value_of(base_ms, dev, m, f, ts):
    """Unique, exactly representable, derivable: 12 bits of series, 25 of time."""
    code = ((DEV_IDS[dev] * 16 + m * FIELDS + f) << 25) | (ts - base_ms)
    v = code / 4.0
    return -v if code & 1 else v


class Writer:
    """Owns a fixed set of devices; per device a cursor moving forward in event time
    and the set of timestamps used, so no key is ever sent twice."""

    def __init__(self, wid, base_ms, rng):
        self.wid, self.base, self.rng = wid, base_ms, rng
        self.devs = [dev_name(wid, d) for d in range(DEVICES_PER_WRITER)]
        self.cursor = {d: base_ms + rng.randrange(0, 3600 * 1000) for d in self.devs}
        self.used = {d: set() for d in self.devs}
        self.big = False  # batches of 1500-6000 lines: WAL records spanning 32 KiB pages

    def next_ts(self, dev):
        rng = self.rng
        for _ in range(100):
            if rng.random() < 0.15:  # out of order: anywhere in the past span
                ts = self.base + rng.randrange(0, max(1, self.cursor[dev] - self.base))
            else:
                self.cursor[dev] += rng.randrange(50, 3000)
                if self.cursor[dev] >= self.base + SPAN_MS:
                    self.cursor[dev] = self.base + rng.randrange(0, 3600 * 1000)
                ts = self.cursor[dev]
            if ts not in self.used[dev] and self.base <= ts < self.base + SPAN_MS:
                self.used[dev].add(ts)
                return ts
        raise RuntimeError("no free timestamp")

    def batch(self):
        rng = self.rng
        r = rng.random()
        if self.big:
            n = rng.randint(1500, 6000)
        elif r < 0.4:
            n = rng.randint(1, 5)
        elif r < 0.95:
            n = rng.randint(6, 60)
        else:
            n = rng.randint(61, 600)
        lines, keys, values = [], [], []
        for _ in range(n):
            dev = rng.choice(self.devs)
            ts = self.next_ts(dev)
            m = rng.randrange(MEASUREMENTS)
            nf = rng.randint(1, FIELDS)
            fields = sorted(rng.sample(range(FIELDS), nf))
            parts = []
            for f in fields:
                val = value_of(self.base, dev, m, f, ts)
                keys.append("m%d,device=%s f%d %d" % (m, dev, f, ts))
                values.append(val)
                parts.append("f%d=%r" % (f, val))
            lines.append("m%d,device=%s %s %d" % (m, dev, ",".join(parts), ts))
        return ("\n".join(lines) + "\n").encode(), keys, values


def writer_loop(w, port, model, stop, stats, pause=PAUSE_S):
    """Posts batches until stop is set or the server goes away."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        while not stop.is_set():
            body, keys, values = w.batch()
            rid = model.new_request(keys, values)
            try:
                conn.request("POST", "/write?precision=ms", body=body,
                             headers={"Content-Type": "text/plain"})
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                with model.lock:
                    stats["inflight"] += 1
                return  # the server is gone: this request stays unacknowledged
            if r.status == 204:
                model.ack(rid)
                with model.lock:
                    stats["acked_req"] += 1
            elif r.status in (429, 503):
                # Backpressure: refused, so not acknowledged (and allowed to be absent).
                with model.lock:
                    stats["refused"] += 1
                try:
                    back = float(r.getheader("Retry-After") or "0.1")
                except ValueError:
                    back = 0.1
                stop.wait(min(max(back, 0.01), 1.0))
                continue
            else:
                with model.lock:
                    stats["bad_status"].append(r.status)
                return
            # Pacing keeps the data set (checked in full after every kill) bounded.
            if pause:
                stop.wait(w.rng.uniform(0, 2 * pause))
    finally:
        conn.close()


def flusher_loop(port, stop, rng, stats):
    """Calls /internal/flush (flush + compaction) at random moments."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=HTTP_TIMEOUT)
    try:
        first = True
        while not stop.is_set():
            # The first call goes at once: the kill loop waits for it to complete.
            if not first:
                stop.wait(rng.uniform(0.0, 0.25))
            first = False
            try:
                conn.request("POST", "/internal/flush", body=b"")
                r = conn.getresponse()
                r.read()
            except (OSError, http.client.HTTPException):
                return
            if r.status == 204:
                stats["flush_calls"] += 1  # only this thread writes it
            else:
                stats["flush_bad"].append(r.status)
                return
    finally:
        conn.close()


EXPORT_LINE = re.compile(r"^([^,\s]+,device=[^,\s]+[^\s]*) ([^=\s]+)=(\S+) (-?\d+)000000$", re.M)


def export(srv):
    """Returns (samples {key: value}, duplicates, unparsable lines)."""
    st, body = srv.request("GET", "/api/v1/export")
    if st != 200:
        raise RuntimeError("export answered %d: %r" % (st, body[:200]))
    text = body.decode("utf-8", "replace")
    lines = text.count("\n") + (1 if text and not text.endswith("\n") else 0)
    rows = EXPORT_LINE.findall(text)
    bad = []
    if len(rows) != lines:  # some lines did not have the expected shape: find them
        bad = [ln for ln in text.splitlines() if ln and not EXPORT_LINE.match(ln)]
    # "m0,device=d f1=2.5 1700000000000000000" -> key "m0,device=d f1 1700000000000"
    got = {h + " " + f + " " + ms: v for h, f, v, ms in rows}  # values still text
    return got, len(rows) - len(got), bad


class Verdict:
    def __init__(self):
        self.lost = 0
        self.wrong = 0
        self.phantom = 0
        self.dups = 0
        self.unparsable = 0
        self.partial_req = 0
        self.examples = []

    def note(self, what):
        if len(self.examples) < 8:
            self.examples.append(what)

    def ok(self):
        return not (self.lost or self.wrong or self.phantom or self.dups or self.unparsable
                    or self.partial_req)

    def __str__(self):
        return ("lost %d, wrong value %d, never sent %d, duplicates %d, unparsable %d, "
                "partial requests %d; e.g. %s" % (self.lost, self.wrong, self.phantom,
                                                   self.dups, self.unparsable,
                                                   self.partial_req, self.examples))


def verify(srv, model, base, expect_absent=(), cycle_reqs=()):
    """Checks the export against the model; promotes seen in-flight samples to `must`.
    expect_absent: keys that must not be present (a cut record)."""
    got, dups, bad = export(srv)
    v = Verdict()
    v.dups = dups
    v.unparsable = len(bad)
    for b in bad[:3]:
        v.note("unparsable line %r" % b)

    def same(text, want):
        try:
            return float(text) == want
        except ValueError:
            return False

    with model.lock:
        want = model.value
        lost = model.must - got.keys()
        v.lost = len(lost)
        for k in sorted(lost)[:4]:
            v.note("lost %r (request %d)" % (k, model.sent[k]))
        for k, gv in got.items():
            wv = want.get(k)
            if wv is None:
                v.phantom += 1
                v.note("never sent %r = %r" % (k, gv))
            elif not same(gv, wv):
                v.wrong += 1
                v.note("wrong value %r: %r, want %r" % (k, gv, wv))
        for k in expect_absent:
            if k in got:
                v.phantom += 1
                v.note("sample of the cut record still present %r" % (k,))
        # Requests unacknowledged at the kill: all of their samples or none.
        seen_inflight = 0
        for rid in cycle_reqs:
            if rid in model.acked_req:
                continue
            keys = model.requests[rid]
            n = sum(1 for k in keys if k in got)
            if 0 < n < len(keys):
                v.partial_req += 1
                v.note("request %d partially present: %d of %d samples" % (rid, n, len(keys)))
            if n:
                seen_inflight += n
                model.must.update(k for k in keys if k in got)
    return v, len(got), seen_inflight


def checker_self_test(srv, model, base):
    """Proves verify() can fail: plants a lost sample, a wrong value and an unsent one
    in the model (not in the server) and expects each to be reported once."""
    with model.lock:
        present = next(iter(model.must))
        fake = "m0,device=w0-dev00 f0 %d" % (base - 1)  # never sent: before the span
        model.must.add(fake)
        model.value[fake] = 1.5
        model.sent[fake] = -1
        saved = model.value[present]
        model.value[present] = saved + 0.25
    try:
        v1, _, _ = verify(srv, model, base)
    finally:
        with model.lock:
            model.must.discard(fake)
            del model.value[fake], model.sent[fake]
            model.value[present] = saved
    with model.lock:
        model.must.discard(present)
        del model.value[present]
    try:
        v2, _, _ = verify(srv, model, base)
    finally:
        with model.lock:
            model.must.add(present)
            model.value[present] = saved
    v3, _, _ = verify(srv, model, base)
    ok = (v1.lost, v1.wrong, v1.phantom) == (1, 1, 0) and v2.phantom == 1 and v3.ok()
    return ok, "" if ok else "planted lost+wrong: %s; planted unsent: %s; restored: %s" % (
        v1, v2, v3)


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(math.ceil(p / 100.0 * len(s))) - 1))]


def sanitizer_reports(logdir):
    hits = []
    for name in sorted(os.listdir(logdir)):
        with open(os.path.join(logdir, name), "rb") as f:
            t = f.read().decode("utf-8", "replace")
        for pat in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                    "read failed", "stream ended early"):
            i = t.find(pat)
            if i >= 0:
                hits.append("%s: %s" % (name, pat))
                if len(hits) == 1:
                    print("%s:\n%s" % (name, "\n".join(t[max(0, i - 300):].splitlines()[:25])))
    return hits


# ---------------------------------------------------------------- test 1: kill -9 loop

def test_kill9(tmp, rng):
    data = os.path.join(tmp, "kill9-data")
    logdir = os.path.join(tmp, "kill9-logs")
    os.makedirs(logdir)
    args = ["--flush-interval-ms", "500ms", "--wal-segment-bytes", "32KiB",
            "--block-window-ms", "1h", "--log-level", "info"]
    base = int(time.time() * 1000) - SPAN_MS - 60000
    base -= base % 1000
    model = Model()
    writers = [Writer(i, base, random.Random(rng.random())) for i in range(WRITERS)]
    recov, replay_bytes, replay_recs = [], [], []
    recov_by_wal = []  # (WAL bytes replayed, spawn-to-/ping seconds) per restart
    inflight_total = inflight_seen = 0
    flush_calls = 0
    full_segments = set()
    bad_status = []
    failures = []
    started_ok = True
    all_ok = Verdict()

    srv = Server(data, logdir, args, "start-000").start()
    recov.append(srv.recovery_s)
    budget_end = time.monotonic() + KILL_BUDGET_S
    done_models = []  # models of the directories already checked and removed
    phase = {"flush wait": 0.0, "burst": 0.0, "join": 0.0, "restart": 0.0, "check": 0.0}
    epoch = 0
    for cycle in range(KILLS):
        if time.monotonic() > budget_end:
            log("time budget of %.0f s spent: stopping after %d of %d kills"
                % (KILL_BUDGET_S, cycle, KILLS))
            break
        if RESET_EVERY and cycle and cycle % RESET_EVERY == 0:
            # This directory has passed its check after every one of its kills: start
            # afresh so later checks do not re-read all of it.
            srv.kill()
            shutil.rmtree(data)
            done_models.append(model)
            model = Model()
            epoch += 1
            srv = Server(data, logdir, args, "start-%03d-fresh" % cycle).start()
        stop = threading.Event()
        stats = {"inflight": 0, "acked_req": 0, "refused": 0, "bad_status": [], "flush_calls": 0,
                 "flush_bad": []}
        first_req = model.next_req
        threads = [threading.Thread(target=writer_loop, args=(w, srv.port, model, stop, stats))
                   for w in writers]
        if cycle % 2 == 1:  # every other cycle, flushes and compactions race the kill
            threads.append(threading.Thread(
                target=flusher_loop, args=(srv.port, stop, random.Random(rng.random()), stats)))
        t_cycle = time.monotonic()
        for t in threads:
            t.start()
        if cycle % 4 == 1:
            # A flush with its compaction can outlast a short burst; every fourth cycle
            # let one complete (bounded) so compactions really happen, then kill amid
            # the next ones; the other flusher cycles kill amid the first one.
            wait_end = time.monotonic() + 5
            while stats["flush_calls"] == 0 and time.monotonic() < wait_end:
                time.sleep(0.01)
        t_kill = time.monotonic()
        phase["flush wait"] += t_kill - t_cycle
        time.sleep(rng.uniform(0.02, BURST_S))
        phase["burst"] += time.monotonic() - t_kill
        t_kill = time.monotonic()
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=30)
        stop.set()
        for t in threads:
            t.join(timeout=HTTP_TIMEOUT + 5)
        if any(t.is_alive() for t in threads):
            failures.append("cycle %d: a client thread did not finish" % cycle)
            break
        inflight_total += stats["inflight"]
        flush_calls += stats["flush_calls"]
        bad_status += stats["bad_status"] + stats["flush_bad"]
        wal = os.path.join(data, "wal")
        for name in os.listdir(wal):
            if os.path.getsize(os.path.join(wal, name)) >= SEGMENT_BYTES:
                full_segments.add((epoch, name))
        phase["join"] += time.monotonic() - t_kill
        t_kill = time.monotonic()
        srv = Server(data, logdir, args, "start-%03d" % (cycle + 1))
        try:
            srv.start()
        except RuntimeError as e:
            started_ok = False
            failures.append("cycle %d: restart failed: %s" % (cycle, e))
            break
        recov.append(srv.recovery_s)
        rs = srv.replay_stats()
        if rs:
            replay_recs.append(rs[0])
            replay_bytes.append(rs[1])
            recov_by_wal.append((rs[1], srv.recovery_s))
        phase["restart"] += time.monotonic() - t_kill
        t_kill = time.monotonic()
        v, nexp, seen = verify(srv, model, base, cycle_reqs=range(first_req, model.next_req))
        phase["check"] += time.monotonic() - t_kill
        inflight_seen += seen
        for attr in ("lost", "wrong", "phantom", "dups", "unparsable", "partial_req"):
            setattr(all_ok, attr, getattr(all_ok, attr) + getattr(v, attr))
        for e in v.examples:
            all_ok.note("cycle %d: %s" % (cycle, e))
        if cycle % 5 == 0 or not v.ok():
            log("kill %d/%d: %d acked requests this cycle, %d in flight; %d samples must "
                "survive, export has %d; %s" % (cycle + 1, KILLS, stats["acked_req"],
                                                stats["inflight"], len(model.must), nexp,
                                                "ok" if v.ok() else v))
        if not v.ok():
            print("server log (tail):\n" + srv.log_tail(20))
            break

    # A clean stop after all the crashes must flush and exit 0, and lose nothing.
    clean_ok, clean_detail = False, ""
    self_ok, self_detail = False, "not reached"
    if started_ok and srv.proc.poll() is None and not model.must:
        # The time budget can end the loop right after a fresh directory whose short
        # burst got nothing acknowledged: write some first, since the clean stop and
        # the checker's self-test need acknowledged samples to look at.
        stop = threading.Event()
        stats = {"inflight": 0, "acked_req": 0, "refused": 0, "bad_status": []}
        t = threading.Thread(target=writer_loop, args=(writers[0], srv.port, model, stop, stats))
        t.start()
        wait_end = time.monotonic() + 10 * SLOW
        while stats["acked_req"] < 1 and time.monotonic() < wait_end and t.is_alive():
            time.sleep(0.01)
        stop.set()
        t.join(timeout=HTTP_TIMEOUT + 5)
    if started_ok and srv.proc.poll() is None:
        rc = srv.stop()
        try:
            srv2 = Server(data, logdir, args, "after-clean-stop").start()
            v2, _, _ = verify(srv2, model, base)
            self_ok, self_detail = checker_self_test(srv2, model, base)
            rs2 = srv2.replay_stats()
            rc2 = srv2.stop()
            clean_ok = rc == 0 and rc2 == 0 and v2.ok()
            clean_detail = "exit %s, restart exit %s, %s; WAL records replayed after it: %s" % (
                rc, rc2, "intact" if v2.ok() else v2, rs2[0] if rs2 else "?")
        except RuntimeError as e:
            clean_detail = "restart after clean stop failed: %s" % e
    else:
        srv.kill()
        clean_detail = "not reached"

    logs = "\n".join(open(os.path.join(logdir, n), encoding="utf-8", errors="replace").read()
                     for n in sorted(os.listdir(logdir)))
    n_flush = len(re.findall(r"INFO  flush: ", logs))
    n_compact = len(re.findall(r"INFO  compaction: ", logs))
    models = done_models + [model]
    acked_samples = sum(len(m.requests[r]) for m in models for r in m.acked_req)
    acked_reqs = sum(len(m.acked_req) for m in models)
    kills = len(recov) - 1  # one restart per kill; fresh starts are not counted

    print("kill9 figures: kills %d of %d, acked requests %d, acked samples checked %d (every one "
          "after every restart), samples lost %d, in-flight requests at kills %d with %d "
          "samples recovered, /internal/flush calls %d, flushes %d, compactions %d, "
          "full 32KiB WAL segments seen %d, fresh data directories %d (every %d kills)" % (
              kills, KILLS, acked_reqs, acked_samples, all_ok.lost,
              inflight_total, inflight_seen, flush_calls, n_flush, n_compact,
              len(full_segments), epoch + 1, RESET_EVERY))
    print("kill9 seconds per phase over all kills: %s" % ", ".join(
        "%s %.1f" % kv for kv in phase.items()))
    print("kill9 recovery (spawn to /ping): p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d "
          "starts" % (pct(recov, 50) * 1e3, pct(recov, 99) * 1e3, max(recov) * 1e3, len(recov)))
    if replay_bytes:
        print("kill9 WAL replayed per restart: records p50 %d p99 %d; bytes p50 %d p99 %d "
              "max %d" % (pct(replay_recs, 50), pct(replay_recs, 99), pct(replay_bytes, 50),
                          pct(replay_bytes, 99), max(replay_bytes)))
        # Recovery time against the WAL it had to replay, in size classes.
        for lo, hi in ((0, 64 << 10), (64 << 10, 256 << 10), (256 << 10, 1 << 20),
                       (1 << 20, 1 << 62)):
            xs = [t for b, t in recov_by_wal if lo <= b < hi]
            if xs:
                print("kill9 recovery with WAL replay %s: p50 %.1f ms, p99 %.1f ms over %d "
                      "restarts" % ("%d-%d KiB" % (lo >> 10, hi >> 10) if hi < 1 << 62
                                    else ">= %d KiB" % (lo >> 10), pct(xs, 50) * 1e3,
                                    pct(xs, 99) * 1e3, len(xs)))

    record("kill9: every restart recovers and answers /ping", started_ok and not failures,
           "; ".join(failures))
    record("kill9: every acknowledged sample survives with its exact value",
           all_ok.lost == 0 and all_ok.wrong == 0 and acked_samples > 0,
           "" if all_ok.lost == 0 and all_ok.wrong == 0 else str(all_ok))
    record("kill9: nothing appears that was never sent, no duplicates",
           all_ok.phantom == 0 and all_ok.dups == 0 and all_ok.unparsable == 0,
           "" if all_ok.phantom == 0 and all_ok.dups == 0 else str(all_ok))
    record("kill9: a request in flight at the kill is all or nothing", all_ok.partial_req == 0,
           "" if all_ok.partial_req == 0 else str(all_ok))
    record("kill9: writes answered only 204 until the kill", not bad_status,
           "statuses %s" % sorted(set(bad_status)) if bad_status else "")
    enough = kills >= 6
    record("kill9: kills landed amid segment rolls, flushes and compactions",
           not enough or (n_flush > 0 and n_compact > 0 and len(full_segments) > 0),
           "flushes %d, compactions %d, full segments %d%s" % (
               n_flush, n_compact, len(full_segments),
               "" if enough else " (too few kills to require it)"))
    record("kill9: clean stop after the crashes exits 0 and keeps everything", clean_ok,
           clean_detail)
    record("kill9: the checker itself sees a lost, a wrong and an unsent sample", self_ok,
           self_detail)
    hits = sanitizer_reports(logdir)
    record("kill9: no sanitizer or read error in any server log", not hits, "; ".join(hits))


# ---------------------------------------------------------------- test 2: torn tail

WAL_PAGE = 32 * 1024
HDR = 7


def wal_records(buf):
    """Walks a segment as the server does; returns [(start, end, payload)] of the complete
    records before the first damaged place."""
    recs, pos, size = [], 0, len(buf)
    acc, rec_start, in_rec = b"", None, False
    while pos < size:
        page_end = (pos // WAL_PAGE + 1) * WAL_PAGE
        room = page_end - pos
        avail = min(page_end, size) - pos
        if room < HDR:
            if buf[pos:pos + avail].strip(b"\0"):
                break
            pos = page_end
            continue
        typ = buf[pos]
        if typ == 0 or typ > 4 or avail < HDR:
            break
        ln = buf[pos + 1] | buf[pos + 2] << 8
        end = pos + HDR + ln
        if HDR + ln > avail:
            break
        if typ in (2, 3) and end != page_end:
            break
        if (typ in (1, 2)) == in_rec:
            break
        crc = struct.unpack_from("<I", buf, pos + 3)[0]
        if zlib.crc32(buf[pos + HDR:end], zlib.crc32(bytes([typ]))) != crc:
            break
        if typ in (1, 2):
            rec_start, acc = pos, b""
        acc += buf[pos + HDR:end]
        in_rec = typ in (2, 3)
        pos = end
        if not in_rec:
            recs.append((rec_start, pos, acc))
    return recs


class Dec:
    def __init__(self, b):
        self.b, self.p = b, 0

    def u8(self):
        self.p += 1
        return self.b[self.p - 1]

    def uvarint(self):
        v = shift = 0
        for _ in range(10):
            c = self.b[self.p]
            self.p += 1
            v |= (c & 0x7F) << shift
            shift += 7
            if c < 0x80:
                return v
        raise ValueError("varint too long")

    def varint(self):
        u = self.uvarint()
        return (u >> 1) ^ -(u & 1)

    def str(self):
        n = self.uvarint()
        self.p += n
        return self.b[self.p - n:self.p].decode()


def batch_record_keys(payload):
    """The sample keys of a batch WAL record (format in src/storage/embedded/core/db.c);
    an empty list for any other record type."""
    d = Dec(payload)
    if d.u8() != 1:
        return []
    d.str()  # tenant
    names = [d.str() for _ in range(d.uvarint())]
    for _ in range(d.uvarint()):
        for _ in range(d.uvarint()):
            d.str()
            d.str()
    keys = []
    for _ in range(d.uvarint()):
        dev = d.str()
        ts = d.varint()
        d.uvarint()
        if d.u8():
            d.str()
        for _ in range(d.uvarint()):
            meas, field = names[d.uvarint()].split(".", 1)
            d.p += 8
            keys.append("%s,device=%s %s %d" % (meas, dev, field, ts))
    return keys


def test_torn_tail(tmp, rng):
    data = os.path.join(tmp, "torn-data")
    logdir = os.path.join(tmp, "torn-logs")
    os.makedirs(logdir)
    # No flush during the test (default interval 10 min): everything stays in the WAL.
    args = ["--wal-segment-bytes", "128KiB", "--block-window-ms", "1h"]
    base = int(time.time() * 1000) - SPAN_MS - 60000
    base -= base % 1000
    model = Model()
    w = Writer(0, base, random.Random(rng.random()))
    srv = Server(data, logdir, args, "torn-000").start()
    starts_ok, reported_ok, kept_ok, dropped_ok = True, True, True, True
    details = []
    cut_batches = cut_samples = 0
    cut_bytes = []
    cut_spanning = unfinished_tails = 0
    for rnd in range(TORN_ROUNDS):
        stop = threading.Event()
        stats = {"inflight": 0, "acked_req": 0, "refused": 0, "bad_status": []}
        first_req = model.next_req
        w.big = rnd % 2 == 1
        t = threading.Thread(target=writer_loop, args=(w, srv.port, model, stop, stats))
        t.start()
        # Kill once some requests are acknowledged, at a random moment after that.
        deadline = time.monotonic() + 10 * SLOW
        want = rng.randint(2, 6) if w.big else rng.randint(3, 40)
        while stats["acked_req"] < want and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05))
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=30)
        stop.set()
        t.join(timeout=HTTP_TIMEOUT + 5)
        if stats["bad_status"] or stats["acked_req"] == 0:
            details.append("round %d: statuses %s, %d acked" % (rnd, stats["bad_status"],
                                                                 stats["acked_req"]))
            starts_ok = False
            break
        # The newest segment holding a record; cut inside its last record.
        wal = os.path.join(data, "wal")
        segs = sorted(n for n in os.listdir(wal) if re.fullmatch(r"\d{20}", n))
        target = None
        for name in reversed(segs):
            path = os.path.join(wal, name)
            with open(path, "rb") as f:
                buf = f.read()
            recs = wal_records(buf)
            if recs:
                # The server keeps the bytes up to the end of the record before (the
                # page padding in between goes with the cut record).
                keep = recs[-2][1] if len(recs) > 1 else 0
                target = (name, path, buf, recs[-1], keep)
                break
        if target is None:
            details.append("round %d: no WAL record found" % rnd)
            starts_ok = False
            break
        name, path, buf, (rstart, rend, payload), keep = target
        if rstart // WAL_PAGE != (rend - 1) // WAL_PAGE:
            cut_spanning += 1
        size = len(buf)
        # The cut lands inside the last complete record. Bytes after it, if any, are a
        # record the kill interrupted mid-write (never acknowledged); cutting there
        # would leave the last record whole, and the server rightly keeps it.
        if rend < size:
            unfinished_tails += 1
        cut = rng.randrange(rstart + 1, rend)  # keep >= 1 byte of the record, drop >= 1
        zero_fill = rng.random() < 0.4
        with open(path, "r+b") as f:
            f.truncate(cut)
            if zero_fill:
                f.seek(cut)
                f.write(b"\0" * (size - cut))
        try:
            torn = batch_record_keys(payload)
        except (IndexError, ValueError) as e:
            starts_ok = False
            details.append("round %d: cannot decode the last WAL record (format changed?): %r"
                           % (rnd, e))
            break
        if torn:
            cut_batches += 1
            cut_samples += len(torn)
        cut_bytes.append(size - cut)
        with model.lock:
            torn_set = set(torn)
            model.must.difference_update(torn_set)
        try:
            srv = Server(data, logdir, args, "torn-%03d" % (rnd + 1)).start()
        except RuntimeError as e:
            starts_ok = False
            details.append("round %d: restart failed after cutting segment %s at %d: %s"
                           % (rnd, name, cut, e))
            break
        text = srv.log_text()
        segnum = int(name)
        pat = r"segment %d offset \d+: [^;]+; truncating to %d bytes" % (segnum, keep)
        if not re.search(pat, text) or "damaged place" not in text:
            reported_ok = False
            details.append("round %d: cut of segment %d at %d (record %d-%d, %s) not reported "
                           "as expected; log:\n%s" % (rnd, segnum, cut, rstart, rend,
                                                       "zero-filled" if zero_fill else "short",
                                                       srv.log_tail(8)))
        if os.path.getsize(path) != keep:
            reported_ok = False
            details.append("round %d: segment %d is %d bytes after recovery, want %d"
                           % (rnd, segnum, os.path.getsize(path), keep))
        v, _, _ = verify(srv, model, base, expect_absent=torn_set,
                         cycle_reqs=range(first_req, model.next_req))
        if v.lost or v.wrong:
            kept_ok = False
        if v.phantom or v.dups or v.partial_req or v.unparsable:
            dropped_ok = False
        if not v.ok():
            details.append("round %d: %s" % (rnd, v))
        log("torn %d/%d: segment %d cut at %d inside record [%d, %d) of %d bytes%s, %d "
            "samples in the cut record; %s" % (rnd + 1, TORN_ROUNDS, segnum, cut, rstart, rend,
                                               size, " + zero fill" if zero_fill else "",
                                               len(torn), "ok" if v.ok() else "FAIL"))
    srv.kill()
    acked_samples = sum(len(model.requests[r]) for r in model.acked_req)
    print("torn figures: rounds %d, acked samples %d, cut records holding a batch %d (%d "
          "samples dropped with them), cut records spanning pages %d, segments ending in "
          "an unfinished record %d, bytes cut p50 %d max %d"
          % (TORN_ROUNDS, acked_samples, cut_batches, cut_samples, cut_spanning,
             unfinished_tails, pct(cut_bytes, 50) if cut_bytes else 0,
             max(cut_bytes) if cut_bytes else 0))
    record("torn tail: the server starts after every cut", starts_ok, "; ".join(details))
    record("torn tail: the cut is reported and the segment truncated at the record start",
           reported_ok and starts_ok, "" if reported_ok else "; ".join(details))
    record("torn tail: every acknowledged sample before the torn record is kept",
           kept_ok and starts_ok and acked_samples > 0)
    record("torn tail: the cut record's samples are gone, nothing else appears",
           dropped_ok and starts_ok)
    hits = sanitizer_reports(logdir)
    record("torn tail: no sanitizer or read error in any server log", not hits,
           "; ".join(hits))


def main():
    rng = random.Random(SEED)
    print("bucketdb crash test: binary %s%s, kills %d, torn rounds %d, seed %d"
          % (BIN, " (ASan)" if ASAN else "", KILLS, TORN_ROUNDS, SEED), flush=True)
    if not os.access(BIN, os.X_OK):
        record("binary exists", False, BIN)
    else:
        tmp = tempfile.mkdtemp(prefix="bucketdb-crash.")
        try:
            for name, fn in (("kill9", test_kill9), ("torn tail", test_torn_tail)):
                try:
                    fn(tmp, random.Random(rng.random()))
                except Exception:
                    traceback.print_exc()
                    record("%s: ran to the end" % name, False, "exception above")
        finally:
            for s in SERVERS:
                try:
                    s.kill()
                except Exception:
                    pass
            if KEEP:
                print("kept %s" % tmp)
            else:
                shutil.rmtree(tmp, ignore_errors=True)
    passed = sum(1 for _, ok in RESULTS if ok)
    failed = len(RESULTS) - passed
    print("elapsed %.1f s" % (time.monotonic() - T_START))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
