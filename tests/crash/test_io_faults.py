#!/usr/bin/env python3
"""I/O faults under the real server: fsync failing with EIO, and a full disk.

fsync EIO: tests/crash/fault_preload.c (an LD_PRELOAD library built here with cc, no
hook in the server) fails one fsync/fdatasync with EIO; later fsyncs succeed. The
write whose WAL fsync failed and every later write must be refused (503, never 2xx:
the fsyncgate lesson, no retry-then-acknowledge); /health and the log must say the
storage is read-only and why; after a restart every acknowledged sample is there.

Disk full: the data directory lies on a 4 MiB tmpfs mounted here (root with
CAP_SYS_ADMIN; otherwise the preload library's ENOSPC mode stands in and the test
says so). A ballast file fills it; writers run until the server answers 507; no
request answered 2xx may be missing afterwards; once the ballast is deleted the
server accepts writes again by itself, without a restart; a restart keeps everything
acknowledged. The server runs without a disk reserve (--disk-reserve-bytes 0): this is
the path where the WAL may fill the disk and the flush fails; the reserve that avoids
it is tests/crash/test_disk_full.py's subject. BDB_NO_MOUNT=1 forces the ENOSPC
fallback. Figures: "io-faults figures: ...".

Run as   BUCKETDB_BIN=build/bucketdb python3 tests/crash/test_io_faults.py
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from bdbtest import BIN, Server, Suite, check, eq  # noqa: E402

suite = Suite("test_io_faults")
T_BASE = 1700000000000  # ms; the server keeps everything (--retention-ms 0 by default)


def build_preload(tmp):
    so = os.path.join(tmp, "fault_preload.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", so,
                    os.path.join(HERE, "fault_preload.c"), "-ldl"], check=True,
                   capture_output=True, timeout=120)
    return so


def preload_env(so, fault_dir):
    env = dict(os.environ)
    libs = [so]
    # An ASan build (gcc) wants its runtime first in the list.
    out = subprocess.run(["ldd", BIN], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if "libasan" in line and "=>" in line:
            libs.insert(0, line.split("=>")[1].split()[0])
    env["LD_PRELOAD"] = " ".join(libs)
    env["BDB_FAULT_DIR"] = fault_dir
    return env


def lines_for(dev, i0, n):
    return "\n".join("io,device=%s v=%d.5 %d" % (dev, i, T_BASE + i * 1000)
                     for i in range(i0, i0 + n))


def stored(srv, dev):
    r = srv.get("/api/v1/query", device=dev, **{"from": str(T_BASE), "to": str(T_BASE + 10**9)})
    if r.status == 404:
        return {}
    eq(r.status, 200, "query %s: %r" % (dev, r))
    return {row[0]: row[2] for row in r.json()["values"] if row[1] == "io.v"}


def check_acked(srv, dev, acked):
    got = stored(srv, dev)
    lost = [i for i in acked if got.get(T_BASE + i * 1000) != i + 0.5]
    check(not lost, "%d of %d acknowledged samples lost or wrong, e.g. %s"
          % (len(lost), len(acked), lost[:5]))
    return len(acked)


@suite.test
def fsync_eio_turns_read_only_and_never_acks_after():
    tmp = tempfile.mkdtemp(prefix="bdb-iofault-")
    try:
        so = build_preload(tmp)
        fdir = os.path.join(tmp, "faults")
        os.makedirs(fdir)
        srv = Server(env=preload_env(so, fdir))
        srv.start()
        acked, i = [], 0
        for _ in range(20):
            r = srv.post("/write", lines_for("e", i, 10).encode(), precision="ms")
            eq(r.status, 204, "before the fault")
            acked += range(i, i + 10)
            i += 10
        open(os.path.join(fdir, "fsync-eio"), "w").close()
        statuses = []
        for _ in range(30):  # the first of these meets the failed fsync
            r = srv.post("/write", lines_for("e", i, 10).encode(), precision="ms")
            statuses.append(r.status)
            if r.status == 204:
                acked += range(i, i + 10)
            i += 10
        check(not os.path.exists(os.path.join(fdir, "fsync-eio")), "the fault never fired")
        first_bad = next((k for k, s in enumerate(statuses) if s != 204), None)
        check(first_bad is not None, "no write refused after the failed fsync: %s" % statuses)
        after = statuses[first_bad:]
        check(all(s == 503 for s in after),
              "after the failed fsync every write must be 503, got %s" % after)
        h = srv.get("/health")
        body = h.json()
        check(h.status == 503 or body.get("storage", {}).get("writable") is False,
              "/health: %r" % h)
        eq(body["storage"]["writable"], False, "/health storage.writable")
        check("fsync" in (body["storage"]["reason"] or ""), "/health reason: %r" % body)
        check(any("read-only" in x for x in body.get("reasons", [])), "/health reasons: %r" % body)
        check("read-only" in srv.log() and "fsync" in srv.log(), "log:\n" + srv.log()[-2000:])
        srv.kill()
        srv.env = None  # a healthy disk again
        srv.start()
        n = check_acked(srv, "e", acked)
        r = srv.post("/write", lines_for("e", i, 10).encode(), precision="ms")
        eq(r.status, 204, "writes accepted after a restart on a healthy disk")
        srv.stop()
        print("io-faults figures: fsync EIO: acknowledged samples lost 0 of %d; writes "
              "acknowledged after the failed fsync 0 of %d (all 503); /health writable=false "
              "with the fsync reason" % (n, len(after)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def try_mount_tmpfs(path, size):
    if os.geteuid() != 0 or os.environ.get("BDB_NO_MOUNT") == "1":
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%d" % size, "tmpfs", path],
                       capture_output=True, timeout=30)
    return r.returncode == 0


@suite.test
def disk_full_507_then_resumes_by_itself():
    tmp = tempfile.mkdtemp(prefix="bdb-diskfull-")
    mnt = os.path.join(tmp, "fs")
    os.makedirs(mnt)
    mounted = try_mount_tmpfs(mnt, 4 << 20)
    env, fdir = None, os.path.join(tmp, "faults")
    os.makedirs(fdir)
    try:
        data = os.path.join(mnt, "data")
        if not mounted:
            env = preload_env(build_preload(tmp), fdir)
        srv = Server(data=data, env=env,
                     args=["--wal-segment-bytes", "256KiB", "--disk-reserve-bytes", "0"])
        srv.start()
        ballast = os.path.join(mnt, "ballast")
        if mounted:
            # leave ~300 KiB free: the WAL fills it within a few hundred requests
            st = os.statvfs(mnt)
            free = st.f_bavail * st.f_frsize
            with open(ballast, "wb") as f:
                f.write(b"\0" * max(0, free - 300 * 1024))
        else:
            open(os.path.join(fdir, "enospc"), "w").close()
        acked, statuses, i = [], {}, 0
        deadline = time.monotonic() + 60
        full_seen = 0
        while time.monotonic() < deadline and i < 400000:
            r = srv.post("/write", lines_for("f", i, 200).encode(), precision="ms")
            statuses[r.status] = statuses.get(r.status, 0) + 1
            if r.status == 204:
                acked += range(i, i + 200)
            else:
                check(r.status in (507, 503), "disk full answered %r" % r)
                full_seen += 1
                if full_seen >= 5:
                    break
            i += 200
        check(full_seen >= 5, "never saw a full disk: %s" % statuses)
        check(srv.running(), "the server died on a full disk:\n" + srv.log()[-3000:])
        check_acked(srv, "f", acked)
        # a flush cannot write its blocks either: counted, and /health says "degraded"
        # (200: what was acknowledged is in the WAL, and the flush is retried)
        r = srv.post("/internal/flush")
        check(r.status >= 500, "a flush on a full disk answered %r" % r)
        h = srv.get("/health")
        doc = h.json()
        fl = doc["storage"]["flush"]
        check(fl["failing_in_a_row"] >= 1 and fl["failures_total"] >= 1, "/health flush %r" % fl)
        check(fl["failing_since"] and fl["last_error"], "/health flush %r" % fl)
        eq((h.status, doc["status"]), (200, "degraded"), "/health while flushes fail")
        check(len(doc["warnings"]) == 1 and doc["warnings"][0].startswith("flushing is failing")
              and "no space left on device" in doc["warnings"][0]
              and doc["reason"] == doc["warnings"][0], "/health warnings %r" % doc)
        # space returns: writes resume without a restart (bounded wait)
        if mounted:
            os.unlink(ballast)
        else:
            os.unlink(os.path.join(fdir, "enospc"))
        resumed_after = None
        t0 = time.monotonic()
        while time.monotonic() - t0 < 30:
            r = srv.post("/write", lines_for("f", i, 200).encode(), precision="ms")
            if r.status == 204:
                acked += range(i, i + 200)
                resumed_after = time.monotonic() - t0
                break
            i += 200
            time.sleep(0.1)
        check(resumed_after is not None,
              "writes did not resume after space returned:\n" + srv.log()[-3000:])
        i += 200
        for _ in range(10):
            r = srv.post("/write", lines_for("f", i, 200).encode(), precision="ms")
            eq(r.status, 204, "after space returned")
            acked += range(i, i + 200)
            i += 200
        r = srv.post("/internal/flush")
        eq(r.status, 204, "a flush once space returned (%r)" % r.body[:300])
        doc = srv.get("/health").json()
        fl = doc["storage"]["flush"]
        eq((fl["failing_in_a_row"], fl["failing_since"], fl["last_error"]), (0, None, None),
           "/health flush after a good flush")
        eq((doc["status"], doc["reason"], doc["warnings"]), ("ok", None, []),
           "/health after a good flush")
        failures = fl["failures_total"]
        check("bucketdb_flush_failures_total %d\n" % failures in srv.get("/metrics").text,
              "/metrics bucketdb_flush_failures_total")
        srv.kill()
        srv.start()
        n = check_acked(srv, "f", acked)
        srv.stop()
        print("io-faults figures: disk full (%s): answers %s; acknowledged samples lost 0 of %d; "
              "first write accepted %.1f s after space returned, no restart; %d failed flush(es) "
              "counted in /health (degraded) and /metrics, 0 in a row after" % (
                  "4 MiB tmpfs" if mounted else "ENOSPC through LD_PRELOAD, mount not permitted",
                  ", ".join("%d x%d" % kv for kv in sorted(statuses.items())), n,
                  resumed_after, failures))
    finally:
        if mounted:
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(suite.main())
