#!/usr/bin/env python3
"""HTTP framing over raw sockets on loopback (docs/API.md#conventions): a
Content-Length over max_body_bytes is answered 413 at the headers, before any body
byte, and so is an "Expect: 100-continue" with such a length (never 100 Continue);
two Content-Length headers, Content-Length with Transfer-Encoding, and a
Transfer-Encoding other than chunked are refused and the connection closed (request
smuggling, RFC 9112 section 6.3). Every wait is bounded; no timing is asserted."""

import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, now_ms  # noqa: E402

suite = Suite("http_framing")
LIMIT = 4 << 20  # max_body_bytes in these tests
WAIT = 10  # seconds a test waits for an answer: generous, never asserted


def exchange(port, data, wait=WAIT):
    """Sends data and reads until the server closes or `wait` passes: (bytes, closed)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        c.sendall(data)
        out, deadline = b"", time.monotonic() + wait
        while time.monotonic() < deadline:
            c.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                b = c.recv(65536)
            except socket.timeout:
                return out, False
            except ConnectionResetError:
                return out, True
            if not b:
                return out, True
            out += b
        return out, False
    finally:
        c.close()


def parse(raw):
    """(status, headers lower-cased, body) of the first response in raw."""
    check(raw.startswith(b"HTTP/1.1 "), "no HTTP answer: %r" % raw[:200])
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return int(lines[0].split()[1]), hdrs, body


def json_error(body, hdrs):
    eq(hdrs.get("content-type"), "application/json")
    n = int(hdrs["content-length"])
    return json.loads(body[:n])["error"]


@suite.test
def content_length_over_the_limit_is_413_at_the_headers():
    with Server(args=["--max-body-bytes", str(LIMIT)]) as s:
        for cl in (LIMIT + 1, 9223372036854775807):
            for extra in (b"", b"Expect: 100-continue\r\n"):
                req = (b"POST /write HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n%s\r\n"
                       % (cl, extra))
                raw, closed = exchange(s.port, req)  # the body is never sent
                check(raw, "no answer to Content-Length %d %r within %d s" % (cl, extra, WAIT))
                check(not raw.startswith(b"HTTP/1.1 100"), "100 Continue for %d" % cl)
                status, hdrs, body = parse(raw)
                eq(status, 413, repr(raw[:200]))
                eq(json_error(body, hdrs),
                   "request entity too large: body exceeds max-body-bytes %d" % LIMIT)
                check(closed, "connection left open after the 413 for %d" % cl)
        # at the limit the body is read and stored as before
        line = b"m,device=edge v=1 %d\n" % now_ms()
        pad = LIMIT - len(line)  # comment lines (skipped) up to exactly the limit
        body = line + (b"#" * 1023 + b"\n") * (pad // 1024) + b"#" * (pad % 1024)
        r = s.request("POST", "/write?precision=ms", body)
        eq(r.status, 204, repr(r))
        eq([d["device"] for d in s.devices()["devices"]], ["edge"])
        m = s.metrics_text()
        contains(m, "bucketdb_body_too_large_total 4")


@suite.test
def ambiguous_framing_is_refused_and_closed():
    t = now_ms()
    hidden = b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
    line = b"m,device=smuggled v=1 %d\n" % t
    cases = [
        # two lengths: we read 5 bytes, a proxy in front may have read 40 (or the reverse)
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         b"Content-Length: 40\r\n\r\n" + b"m,dev" + hidden % (len(line), line),
         400, "more than one Content-Length header"),
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         b"Content-Length: 5\r\n\r\nm,dev", 400, "more than one Content-Length header"),
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden % (len(line), line),
         400, "both Content-Length and Transfer-Encoding"),
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         b"Content-Length: 5\r\n\r\n0\r\n\r\n", 400, "both Content-Length and Transfer-Encoding"),
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
         "more than one Transfer-Encoding header"),
        (b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n"
         b"\r\n0\r\n\r\n" + hidden % (len(line), line), 501, "unsupported Transfer-Encoding"),
    ]
    with Server() as s:
        for req, want, msg in cases:
            raw, closed = exchange(s.port, req)
            status, hdrs, body = parse(raw)
            eq(status, want, repr(req[:120]))
            contains(json_error(body, hdrs), msg)
            check(raw.count(b"HTTP/1.1 ") == 1, "a second answer on the connection: %r" % raw)
            check(closed, "connection left open after %r" % req[:120])
        eq(s.devices()["devices"], [], "something was written")
        # one Content-Length, or chunked alone, still work
        raw, _ = exchange(s.port, b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(line), line))
        eq(parse(raw)[0], 204, repr(raw[:200]))
        chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(line), line)
        raw, _ = exchange(s.port, b"POST /write?precision=ms HTTP/1.1\r\nHost: x\r\n"
                          b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunk)
        eq(parse(raw)[0], 204, repr(raw[:200]))
        eq([d["device"] for d in s.devices()["devices"]], ["smuggled"])


if __name__ == "__main__":
    suite.main()
