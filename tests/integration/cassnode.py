"""One Apache Cassandra 2.1.0 test node on 127.0.0.1 for the integration tests,
started and stopped through scripts/cassandra.sh (free ports, 512 MB heap, everything
under a temporary directory), used by the tests/integration/test_cassandra*.py files.

The shared node: files that never stop, kill, freeze or reconfigure their node
(test_cassandra_schema.py, test_cassandra_state.py) call node_for(), which gives a
SharedNode when BDB_CASSANDRA_NODE=HOST:PORT names a running node (tests/run starts
one per mode with this module's command line, below) and a Node of their own
otherwise; keyspace() then gives each of their keyspaces a per-run suffix, so that
files (or two runs of one file) on the same node never see each other's rows.

    python3 tests/integration/cassnode.py start --bin BIN [--cluster NAME]
        starts a throwaway node (on /dev/shm when it has room), waits (bounded) until
        `BIN cql` gets an answer, prints "HOST:PORT DIR PID" and exits 0; on failure
        prints why (and the node's log tail) on stderr, removes it and exits 1.
    python3 tests/integration/cassnode.py check DIR HOST:PORT --bin BIN
        exit 0 when the node still runs and answers a query, else 1 with the reason.
    python3 tests/integration/cassnode.py stop DIR
        KILL and remove it (the node is thrown away, see Node.stop)."""

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "cassandra.sh")
ADDR = "127.0.0.1"


def ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port(addrs=(ADDR,)):
    """A port free on every address given (a cluster's nodes share their ports), below
    the kernel's ephemeral range: the JVM binds it seconds after it is picked (and
    again after a restart on the same ports), and every test server binding port 0
    meanwhile draws from the ephemeral range, so it cannot take this one."""
    lo, _ = ephemeral_range()
    top = lo - 1 if lo > 12000 else 32767
    rng = random.Random()
    for _ in range(200):
        port = rng.randint(10000, top)
        ok = True
        for a in addrs:
            t = socket.socket()
            try:
                t.bind((a, port))
            except OSError:
                ok = False
            finally:
                t.close()
            if not ok:
                break
        if ok:
            return port
    raise OSError("no port free on all of %r" % (addrs,))



def zombie(pid):
    """True when pid has exited but its parent (init, once cassandra.sh returned) has
    not reaped it yet: such a process still answers kill(pid, 0)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False

class Node:
    """ready(node) runs a query and returns a CompletedProcess: the node counts as up
    once it exits 0 (with auth on, the default superuser appears just after the port
    opens, so the port alone is not enough)."""

    def __init__(self, prefix, cluster, ready, auth=False, addr=ADDR, seeds=None, tls=False,
                 tls_client_auth=False, dc=None, rack=None):
        """addr: 127.0.0.1-3 (a cluster: same native and storage ports on each
        address, given to start(); seeds: the seed addresses, default addr).
        dc, rack: the node's data center and rack (GossipingPropertyFileSnitch);
        None: one DC, SimpleSnitch.
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
        self.dc, self.rack = dc, rack
        self.port = None
        self.storage_port = None
        self.pid = None
        self.error = None

    def start(self, same_ports=False, port=None, storage_port=None, ring_delay_ms=None):
        """same_ports: start again on the ports and data of the previous start (after
        kill()); port/storage_port: these (the nodes of a cluster share them);
        otherwise new free ports. ring_delay_ms: how long a joining node waits to hear
        from a seed (scripts/cassandra.sh's default 1000 when None)."""
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
        if ring_delay_ms:
            args += ["--ring-delay-ms", str(ring_delay_ms)]
        if self.dc:
            args += ["--dc", self.dc, "--rack", self.rack or "rack1"]
        p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=240)
        pidfile = os.path.join(self.dir, "cassandra.pid")
        if os.path.exists(pidfile):
            self.pid = int(open(pidfile).read().strip() or 0) or None
        if p.returncode != 0:
            self.error = ("cannot start Cassandra (scripts/cassandra.sh start exit %d):\n%s"
                          % (p.returncode, (p.stderr or "")[-3000:]))
            return False
        # a loaded CI machine (two test files at once beside the shared node) has seen
        # a started node answer no query for a minute: give it two
        deadline = time.monotonic() + 120
        last = None
        while time.monotonic() < deadline:
            last = self.ready(self)
            if last.returncode == 0:
                print("cassandra: started PID %s on %s:%d in %.1fs"
                      % (self.pid, self.addr, self.port, time.monotonic() - t0), flush=True)
                return True
            time.sleep(0.5)
        self.error = "Cassandra started but no query worked within 120 s: %s" % (
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
            if zombie(self.pid):
                break  # dead; init reaps it when it gets to it
            time.sleep(0.1)
        self.pid = None

    def stop(self):
        """The end of a file: KILL the node we started (by its PID) and remove its
        directory. Its data is thrown away, so a clean TERM (Cassandra drains for about
        5 s) would buy nothing; tests that need a clean stop use kill(SIGTERM)."""
        if self.pid:
            self.kill(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=4000):
        out = []
        for name in ("logs/system.log", "logs/stdout.log"):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append("--- %s\n%s" % (name, f.read()[-n:]))
        return "\n".join(out)


def start_cluster(nodes, port, storage_port, seed, peers, failure=RuntimeError):
    """Starts nodes one after the other (2.1 refuses concurrent bootstraps) on the
    cluster's shared ports, then waits until seed lists `peers` other nodes. The test
    script's short ring delay (1 s) can make a joining node give up on the seed on a
    loaded machine ("Unable to contact any seeds!"): such a node is started again with
    5, then 15 s to hear from the seed (a fresh-clone CI at 2c1351c failed three times
    in a row with 1 s each)."""
    for n in nodes:
        for delay in (None, 5000, 15000):
            if n.start(port=port, storage_port=storage_port, ring_delay_ms=delay):
                break
            print("cassandra: %s failed to join (%s); again" % (
                n.addr, n.error.strip().splitlines()[-1]), flush=True)
            n.kill()
            time.sleep(2)
        else:
            raise failure(n.error + "\n" + n.log_tail())
    wait_peers(seed, peers, failure)


def wait_peers(seed, want, failure=RuntimeError):
    """Waits (60 s at most) until seed's system.peers lists want nodes."""
    deadline = time.monotonic() + 60
    p = None
    while time.monotonic() < deadline:
        p = cql(seed, "SELECT peer FROM system.peers")
        if p.returncode == 0 and len(p.stdout.strip().splitlines()) == want + 1:  # + header
            return
        time.sleep(0.5)
    raise failure("the nodes did not see each other: %r" % (p.stdout if p else None))


SHARED_ENV = "BDB_CASSANDRA_NODE"
_RUN_TAG = "r%d%02d" % (os.getpid() % 100000, int(time.time()) % 100)


def shared_addr():
    """(host, port) of the node named by $BDB_CASSANDRA_NODE, or None."""
    v = os.environ.get(SHARED_ENV, "")
    if not v:
        return None
    host, _, port = v.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("%s=%r: expected HOST:PORT" % (SHARED_ENV, v))
    return host, int(port)


class SharedNode:
    """A node started by someone else (tests/run) for several files: the same
    attributes as Node for what a sharing file uses (addr, port, dir for scratch
    files, error, start/stop/log_tail), but it is never started, killed or stopped
    here: kill() raises, since other files still need the node."""

    def __init__(self, prefix, ready, host, port):
        self.addr = host
        self.port = port
        self.storage_port = None
        self.ready = ready
        self.dir = tempfile.mkdtemp(prefix=prefix)  # scratch files of the test only
        self.pid = None
        self.error = None
        self.tls_dir = None

    def start(self, **_):
        """Waits (at most 60 s) until the node answers; a clear error otherwise."""
        deadline = time.monotonic() + 60
        last = None
        while time.monotonic() < deadline:
            last = self.ready(self)
            if last.returncode == 0:
                print("cassandra: the shared node %s:%d (%s)" % (self.addr, self.port, SHARED_ENV),
                      flush=True)
                return True
            time.sleep(0.5)
        self.error = ("the shared Cassandra node %s=%s:%d answered no query within 60 s: %s"
                      % (SHARED_ENV, self.addr, self.port, (last.stderr if last else "").strip()))
        return False

    def kill(self, sig=9):
        raise RuntimeError("a file on the shared Cassandra node (%s) must not kill it; "
                           "use a Node of its own" % SHARED_ENV)

    def stop(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, n=4000):
        d = os.environ.get(SHARED_ENV + "_DIR", "")
        path = os.path.join(d, "logs", "system.log")
        if d and os.path.exists(path):
            with open(path, errors="replace") as f:
                return "--- shared node %s\n%s" % (path, f.read()[-n:])
        return ""


_STARTED = {}


def ensure(node, failure=RuntimeError):
    """node (a Node or SharedNode), started the first time a test of the file asks for
    it; failure(reason) is raised then and at every later call if it did not start, so
    that one broken start fails each test with the reason instead of retrying it."""
    if id(node) not in _STARTED:
        _STARTED[id(node)] = None if node.start() else (node.error or "the node did not start")
    if _STARTED[id(node)]:
        raise failure(_STARTED[id(node)])
    return node


def running(node, failure=RuntimeError):
    """ensure(), and a node of the file's own that an earlier test stopped and failed
    before starting again is started again on its ports (files that stop their node)."""
    ensure(node, failure)
    if not node.pid and not node.start(same_ports=True):
        raise failure(node.error or "the node did not restart")
    return node


def node_for(prefix, cluster, ready, **kw):
    """The shared node when $BDB_CASSANDRA_NODE is set, else a Node of this file's own
    (kw as Node's). Only for files that leave the node as it is."""
    a = shared_addr()
    if a:
        return SharedNode(prefix, ready, a[0], a[1])
    return Node(prefix, cluster, ready, **kw)


def cql(node, *stmts, timeout=60, consistency=None):
    """Runs `bucketdb cql -e STMT ...` on node (its addr and port), at consistency
    (the command's default when None): the completed process, stdout and stderr as
    text (the caller checks the return code)."""
    cmd = [os.environ.get("BUCKETDB_BIN", "build/bucketdb"), "cql", "--host", node.addr,
           "--port", str(node.port)]
    if consistency:
        cmd += ["--consistency", consistency]
    for st in stmts:
        cmd += ["-e", st]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def cql_rows(node, stmt, failure=RuntimeError):
    """The rows of one statement as lists of cells (`bucketdb cql` prints them
    tab-separated under a header line); failure(message) when it fails."""
    p = cql(node, stmt)
    if p.returncode != 0:
        raise failure("cql %r: %s" % (stmt, p.stderr))
    lines = p.stdout.strip("\n").split("\n")
    return [ln.split("\t") for ln in lines[1:] if ln]


def answers(node):
    """The readiness check of a node (Node's `ready`): a query through bucketdb's own
    client."""
    return cql(node, "SELECT release_version FROM system.local")


def main(suite, *nodes):
    """Runs a test file's suite, then stops each node it started (a stopped one, or a
    shared node's scratch directory: its directory removed)."""
    try:
        suite.main()
    finally:
        for n in nodes:
            if n.pid:
                n.stop()
            else:
                shutil.rmtree(n.dir, ignore_errors=True)


def keyspace(name):
    """name on a node of the file's own; name_<run tag> on the shared node, so that its
    keyspaces are new even when the same file ran on that node before."""
    if not os.environ.get(SHARED_ENV):
        return name
    return "%s_%s" % (name, _RUN_TAG)


# ------------------------------------------------------------------ command line


def _node_base():
    """/dev/shm when it has room (schema changes cost about 1 s there against 5 s on
    the disk, see tests/cassandra-suite), else the usual temporary directory."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) and \
            shutil.disk_usage("/dev/shm").free > (2 << 30):
        return "/dev/shm"
    return None


def _query(bin_, host, port):
    return subprocess.run([bin_, "cql", "--host", host, "--port", str(port), "-e",
                           "SELECT release_version FROM system.local"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)


def _runs_from(pid, d):
    """True when PID is the Java process of the node in directory d (its command line
    names d's cassandra.yaml): a PID file outliving its node must not make us signal
    whatever process got that number since."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return ("%s/cassandra.yaml" % os.path.realpath(d)).encode() in f.read()
    except OSError:
        return False


def _cli(argv):
    usage = ("usage: cassnode.py start --bin BIN [--cluster NAME] | check DIR HOST:PORT --bin BIN"
             " | stop DIR")
    if not argv:
        print(usage, file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    opts, args = {}, []
    while rest:
        if rest[0] in ("--bin", "--cluster") and len(rest) > 1:
            opts[rest[0]] = rest[1]
            rest = rest[2:]
        else:
            args.append(rest.pop(0))
    if cmd == "start" and "--bin" in opts and not args:
        bin_ = opts["--bin"]
        old = tempfile.tempdir
        tempfile.tempdir = _node_base()
        try:
            cluster = opts.get("--cluster", "bucketdb-shared")
            n = Node("%s-node-" % cluster, cluster,
                     lambda n: _query(bin_, n.addr, n.port))
        finally:
            tempfile.tempdir = old
        try:
            with contextlib.redirect_stdout(sys.stderr):  # stdout is the answer line only
                ok = n.start()
        except Exception as e:  # e.g. scripts/cassandra.sh hanging past its timeout
            ok, n.error = False, "cannot start Cassandra: %r" % (e,)
        if not ok:
            print("cassnode: %s" % n.error, file=sys.stderr)
            tail = n.log_tail()
            if tail:
                print(tail, file=sys.stderr)
            n.stop()
            return 1
        print("%s:%d %s %d" % (n.addr, n.port, n.dir, n.pid or 0))
        return 0
    if cmd == "check" and "--bin" in opts and len(args) == 2:
        d, addr = args
        host, _, port = addr.rpartition(":")
        try:
            pid = int(open(os.path.join(d, "cassandra.pid")).read().strip() or 0)
            os.kill(pid, 0)
        except (OSError, ValueError):
            print("cassnode: the shared Cassandra node of %s is gone (died or killed)" % d,
                  file=sys.stderr)
            return 1
        p = _query(opts["--bin"], host, int(port))
        if p.returncode != 0:
            print("cassnode: the shared Cassandra node %s (PID %d) answers no query: %s"
                  % (addr, pid, p.stderr.strip()), file=sys.stderr)
            return 1
        return 0
    if cmd == "stop" and len(args) == 1:
        n = Node("unused-", "unused", None)
        shutil.rmtree(n.dir, ignore_errors=True)
        n.dir = args[0]
        try:
            n.pid = int(open(os.path.join(n.dir, "cassandra.pid")).read().strip() or 0) or None
        except (OSError, ValueError):
            n.pid = None
        if n.pid and _runs_from(n.pid, n.dir):
            try:
                n.kill(signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(n.dir, ignore_errors=True)
        return 0
    print(usage, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_cli(sys.argv[1:]))
