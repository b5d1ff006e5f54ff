#!/usr/bin/env python3
"""Slow clients and connection floods, on loopback, bounded in count and time:
slowloris clients (headers or a body dribbled a byte at a time) do not stop the
server answering /health and taking writes, and are closed once they miss the header
deadline or the minimum body rate (docs/API.md#slow-clients); a flood of idle connections past
`http_threads_max` is capped (the server's connection threads never exceed the cap,
extra connections are closed) and the server answers again once the flood ends."""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, now_ms  # noqa: E402

suite = Suite("slow_clients")
CAP = 24  # http_threads_max in these tests


def threads(s):
    with open("/proc/%d/status" % s.proc.pid) as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return -1


def open_conn(port):
    c = socket.create_connection(("127.0.0.1", port), timeout=5)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def closed_by_server(c, wait=0.5):
    """True when the server closed c (EOF or reset) within wait seconds."""
    c.settimeout(wait)
    try:
        return c.recv(1) == b""
    except socket.timeout:
        return False
    except OSError:
        return True


def health_ok(s, tries=20):
    """GET /health answers 200 within a bounded number of tries (0.1 s apart)."""
    for _ in range(tries):
        try:
            if s.get("/health").status == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


class Dribbler(threading.Thread):
    """Sends `data` one byte every `gap` seconds until stopped (or it runs out)."""

    def __init__(self, port, data, gap):
        super().__init__(daemon=True)
        self.sock = open_conn(port)
        self.data, self.gap = data, gap
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        try:
            for b in self.data:
                if self.stop.wait(self.gap):
                    break
                self.sock.sendall(bytes([b]))
                self.sent += 1
        except OSError:
            pass

    def close(self):
        self.stop.set()
        self.join(timeout=5)
        self.sock.close()


@suite.test
def slowloris_does_not_block_health_or_writes():
    with Server(args=["--http-threads-max", str(CAP)]) as s:
        head = b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: 60\r\n"
        slow = [Dribbler(s.port, head + b"X-Slow: " + b"a" * 200, 0.05) for _ in range(CAP // 2)]
        # slow bodies: headers complete, then a byte at a time
        body = b"m,device=slowbody v=1 %d\n" % now_ms()
        req = (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
               % len(body))
        bodies = []
        for _ in range(4):
            d = Dribbler(s.port, body, 0.05)
            d.sock.sendall(req)
            bodies.append(d)
        for d in slow + bodies:
            d.start()
        try:
            t = now_ms()
            for i in range(10):
                check(health_ok(s), "/health did not answer with %d slow clients" % len(slow))
                s.write("m,device=fast%d v=%d %d" % (i, i, t), precision="ms")
                time.sleep(0.1)
            check(all(d.is_alive() for d in slow), "slow clients still connected")
            print("slowloris: 10 of 10 /health and writes answered with %d slow header and %d "
                  "slow body clients" % (len(slow), len(bodies)))
        finally:
            for d in slow + bodies:
                d.close()
        check(health_ok(s))
        eq(len([d for d in s.devices()["devices"] if d["device"].startswith("fast")]), 10)


@suite.test
def slow_body_completes_and_is_stored():
    with Server(args=["--http-threads-max", str(CAP)]) as s:
        body = b"m,device=trickle v=7 %d\n" % now_ms()
        c = open_conn(s.port)
        c.sendall(b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                  % len(body))
        for b in body:
            c.sendall(bytes([b]))
            time.sleep(0.01)
        c.settimeout(10)
        resp = c.recv(4096)
        c.close()
        check(resp.startswith(b"HTTP/1.1 204"), repr(resp[:100]))
        eq([d["device"] for d in s.devices()["devices"]], ["trickle"])


@suite.test
def connection_flood_is_capped():
    with Server(args=["--http-threads-max", str(CAP)]) as s:
        base = threads(s)
        check(base > 0)
        flood, refused = [], 0
        try:
            for _ in range(CAP * 3):
                try:
                    flood.append(open_conn(s.port))
                except OSError:
                    refused += 1
            time.sleep(0.5)  # let the listener accept (or close) what it will
            peak = threads(s)
            held = 0
            for c in flood:
                if closed_by_server(c, 0.05):
                    refused += 1
                else:
                    held += 1
            print("flood: %d connections opened, %d held, %d closed or refused by the server; "
                  "threads %d -> %d (cap %d)" % (CAP * 3, held, refused, base, peak, CAP))
            check(held <= CAP, "%d connections held, cap %d" % (held, CAP))
            check(refused >= CAP * 3 - CAP, "only %d of %d connections past the cap refused"
                  % (refused, CAP * 3))
            check(peak - base <= CAP, "threads grew by %d, cap %d" % (peak - base, CAP))
        finally:
            for c in flood:
                c.close()
        # once the flood is gone the server answers again (its threads notice the
        # closed connections one by one, so a new one may still be refused briefly)
        check(health_ok(s, tries=50), "/health after the flood")
        for _ in range(50):
            try:
                r = s.write("m,device=after v=1 %d" % now_ms(), precision="ms", expect=None)
                if r.status == 204:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        eq([d["device"] for d in s.devices()["devices"]], ["after"])
        t_end = time.monotonic() + 10
        while threads(s) > base + 2 and time.monotonic() < t_end:
            time.sleep(0.1)
        check(threads(s) <= base + 2, "connection threads released: %d -> %d"
              % (base, threads(s)))


def wait_all_closed(conns, limit=30):
    """Waits (at most `limit` s, generous) until the server has closed every one of
    conns (Dribblers, whose sends then fail, or idle sockets); returns how many it
    closed."""
    deadline = time.monotonic() + limit
    left = list(conns)
    while left and time.monotonic() < deadline:
        left = [c for c in left if (c.is_alive() if isinstance(c, Dribbler)
                                    else not closed_by_server(c, 0.05))]
        time.sleep(0.1)
    return len(conns) - len(left)


@suite.test
def slow_headers_and_bodies_are_closed():
    """A client dribbling its headers, or its body below http_body_min_rate, is closed
    (it was held for ever: 300 connections sending a header byte a second, issue 18),
    and so is a keep-alive connection idle for http_header_timeout."""
    with Server(args=["--http-threads-max", str(CAP), "--http-header-timeout", "2s",
                      "--http-body-min-rate", "1000"]) as s:
        heads = [Dribbler(s.port, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 1000,
                          0.3) for _ in range(CAP // 3)]
        req = b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
        bodies = []
        for _ in range(CAP // 3):
            d = Dribbler(s.port, b"#" * 1000, 0.3)  # 3 bytes/s, under 1000
            d.sock.sendall(req)
            bodies.append(d)
        idle = open_conn(s.port)
        idle.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        idle.settimeout(10)
        check(idle.recv(4096).startswith(b"HTTP/1.1 204"))
        for d in heads + bodies:
            d.start()
        try:
            check(health_ok(s), "/health while the slow clients hang on")
            n = wait_all_closed(heads + bodies + [idle])
            print("slow clients: %d of %d header dribblers, body dribblers and idle keep-alive "
                  "connections closed by the server" % (n, len(heads) + len(bodies) + 1))
            eq(n, len(heads) + len(bodies) + 1, "connections closed by the server")
        finally:
            for d in heads + bodies:
                d.close()
            idle.close()
        contains(s.metrics_text(), "bucketdb_http_slow_closed_total %d"
                 % (len(heads) + len(bodies) + 1))
        s.write("m,device=after v=1 %d" % now_ms(), precision="ms")
        eq([d["device"] for d in s.devices()["devices"]], ["after"])


if __name__ == "__main__":
    suite.main()
