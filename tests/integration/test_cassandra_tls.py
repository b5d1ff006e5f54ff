#!/usr/bin/env python3
"""TLS between bucketdb and Apache Cassandra 2.1.0: `bucketdb cql --tls` and
`serve --storage cassandra://...?tls=true&ca=...&cert=...&key=...` against a real
node whose native port speaks TLS only and requires a client certificate
(scripts/cassandra.sh start --tls DIR --tls-client-auth: a JKS key store made with
keytool, its certificate exported as PEM for the client, a client certificate made
with openssl in the node's trust store).

ONE node for the whole file (cassnode.py: free ports, 512 MB heap, everything under
a temporary directory), stopped at the end. The tests:
- cql over TLS with the CA and the client certificate works (and says so with -v);
  a plain-TCP client, a wrong CA, no client certificate, a missing CA file and a
  client key that is not the certificate's each fail with exit 1 and a message
  naming host:port or the file and the reason, in bounded time; --tls-insecure
  skips the verification (wrong CA accepted);
- a server on the TLS URI ingests, flushes to Cassandra and reads back every
  acknowledged sample, after a clean restart too and after a kill -9 with samples
  only in its WAL (replayed and flushed over TLS at the next start); the rows are
  in the telemetry table (read with cql --tls);
- every TLS connection of a server cut (a TCP relay in between) during a flush:
  the flush fails or completes, the session reconnects with new handshakes, and a
  later flush stores every acknowledged sample exactly once;
- a bad TLS URI (tls=maybe, ca= without tls=true, a missing CA file, a wrong CA,
  no client certificate for this node) stops the server at start with the reason;
  with tls_verify=false the wrong CA is not checked.

If Java or the Cassandra package is missing every test FAILS with the reason.
    BUCKETDB_BIN=build/bucketdb python3 tests/integration/test_cassandra_tls.py"""

import os
import select
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cassnode  # noqa: E402
from bdbtest import (BIN, HOUR, MIN, Server, Suite, TestFailure, check, contains,  # noqa: E402
                     eq, tmpdir)

suite = Suite("test_cassandra_tls", embedded_only="starts its own Cassandra node")
KS = "bdb_tls_it"
T0 = 1_700_000_000_000 - 1_700_000_000_000 % HOUR  # a fixed hour in 2023


def tls_file(name):
    return os.path.join(NODE.tls_dir, name)


def cql(*stmts, tls=True, ca="ca.pem", cert="client.pem", key="client.key", extra=(),
        timeout=60):
    """bucketdb cql on the node; ca/cert/key are names in the node's TLS directory
    (None: not given) or absolute paths."""
    cmd = [BIN, "cql", "--host", cassnode.ADDR, "--port", str(NODE.port)] + list(extra)
    if tls:
        cmd.append("--tls")
        for flag, f in (("--ca", ca), ("--cert", cert), ("--key", key)):
            if f:
                cmd += [flag, f if os.path.isabs(f) else tls_file(f)]
    for s in stmts:
        cmd += ["-e", s]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


NODE = cassnode.Node("bucketdb-tls-", "bucketdb-tls-it",
                     lambda n: cql("SELECT release_version FROM system.local"),
                     tls=True, tls_client_auth=True)


def node():
    cassnode.ensure(NODE, TestFailure)
    return NODE


def uri(ks=KS, port=None, **keys):
    q = {"consistency": "ONE", "tls": "true", "ca": tls_file("ca.pem"),
         "cert": tls_file("client.pem"), "key": tls_file("client.key")}
    q.update(keys)
    return "cassandra://%s:%d/%s?%s" % (cassnode.ADDR, port or node().port, ks,
                                        "&".join("%s=%s" % kv for kv in q.items()
                                                 if kv[1] is not None))


def other_ca():
    """A self-signed certificate the node's chain does not lead to."""
    d = tmpdir("bdbtls-")
    pem = os.path.join(d, "other-ca.pem")
    p = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                        os.path.join(d, "other.key"), "-out", pem, "-days", "2",
                        "-subj", "/CN=not the node's CA"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    eq(p.returncode, 0, p.stderr)
    return pem, os.path.join(d, "other.key")


def fails(p, *wanted, label=""):
    """A cql run that must fail with exit 1 and every wanted text in stderr."""
    eq(p.returncode, 1, "%s: exit %d, stdout %r stderr %r" % (label, p.returncode, p.stdout,
                                                                p.stderr))
    for w in wanted:
        contains(p.stderr, w, label)


# ------------------------------------------------------------------ tests


@suite.test
def cql_over_tls():
    node()
    p = cql("SELECT release_version FROM system.local", extra=["-v"])
    eq(p.returncode, 0, p.stderr)
    eq(p.stdout.split(), ["release_version", "2.1.0"])
    contains(p.stderr, "over TLS")
    hostport = "%s:%d" % (cassnode.ADDR, NODE.port)
    # Plain TCP to a TLS-only port: refused, and the message points at --tls.
    t = time.monotonic()
    fails(cql("SELECT release_version FROM system.local", tls=False), hostport, "--tls",
          label="plain TCP")
    check(time.monotonic() - t < 30, "plain TCP took %.1fs to fail" % (time.monotonic() - t))
    # A CA the node's certificate does not chain to.
    wrong, wrong_key = other_ca()
    fails(cql("SELECT release_version FROM system.local", ca=wrong), hostport,
          "is not accepted", "self-signed certificate", label="wrong CA")
    # ... which --tls-insecure does not check.
    p = cql("SELECT release_version FROM system.local", ca=None, extra=["--tls-insecure"])
    eq(p.returncode, 0, p.stderr)
    # No client certificate: the node (require_client_auth) drops the connection.
    fails(cql("SELECT release_version FROM system.local", cert=None, key=None), hostport,
          "refused after the handshake", label="no client certificate")
    # Files that do not load.
    fails(cql("SELECT 1", ca="/nonexistent/ca.pem"), "cannot open the CA file",
          "/nonexistent/ca.pem", "No such file", label="missing CA file")
    fails(cql("SELECT 1", key=wrong_key), "client key", wrong_key, "does not match",
          label="key of another certificate")
    p = cql("SELECT 1", tls=False, extra=["--ca", tls_file("ca.pem")])
    eq(p.returncode, 2, "--ca without --tls: %r" % p.stderr)
    contains(p.stderr, "need --tls")


def samples(dev, start, n):
    return [(start + i * 1000, "m.v", float(i % 97) + 0.5) for i in range(n)]


def lines(dev, rows):
    return ["m,device=%s v=%r %d" % (dev, v, ts) for ts, _, v in rows]


def read_all(s, want):
    for dev, rows in sorted(want.items()):
        got = set(s.values(device=dev, **{"from": T0 - HOUR, "to": T0 + 3 * HOUR}))
        if got != set(rows):
            raise TestFailure("%s: %d missing, %d extra (of %d)" % (
                dev, len(set(rows) - got), len(got - set(rows)), len(rows)))


@suite.test
def serve_over_tls():
    node()
    data = os.path.join(tmpdir("bdbtls-srv-"), "data")
    s = Server(data=data, args=["--storage", uri(), "--flush-interval-ms", "1h"]).start()
    want = {}
    try:
        contains(s.log() + s.ready_text, "cassandra://")
        for k, dev in enumerate(["tls-a", "tls-b", "tls-c"]):
            rows = samples(dev, T0 + k * 20 * MIN, 600)
            s.write(lines(dev, rows), precision="ms")
            want[dev] = rows
        s.flush()  # 204 only once Cassandra confirmed every row, over TLS
        read_all(s, want)
        p = cql("SELECT COUNT(*) FROM %s.telemetry" % KS)
        eq(p.returncode, 0, p.stderr)
        eq(int(p.stdout.split()[-1]), sum(len(r) for r in want.values()), p.stdout)
        s.restart()  # clean stop flushes the head; reads come from Cassandra
        read_all(s, want)
        # Acknowledged but unflushed when bucketdb dies: in the WAL, replayed at the
        # next start and flushed over TLS.
        rows = samples("tls-d", T0 + HOUR, 500)
        s.write(lines("tls-d", rows), precision="ms")
        want["tls-d"] = rows
        s.kill()
        s.start()
        read_all(s, want)
        s.flush()
        p = cql("SELECT COUNT(*) FROM %s.telemetry" % KS)
        eq(p.returncode, 0, p.stderr)
        eq(int(p.stdout.split()[-1]), sum(len(r) for r in want.values()), p.stdout)
        s.stop()
    finally:
        s.kill()


class CutProxy:
    """A TCP relay from 127.0.0.1:port to the node whose cut() drops every
    connection through it at once, in the middle of TLS records for those in use: a
    network fault. The certificate still matches (same address, the session dials
    the contact point's port)."""

    def __init__(self, target_port):
        self.target = target_port
        self.lsock = socket.socket()
        self.lsock.bind((cassnode.ADDR, 0))
        self.lsock.listen(64)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.socks = []
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stop:
            if not select.select([self.lsock], [], [], 0.2)[0]:
                continue
            try:
                a, _ = self.lsock.accept()
                b = socket.create_connection((cassnode.ADDR, self.target), timeout=5)
                b.settimeout(None)
            except OSError:
                continue
            with self.lock:
                self.socks += [a, b]
                self.accepted += 1
            for x, y in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(x, y), daemon=True).start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for x in (src, dst):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self):
        """Drops every open connection; returns how many sockets it shut."""
        with self.lock:
            socks, self.socks = self.socks, []
        for x in socks:
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()
        return len(socks)

    def close(self):
        self.stop = True
        self.thread.join(timeout=5)
        self.cut()
        self.lsock.close()


def flush_until_ok(s, seconds=30):
    """POST /internal/flush until it answers 204 (a flush that met the fault fails
    and keeps everything in the WAL and the head); bounded."""
    deadline = time.monotonic() + seconds
    while True:
        r = s.post("/internal/flush")
        if r.status == 204:
            return
        if time.monotonic() > deadline:
            raise TestFailure("no flush worked within %ds: %d %r" % (seconds, r.status,
                                                                       r.body[:300]))
        time.sleep(0.5)


@suite.test
def tls_connections_cut():
    """Every TLS connection of the server cut during a flush: the flush may fail,
    the session reconnects (new TLS handshakes through the same context) and a later
    flush stores every acknowledged sample exactly once."""
    node()
    # The keyspace of serve_over_tls (creating one costs seconds of schema changes):
    # the devices differ, and rows are counted from what was there before.
    ks = KS
    proxy = CutProxy(NODE.port)
    # a new data directory on that keyspace: adopt=true takes it over (cass_owner.h)
    s = Server(args=["--storage", uri(ks, port=proxy.port, adopt="true"),
                     "--flush-interval-ms", "1h"])
    want = {}
    try:
        s.start()
        p = cql("SELECT COUNT(*) FROM %s.telemetry" % ks)
        eq(p.returncode, 0, p.stderr)
        rows_before = int(p.stdout.split()[-1])
        before = proxy.accepted
        for k in range(3):
            dev = "cut-%d" % k
            rows = samples(dev, T0 + k * 30 * MIN, 1500)
            s.write(lines(dev, rows), precision="ms")
            want[dev] = rows
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("r", s.post("/internal/flush")))
        t.start()
        time.sleep(0.05)
        cut = proxy.cut()
        t.join(timeout=120)
        check(not t.is_alive(), "flush hung after the cut")
        check(cut >= 2, "nothing to cut: %d sockets" % cut)
        print("  cut %d sockets during a flush, which answered %s" % (
            cut, result["r"].status if "r" in result else "nothing"), flush=True)
        rows = samples("cut-late", T0 + 2 * HOUR, 300)
        s.write(lines("cut-late", rows), precision="ms")
        want["cut-late"] = rows
        flush_until_ok(s)
        check(proxy.accepted > before, "no new connection after the cut")
        read_all(s, want)
        p = cql("SELECT COUNT(*) FROM %s.telemetry" % ks)
        eq(p.returncode, 0, p.stderr)
        eq(int(p.stdout.split()[-1]) - rows_before, sum(len(r) for r in want.values()),
           p.stdout)
        s.stop()
    finally:
        s.kill()
        proxy.close()


@suite.test
def bad_tls_uri_refused():
    node()
    missing = "/nonexistent/ca.pem"
    wrong, _ = other_ca()
    for u, want in [(uri(tls="maybe"), "tls=maybe must be true or false"),
                    (uri(tls=None), "need tls=true"),
                    (uri(ca=missing), "cannot open the CA file %s" % missing),
                    (uri(ca=wrong), "is not accepted: self-signed certificate"),
                    (uri(cert=None, key=None), "refused after the handshake")]:
        s = Server(args=["--storage", u])
        try:
            s.start()
        except TestFailure as e:
            contains(str(e), want)
        else:
            s.stop()
            raise TestFailure("server started with --storage %s" % u)
        finally:
            s.kill()
    # tls_verify=false: the same wrong CA is not checked (insecure, but it works).
    s = Server(args=["--storage", uri(ca=wrong, tls_verify="false", adopt="true")])
    try:
        s.start()
        s.stop()
    finally:
        s.kill()


if __name__ == "__main__":
    try:
        suite.main()
    finally:
        NODE.stop()
