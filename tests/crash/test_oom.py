#!/usr/bin/env python3
"""Allocation failure under the real server: refused or aborted, never wrong.

tests/crash/oom_preload.c (an LD_PRELOAD library built here with cc; no hook in the
server) makes allocation number N after a SIGUSR2 fail with ENOMEM, and every later
one, as real exhaustion would. For each path (line-protocol ingest, gzip and JSON
ingest, flush + compaction, query and export) and each N of a spread list, one server
on a shared data directory is armed and then driven down that path. It must either
refuse (an error status: the engine and the parsers answer BDB_ERR_NOMEM, a 500; or a
closed connection) or abort (SIGABRT with "out of memory" in its log: the server's
own allocation sites keep that policy, docs/RELIABILITY.md) - never answer 2xx for
data it did not store, and never answer a query with a wrong result. After each round
the server is restarted without the library on the same directory: it must start,
and every sample acknowledged in any round so far must be there with its exact value,
nothing unsent.

Release builds only: an AddressSanitizer runtime owns malloc, so under ASan the test
says so and checks nothing (the ASan CI pass runs it as a skip).
Figures: "oom figures: ...". Run as
    BUCKETDB_BIN=build/bucketdb python3 tests/crash/test_oom.py
OOM_NTH="1 2 5" overrides the list of N (the long run: OOM_NTH="$(seq 1 400)").
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from bdbtest import BIN, Server, Suite, check, eq, tmpdir  # noqa: E402

suite = Suite("test_oom")
T_BASE = 1700000000000  # ms
NTH = [int(x) for x in os.environ.get(
    "OOM_NTH", "1 2 5 14 40 120 250").split()]
ROUND_S = 2.0  # each armed round ends after this long even if the server survives


def asan_binary():
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    return "libasan" in out or os.environ.get("BDB_ASAN") == "1"


def build_preload(tmp):
    so = os.path.join(tmp, "oom_preload.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", so,
                    os.path.join(HERE, "oom_preload.c")], check=True,
                   capture_output=True, timeout=120)
    return so


class Model:
    """Every sample sent (key -> value) and the keys acknowledged."""

    def __init__(self):
        self.sent = {}
        self.acked = set()
        self.seq = 0

    def batch(self, dev, n):
        keys, lines = [], []
        for _ in range(n):
            self.seq += 1
            ts = T_BASE + self.seq * 1000
            val = self.seq + 0.25
            key = "oom,device=%s v %d" % (dev, ts)
            self.sent[key] = val
            keys.append(key)
            lines.append("oom,device=%s v=%r %d" % (dev, val, ts))
        return keys, "\n".join(lines) + "\n"


EXPORT_LINE = re.compile(r"^(oom,device=\S+) (\w+)=(\S+) (\d+)000000$", re.M)


def export(srv):
    r = srv.get("/api/v1/export")
    eq(r.status, 200, "export status")
    return {"%s %s %s" % (h, f, ts): float(v) for h, f, v, ts in EXPORT_LINE.findall(r.text)}


def check_restart(data, model, what):
    """Starts a plain server on data; checks every acked sample and nothing unsent."""
    srv = Server(data=data)
    srv.start()
    try:
        got = export(srv)
        lost = [k for k in model.acked if got.get(k) != model.sent[k]]
        phantom = [k for k in got if k not in model.sent]
        check(not lost, "%s: %d acknowledged samples lost or wrong, e.g. %s"
              % (what, len(lost), lost[:3]))
        check(not phantom, "%s: never-sent samples %s" % (what, phantom[:3]))
        # the next round starts from a flushed directory with some head data in it
        keys, body = model.batch("seed", 20)
        eq(srv.write(body, precision="ms").status, 204)
        model.acked.update(keys)
        return len(got)
    finally:
        srv.stop()


def drive(srv, path, model, rnd, answers):
    """Sends path's requests until the server dies or ROUND_S passes."""
    end = time.monotonic() + ROUND_S
    i = 0
    while time.monotonic() < end and srv.proc.poll() is None:
        i += 1
        try:
            if path in ("ingest-lp", "ingest-gzip", "ingest-json"):
                keys, body = model.batch("r%d-%s" % (rnd, path), 50)
                if path == "ingest-lp":
                    r = srv.write(body, expect=None, precision="ms")
                elif path == "ingest-gzip":
                    r = srv.write(body, gz=True, expect=None, precision="ms")
                else:
                    # metric "oom.v" is stored as measurement oom, field v
                    doc = [{"device": "r%d-%s" % (rnd, path), "time": int(k.split()[-1]),
                            "metrics": {"oom.v": model.sent[k]}} for k in keys]
                    r = srv.write_json(json.dumps(doc), expect=None)
                if 200 <= r.status < 300:
                    model.acked.update(keys)
            elif path == "flush":
                keys, body = model.batch("r%d-flush" % rnd, 30)
                r = srv.write(body, expect=None, precision="ms")
                if 200 <= r.status < 300:
                    model.acked.update(keys)
                r = srv.post("/internal/flush")
            else:  # query
                r = srv.get("/api/v1/export")
                if r.status == 200:
                    got = {"%s %s %s" % (h, f, ts): float(v)
                           for h, f, v, ts in EXPORT_LINE.findall(r.text)}
                    wrong = [k for k in model.acked if got.get(k) != model.sent[k]]
                    check(not wrong, "export answered 200 without acknowledged samples %s"
                          % wrong[:3])
                r = srv.get("/api/v1/query", device="seed", metric="oom.v")
            answers[r.status // 100] = answers.get(r.status // 100, 0) + 1
        except (OSError, http.client.HTTPException):
            # closed or cut short (an abort mid-answer): never an acknowledgement
            answers["conn"] = answers.get("conn", 0) + 1
            time.sleep(0.02)
        if i >= 20:  # the server now mostly survives: bound the round by requests too
            break


@suite.test
def allocation_failure_aborts_and_loses_nothing():
    if asan_binary():
        print("    skipped: %s is an ASan build (its runtime owns malloc); run the release "
              "build" % BIN)
        return
    tmp = tmpdir("bdboom-")
    so = build_preload(tmp)
    data = os.path.join(tmp, "data")
    model = Model()
    # A first plain start creates the directory and seeds it.
    check_restart(data, model, "first start")
    outcome = {}  # path -> {"abort": n, "refused": n}
    answers_all = {}
    rnd = 0
    for path in ("ingest-lp", "ingest-gzip", "ingest-json", "flush", "query"):
        for n in NTH:
            rnd += 1
            env = dict(os.environ, LD_PRELOAD=so, BDB_OOM_NTH=str(n),
                       BDB_OOM_PERSIST="1" if rnd % 4 == 0 else "0")
            srv = Server(data=data, env=env, args=["--flush-interval-ms", "200ms"])
            srv.start()
            # armed between requests: the count starts with this path's allocations
            srv.proc.send_signal(signal.SIGUSR2)
            time.sleep(0.01)
            answers = {}
            drive(srv, path, model, rnd, answers)
            for k, v in answers.items():
                answers_all[k] = answers_all.get(k, 0) + v
            o = outcome.setdefault(path, {"abort": 0, "alive": 0, "other": 0})
            if srv.proc.poll() is None:
                o["alive"] += 1  # every allocation failed was handled: refused, not acked
                srv.kill()
            else:
                rc = srv.proc.wait()
                log = srv.log()
                if rc == -signal.SIGABRT and "out of memory" in log:
                    o["abort"] += 1
                else:
                    o["other"] += 1
                    check(rc == -signal.SIGABRT,
                          "%s N=%d: exit %s (want SIGABRT after a failed allocation); log:\n%s"
                          % (path, n, rc, log[-1500:]))
                srv._gone()
            check_restart(data, model, "%s N=%d" % (path, n))
    acked = len(model.acked)
    print("oom figures: rounds %d (N in %s), per path aborted/still refusing/other %s; "
          "answers by class %s; acknowledged samples %d, lost 0 (checked after every round)"
          % (rnd, NTH, {p: "%d/%d/%d" % (o["abort"], o["alive"], o["other"])
                        for p, o in outcome.items()},
             {str(k): v for k, v in sorted(answers_all.items(), key=str)}, acked))
    # The engine and parsers answer NOMEM (500/503) where they used to abort; the
    # server's own sites (libmicrohttpd, response buffers) still abort. Either shows the
    # library armed.
    check(sum(o["abort"] for o in outcome.values()) + answers_all.get(5, 0)
          + answers_all.get("conn", 0) > 0, "no round failed: is the library armed?")


if __name__ == "__main__":
    suite.main()
