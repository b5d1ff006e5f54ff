#!/usr/bin/env python3
"""The README's quick start as written: its curl writes (line protocol and JSON) run
with bash against the server under test, then its influx CLI commands, whose output
must be the README's (times stand for a pattern: they are each run's clock). The
token form the README gives for a server that requires one works with the CLI, and
without it the CLI is refused."""

import os
import re
import shutil
import subprocess

from bdbtest import Server, Suite, check, contains, eq

suite = Suite("readme")
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RFC3339 = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z\b")


def quick_start():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    start = text.index("## Quick start")
    return text[start:text.index("\n## ", start + 1)]


def blocks(text):
    return re.findall(r"^```\n(.*?)^```$", text, re.S | re.M)


def bash(script, port, timeout=60):
    """A README snippet run as written, with the README's port replaced by the test's."""
    check(shutil.which("curl") and shutil.which("influx"),
          "curl and influx (influxdb-client) are needed: scripts/setup.sh --test installs them")
    p = subprocess.run(["bash", "-c", script.replace("127.0.0.1 -port 8086",
                                                     "127.0.0.1 -port %d" % port)
                        .replace("127.0.0.1:8086", "127.0.0.1:%d" % port)],
                       capture_output=True, timeout=timeout)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def normal(out):
    lines = [RFC3339.sub("<time>", ln.rstrip()) for ln in out.strip("\n").split("\n")]
    return "\n".join(lines)


def influx_sessions(bl):
    """(command, expected output) of every influx CLI block of the quick start."""
    out = []
    for i, b in enumerate(bl):
        if b.startswith("influx ") and i + 1 < len(bl):
            out.append((b.strip(), bl[i + 1]))
    return out


@suite.test
def test_quick_start_influx_cli():
    bl = blocks(quick_start())
    writes = [b for b in bl if b.startswith("NOW=$(date +%s)")]
    json_write = [b for b in bl if "/api/v1/write/json" in b and b.startswith("curl")]
    eq((len(writes), len(json_write)), (1, 1), "the quick start's two writes")
    sessions = influx_sessions(bl)
    check(len(sessions) >= 2, "the quick start shows no influx CLI session")
    check(any(c.endswith("'SHOW MEASUREMENTS'") for c, _ in sessions), sessions)
    check(any("GROUP BY time(1m)" in c for c, _ in sessions), sessions)
    with Server() as s:
        rc, out, err = bash(writes[0] + "\n" + json_write[0], s.port)
        eq(rc, 0, "the quick start's writes: %s" % err)
        eq(out.count("204 No Content"), 2, "both writes answered 204: %r" % out)
        for cmd, want in sessions:
            rc, out, err = bash(cmd, s.port)
            eq(rc, 0, "%s: %s" % (cmd, err))
            eq(normal(out), normal(want), cmd)


@suite.test
def test_quick_start_influx_cli_token():
    text = quick_start()
    m = re.search(r'`(-username \S+ -password "\$\(cat data/token\)")`', text)
    check(m, "the quick start does not say how the CLI passes a token")
    cmd = next(c for c, _ in influx_sessions(blocks(text)) if c.endswith("'SHOW MEASUREMENTS'"))
    with Server(args=["--auth", "on"]) as s:
        s.write("env,device=d1 temp=1", headers={"Authorization": "Token " +
                                                                 s.token})
        rc, out, err = bash(cmd.replace("influx ", "influx " + m.group(1).replace(
            "data/token", os.path.join(s.data, "token")) + " ", 1), s.port)
        eq(rc, 0, "with the token: %s" % err)
        contains(out, "env")
        rc, out, err = bash(cmd, s.port)
        check(rc != 0 or "env" not in out, "without a token the CLI was answered: %r" % out)


if __name__ == "__main__":
    suite.main()
