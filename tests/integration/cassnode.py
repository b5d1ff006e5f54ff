"""One Apache Cassandra 2.1.0 test node on 127.0.0.1 for the integration tests,
started and stopped through scripts/cassandra.sh (free ports, 512 MB heap, everything
under a temporary directory). Shared by test_cassandra.py and test_cassandra_schema.py."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "cassandra.sh")
ADDR = "127.0.0.1"


def free_port(addrs=(ADDR,)):
    """A port free on every address given (a cluster's nodes share their ports)."""
    for _ in range(50):
        s = socket.socket()
        s.bind((addrs[0], 0))
        port = s.getsockname()[1]
        s.close()
        ok = True
        for a in addrs[1:]:
            t = socket.socket()
            try:
                t.bind((a, port))
            except OSError:
                ok = False
            finally:
                t.close()
        if ok:
            return port
    raise OSError("no port free on all of %r" % (addrs,))


class Node:
    """ready(node) runs a query and returns a CompletedProcess: the node counts as up
    once it exits 0 (with auth on, the default superuser appears just after the port
    opens, so the port alone is not enough)."""

    def __init__(self, prefix, cluster, ready, auth=False, addr=ADDR, seeds=None, tls=False,
                 tls_client_auth=False):
        """addr: 127.0.0.1-3 (a cluster: same native and storage ports on each
        address, given to start(); seeds: the seed addresses, default addr).
        tls: the native port speaks TLS only (scripts/cassandra.sh --tls); the node's
        key store and the client's PEM files (ca.pem, client.pem, client.key) are
        made in self.tls_dir; tls_client_auth: the node requires a client
        certificate."""
        self.addr = addr
        self.seeds = seeds
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.cluster = cluster
        self.ready = ready
        self.auth = auth
        self.tls_dir = os.path.join(self.dir, "tls") if tls else None
        self.tls_client_auth = tls_client_auth
        self.port = None
        self.storage_port = None
        self.pid = None
        self.error = None

    def start(self, same_ports=False, port=None, storage_port=None):
        """same_ports: start again on the ports and data of the previous start (after
        kill()); port/storage_port: these (the nodes of a cluster share them);
        otherwise new free ports."""
        if port:
            self.port, self.storage_port = port, storage_port
        elif not (same_ports and self.port):
            self.port = free_port()
            self.storage_port = free_port()
        t0 = time.monotonic()
        args = [SCRIPT, "start", "--dir", self.dir, "--addr", self.addr, "--port", str(self.port),
                "--storage-port", str(self.storage_port), "--cluster", self.cluster,
                "--heap", "512M"]
        if self.auth:
            args.append("--auth")
        if self.tls_dir:
            args += ["--tls", self.tls_dir]
            if self.tls_client_auth:
                args.append("--tls-client-auth")
        if self.seeds:
            args += ["--seeds", self.seeds]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=240)
        pidfile = os.path.join(self.dir, "cassandra.pid")
        if os.path.exists(pidfile):
            self.pid = int(open(pidfile).read().strip() or 0) or None
        if p.returncode != 0:
            self.error = ("cannot start Cassandra (scripts/cassandra.sh start exit %d):\n%s"
                          % (p.returncode, (p.stderr or "")[-3000:]))
            return False
        deadline = time.monotonic() + 60
        last = None
        while time.monotonic() < deadline:
            last = self.ready(self)
            if last.returncode == 0:
                print("cassandra: started PID %s on %s:%d in %.1fs"
                      % (self.pid, self.addr, self.port, time.monotonic() - t0), flush=True)
                return True
            time.sleep(0.5)
        self.error = "Cassandra started but no query worked within 60 s: %s" % (
            last.stderr if last else "")
        return False

    def kill(self, sig=9):
        """A signal to the node we started, waiting until it is gone (SIGKILL: a crash;
        with the package's periodic commit log a single node may lose its last 10 s of
        writes. SIGTERM: a clean stop, KILL after 30 s); the data directory stays for
        start(same_ports=True)."""
        if not self.pid:
            return
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline or sig != 9:
            if time.monotonic() >= deadline:
                sig = 9
                os.kill(self.pid, 9)
                deadline = time.monotonic() + 30
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        self.pid = None

    def stop(self):
        """TERM, then KILL after 30 s (scripts/cassandra.sh), only the node we started."""
        if self.pid:
            subprocess.run([SCRIPT, "stop", "--dir", self.dir], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=120)
            self.pid = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=4000):
        out = []
        for name in ("logs/system.log", "logs/stdout.log"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append("--- %s\n%s" % (name, f.read()[-n:]))
        return "\n".join(out)
