#!/usr/bin/env python3
"""Operations: export round trip and filters, /health, /metrics as Prometheus text,
configuration files and flags, the version and query commands, authentication, clean
shutdown and the data-directory lock."""

import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bdbtest  # noqa: E402
from bdbtest import (HOUR, MIN, Server, Suite, check, contains, eq, run_bin,  # noqa: E402
                     tmpdir)

suite = Suite("test_export_ops")
T0 = 1709251200000  # 2024-03-01T00:00:00Z


def norm(text):
    return sorted(ln for ln in text.splitlines() if ln)


def export(s, **params):
    r = s.get("/api/v1/export", **params)
    eq(r.status, 200, "export %r" % params)
    contains(r.headers.get("content-type", ""), "text/plain")
    return r.text


def seed_data(s):
    lines = []
    for i in range(300):
        t = T0 + i * 37 * 1000
        lines.append("env,device=dev-a,site=berlin,room=r\\ 1 temp=%r,hum=%d %d"
                     % (20 + i / 7, i % 60, t * 1000000))
        lines.append("power,device=dev\\ b,site=x\\,y\\=z kw=%r %d" % (i * 1.5e-3, t * 1000000))
    s.write(lines)
    s.write_json({"reports": [
        {"device": "dev-c", "time": T0 + i * HOUR, "metrics": {"u": i, "deep.name.x": -i},
         "tags": {"k": "v w"}} for i in range(30)]})


@suite.test
def export_round_trip_into_a_second_server():
    with Server() as a, Server() as b:
        seed_data(a)
        a.flush()  # some in blocks
        a.write("env,device=dev-a,site=berlin,room=r\\ 1 temp=99 %d" % ((T0 + 1) * 1000000))
        first = export(a)
        check(len(norm(first)) == 300 * 3 + 1 + 60, "export lines: %d" % len(norm(first)))
        check(all(re.search(r" \d+000000$", ln) for ln in norm(first)), "ns timestamps")
        contains(first, "room=r\\ 1")
        contains(first, "device=dev\\ b")
        contains(first, "site=x\\,y\\=z")
        b.write(first)
        second = export(b)
        eq(norm(second), norm(first), "export of the import")
        # Every sample reads back the same from both servers.
        for dev in ("dev-a", "dev b"):
            q = {"device": dev, "from": T0 - HOUR, "to": T0 + 10 * HOUR}
            eq(b.values(**q), a.values(**q), "query of %s on both servers" % dev)
        da, db_ = a.device("dev-a"), b.device("dev-a")
        eq(db_["tags"], da["tags"])
        # Import is idempotent: posting the export again changes nothing.
        b.write(first)
        eq(norm(export(b)), norm(first))


@suite.test
def export_filters():
    with Server() as s:
        seed_data(s)
        full = norm(export(s))
        by_dev = [ln for ln in full if ",device=dev-a," in ln]
        eq(norm(export(s, device="dev-a")), by_dev)
        eq(norm(export(s, device="dev-a,dev-c")),
           sorted(by_dev + [ln for ln in full if ",device=dev-c," in ln]))
        eq(norm(export(s, device="dev-a", metric="env.hum")),
           [ln for ln in by_dev if " hum=" in ln])
        eq(norm(export(s, device="dev-c", metric="u")),
           [ln for ln in full if ln.startswith("u,device=dev-c")])

        def ts_of(ln):
            return int(ln.rsplit(" ", 1)[1]) // 1000000

        lo, hi = T0 + 10 * MIN, T0 + 2 * HOUR  # from inclusive, to exclusive
        want = [ln for ln in full if lo <= ts_of(ln) < hi]
        check(len(want) > 10)
        eq(norm(export(s, **{"from": lo, "to": hi})), want, "ms range")
        eq(norm(export(s, **{"from": "2024-03-01T00:10:00Z", "to": "2024-03-01T02:00:00.000Z"})),
           want, "RFC 3339 range")
        eq(norm(export(s, **{"from": "2024-03-01T01:10:00+01:00", "to": hi})), want,
           "RFC 3339 with offset")
        # A sample exactly at `to` is left out, one at `from` is kept.
        t_edge = T0 + 37 * 1000 * 10
        got = norm(export(s, device="dev-a", metric="env.temp", **{"from": t_edge,
                                                                   "to": t_edge + 37000}))
        eq([ts_of(ln) for ln in got], [t_edge])
        eq(export(s, device="nope"), "")
        eq(export(s, **{"from": T0 + 100 * HOUR}), "")
        eq(s.get("/api/v1/export", **{"from": "last tuesday"}).status, 400)


@suite.test
def export_of_awkward_metric_names_reimports():
    """JSON metric names are free text; the export must still be line protocol the
    server itself accepts."""
    with Server() as a, Server() as b:
        names = ["plain", "a.b", "a.b.c", "trailing.", ".leading", "sp ace.f", "co,mma.g"]
        a.write_json({"reports": [{"device": "odd", "time": T0 + i, "metrics": {n: i}}
                                  for i, n in enumerate(names)]})
        text = export(a)
        eq(len(norm(text)), len(names))
        r = b.write(text, expect=None)
        eq(r.status, 204, "re-import of %r: %r" % (text, r.body))
        rows = b.values(device="odd", **{"from": T0, "to": T0 + 100})
        eq(len(rows), len(names))
        # Names with a dot inside come back as they were.
        eq(sorted(m for _, m, _ in rows if m in names), ["a.b", "a.b.c", "co,mma.g", "sp ace.f"])
        # Names without an inner dot ("plain", "trailing.", ".leading") gain a field
        # "value" on import; from then on the export is a fixed point.
        second = export(b)
        b.write(second)
        eq(norm(export(b)), norm(second))
        eq(len(b.values(device="odd", **{"from": T0, "to": T0 + 100})), len(names))


@suite.test
def health_endpoint():
    with Server() as s:
        r = s.get("/health")
        eq(r.status, 200)
        contains(r.headers.get("content-type", ""), "json")
        h = r.json()
        eq(h["status"], "ok")
        eq(h["storage"]["writable"], True)
        eq(h["storage"]["reason"], None)
        eq((h["storage"]["devices"], h["storage"]["head_samples"]), (0, 0))
        s.write(["m,device=h1 a=1,b=2 %d" % T0, "m,device=h2 a=1 %d" % T0], precision="ms")
        h = s.get("/health").json()
        eq((h["storage"]["devices"], h["storage"]["series"], h["storage"]["head_samples"]),
           (2, 3, 3))
        s.flush()
        h = s.get("/health").json()
        eq(h["storage"]["head_samples"], 0)
        eq(h["storage"]["engine"], bdbtest.ENGINE)
        # blocks counts block files; on Cassandra the flush went to its table instead
        check(s.stored() >= 1, "flushed data after flush: %r" % h)
        eq(h["storage"]["blocks"] >= 1, not bdbtest.ON_CASSANDRA, "blocks: %r" % h)
        eq(s.request("HEAD", "/health").status, 200)


FAMILY_TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                    r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*,?)?\})? '
                    r'(\S+)(?: (-?\d+))?$')


def parse_prometheus(text):
    """Checks the text exposition format; returns {(name, labels): value}."""
    check(text.endswith("\n"), "exposition ends with a newline")
    helps, types, samples = {}, {}, {}
    order = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.startswith("# HELP "):
            parts = line.split(" ", 3)
            check(len(parts) == 4 and parts[3], "line %d: HELP without text: %r" % (n, line))
            check(parts[2] not in helps, "line %d: second HELP for %s" % (n, parts[2]))
            helps[parts[2]] = parts[3]
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            check(len(parts) == 4 and parts[3] in FAMILY_TYPES, "line %d: bad TYPE %r"
                  % (n, line))
            check(parts[2] not in types, "line %d: second TYPE for %s" % (n, parts[2]))
            check(not any(o == parts[2] for o in order), "TYPE after samples of %s" % parts[2])
            types[parts[2]] = parts[3]
            continue
        if line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        check(m, "line %d is not a sample: %r" % (n, line))
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        try:
            v = float(value)
        except ValueError:
            raise AssertionError("line %d: value %r" % (n, value))
        fam = name
        if name not in types:
            for suffix in ("_bucket", "_sum", "_count"):
                base = name[:-len(suffix)]
                if name.endswith(suffix) and types.get(base) in ("histogram", "summary"):
                    fam = base
        check(fam in types, "line %d: sample %s has no TYPE" % (n, name))
        check(fam in helps, "line %d: sample %s has no HELP" % (n, name))
        if types[fam] == "counter":
            check(v >= 0, "counter %s negative" % name)
        check((name, labels) not in samples, "duplicate sample %s%s" % (name, labels))
        samples[(name, labels)] = v
        order.append(fam)
    # Histograms: cumulative buckets ending in +Inf == _count.
    for fam, t in types.items():
        if t != "histogram":
            continue
        buckets = [(k[1], v) for k, v in samples.items() if k[0] == fam + "_bucket"]
        check(buckets, "histogram %s has no buckets" % fam)
        vals = [v for _, v in buckets]
        eq(vals, sorted(vals), "histogram %s buckets cumulative" % fam)
        check('le="+Inf"' in buckets[-1][0], "histogram %s ends with +Inf" % fam)
        eq(buckets[-1][1], samples[(fam + "_count", "")], "histogram %s +Inf == count" % fam)
    for fam in types:
        check(fam in helps, "family %s has TYPE but no HELP" % fam)
    return samples


@suite.test
def metrics_prometheus_text_and_counters_move():
    with Server() as s:
        r = s.get("/metrics")
        eq(r.status, 200)
        contains(r.headers.get("content-type", ""), "text/plain")
        before = parse_prometheus(r.text)
        lines = ["m,device=pm%d a=%d,b=2 %d" % (i % 3, i, T0 + i) for i in range(50)]
        s.write(lines, precision="ms")
        s.write("bad line", expect=400)
        s.write_json({"reports": [{"device": "pj", "time": T0, "metrics": {"x": 1, "y": 2}}]})
        s.values(device="pm0", **{"from": T0, "to": T0 + 100})
        s.flush()
        after = parse_prometheus(s.metrics_text())

        def delta(name, labels=""):
            return after.get((name, labels), 0) - before.get((name, labels), 0)

        eq(delta("bucketdb_samples_ingested_total", '{protocol="line"}'), 100)
        eq(delta("bucketdb_samples_ingested_total", '{protocol="json"}'), 2)
        eq(delta("bucketdb_lines_total", '{result="accepted"}'), 50)
        eq(delta("bucketdb_lines_total", '{result="rejected"}'), 1)
        eq(delta("bucketdb_json_reports_total", '{result="accepted"}'), 1)
        eq(delta("bucketdb_queries_total"), 1)
        eq(delta("bucketdb_write_duration_seconds_count"), 3)
        check(delta("bucketdb_http_responses_total", '{code="2xx"}') >= 4, "2xx moved")
        check(delta("bucketdb_http_responses_total", '{code="4xx"}') >= 1, "4xx moved")
        check(delta("bucketdb_wal_bytes_total") > 0, "WAL bytes moved")
        check(delta("bucketdb_flushes_total") >= 1, "flushes moved")
        eq(after[("bucketdb_devices", "")], 4)
        eq(after[("bucketdb_series", "")], 8)
        if bdbtest.ON_CASSANDRA:
            check(delta("bucketdb_cassandra_rows_confirmed_total") >= 1, "rows confirmed")
        else:
            check(after[("bucketdb_blocks", "")] >= 1, "blocks gauge")
        eq(after[("bucketdb_build_info", '{version="%s"}' % version_string())], 1)


def version_string():
    rc, out, err = run_bin(["version"])
    eq(rc, 0, "bucketdb version: %s" % err)
    m = re.match(r"^bucketdb (\d+\.\d+\.\d+\S*)\n$", out)
    check(m, "version output %r" % out)
    return m.group(1)


@suite.test
def version_command_matches_server():
    v = version_string()
    eq(run_bin(["--version"])[1], "bucketdb %s\n" % v)
    with Server() as s:
        r = s.get("/ping")
        eq(r.headers.get("x-bucketdb-version"), v)
        eq(s.get("/health").json()["version"], v)
        eq(s.get("/ping", verbose="1").json()["bucketdb"], v)
        contains(s.ready_text, "bucketdb %s ready" % v)
    rc, out, err = run_bin(["frobnicate"])
    eq(rc, 2)
    contains(err, "unknown command")


def print_config(args):
    rc, out, err = run_bin(["serve"] + args + ["--print-config"])
    eq(rc, 0, "print-config %r: %s" % (args, err))
    cfg = {}
    for ln in out.splitlines():
        k, _, v = ln.partition(" = ")
        cfg[k] = v
    return cfg


@suite.test
def config_file_and_flag_precedence():
    d = tmpdir()
    path = os.path.join(d, "bucketdb.conf")
    with open(path, "w") as f:
        f.write("# bucketdb settings\n"
                "max_body_bytes = 1MiB\n"
                "log_level = warn   # quieter\n"
                "flush_interval_ms 5m\n"
                "\n"
                "default_tenant = from-file\n"
                "max-tags = 9\n")
    defaults = print_config([])
    eq(defaults["max_body_bytes"], "67108864")
    eq(defaults["sync"], "batch")
    cfg = print_config(["--config", path])
    eq((cfg["max_body_bytes"], cfg["log_level"], cfg["flush_interval_ms"],
        cfg["default_tenant"], cfg["max_tags"]), ("1048576", "warn", "300000ms", "from-file",
                                                  "9"))
    eq(cfg["sync"], "batch", "untouched key keeps its default")
    # Flags win over the file wherever they appear.
    for args in (["--config", path, "--max-body-bytes", "2048", "--default-tenant=flag"],
                 ["--max-body-bytes", "2048", "--default-tenant", "flag", "--config", path],
                 ["--max-body-bytes=2KiB", "--config=" + path, "--default-tenant", "flag"]):
        cfg = print_config(args)
        eq((cfg["max_body_bytes"], cfg["default_tenant"], cfg["log_level"]),
           ("2048", "flag", "warn"), "args %r" % args)
    # The file's settings take effect in a running server (default tenant from file,
    # max-body from the flag).
    # (--log-level info so that the helper can see "stopped cleanly".)
    with Server(args=["--config", path, "--max-body-bytes", "2048", "--log-level",
                      "info"]) as s:
        s.write("m,device=cf v=1 %d" % T0, precision="ms")
        eq(s.devices(tenant="from-file")["count"], 1)
        s.write("m,device=cf v=1 %d\n" % T0 * 100, precision="ms", expect=413)


@suite.test
def check_config_reports_bad_values():
    d = tmpdir()
    good = os.path.join(d, "good.conf")
    with open(good, "w") as f:
        f.write("sync = periodic\nsync_interval_ms = 50\n")
    rc, out, err = run_bin(["serve", "--config", good, "--check-config"])
    eq((rc, out.strip()), (0, "configuration ok"), err)
    cases = [
        (["--sync", "sometimes"], "sync"),
        (["--max-body-bytes", "lots"], "max_body_bytes"),
        (["--block-window-ms", "7m"], "block_window_ms"),
        (["--flush-interval-ms", "10 parsecs"], "flush_interval_ms"),
        (["--auth", "maybe"], "auth"),
        (["--no-such-setting", "1"], "no-such-setting"),
        (["--query-workers", "0"], "query_workers"),
    ]
    for args, key in cases:
        rc, out, err = run_bin(["serve"] + args + ["--check-config"])
        eq(rc, 2, "exit code for %r (%s)" % (args, err))
        contains(err, key, "message for %r" % args)
    bad = os.path.join(d, "bad.conf")
    with open(bad, "w") as f:
        f.write("# ok so far\nlog_level = info\nmax_line_bytes = huge\n")
    rc, out, err = run_bin(["serve", "--config", bad, "--check-config"])
    eq(rc, 2)
    contains(err, "max_line_bytes")
    contains(err, "bad.conf:3")
    rc, out, err = run_bin(["serve", "--config", os.path.join(d, "missing.conf"),
                            "--check-config"])
    eq(rc, 2)
    contains(err, "missing.conf")
    rc, out, err = run_bin(["serve", "--data"])
    eq(rc, 2)
    contains(err, "needs a value")


@suite.test
def query_command_against_running_server():
    with Server() as s:
        s.write(["env,device=cli temp=%d,hum=%d.5 %d" % (i, i, T0 + i * 1000) for i in range(20)]
                + ['env,device=cli2,site=s1 temp=1,state="on" %d' % T0], precision="ms")
        url = "http://127.0.0.1:%d" % s.port
        rng = ["--from", str(T0), "--to", "2024-03-01T00:00:10Z"]
        rc, out, err = run_bin(["query", "--server", url, "--device", "cli"] + rng)
        eq(rc, 0, err)
        import json
        doc = json.loads(out)
        eq(doc["values"], s.query(device="cli", **{"from": T0, "to": T0 + 10000})["values"])
        eq(doc["count"], 20)
        rc, out, err = run_bin(["query", "--server", url, "--device", "cli", "--metric",
                                "env.temp", "--format", "csv", "--limit", "3", "--order",
                                "desc"] + rng)
        eq(rc, 0, err)
        eq(out, "time,metric,value\n%d,env.temp,9\n%d,env.temp,8\n%d,env.temp,7\n"
           % (T0 + 9000, T0 + 8000, T0 + 7000))
        rc, out, err = run_bin(["query", "--server", url, "--devices"])
        eq(rc, 0, err)
        devs = {d["device"]: d for d in json.loads(out)["devices"]}
        eq(sorted(devs), ["cli", "cli2"])
        eq((devs["cli2"]["state"], devs["cli2"]["tags"]), ("on", {"site": "s1"}))
        # Pages: --limit and --cursor reach the server (the list is paged, API.md).
        rc, out, err = run_bin(["query", "--server", url, "--devices", "--limit", "1"])
        eq(rc, 0, err)
        page = json.loads(out)
        eq(([d["device"] for d in page["devices"]], page["next_cursor"]), (["cli"], "cli"))
        rc, out, err = run_bin(["query", "--server", url, "--devices", "--limit", "1",
                                "--cursor", page["next_cursor"]])
        eq(rc, 0, err)
        eq([d["device"] for d in json.loads(out)["devices"]], ["cli2"])
        rc, out, err = run_bin(["query", "--server", url, "--export", "--device", "cli",
                                "--metric", "env.hum", "--from", str(T0), "--to",
                                str(T0 + 3000)])
        eq(rc, 0, err)
        eq(norm(out), ["env,device=cli hum=%s %d000000" % (v, T0 + i * 1000)
                       for i, v in enumerate(["0.5", "1.5", "2.5"])])
        eq(out, export(s, device="cli", metric="env.hum", **{"from": T0, "to": T0 + 3000}))
        # Errors: unknown device (1), missing --device (2), bad option (2).
        rc, out, err = run_bin(["query", "--server", url, "--device", "ghost"] + rng)
        eq(rc, 1)
        contains(err, "not found")
        eq(run_bin(["query", "--server", url])[0], 2)
        eq(run_bin(["query", "--server", url, "--bogus", "1"])[0], 2)
        # Tenant flag.
        s.write("m,device=tq v=1 %d" % T0, precision="ms", tenant="t9")
        rc, out, err = run_bin(["query", "--server", url, "--devices", "--tenant", "t9"])
        eq([d["device"] for d in json.loads(out)["devices"]], ["tq"])
        port = s.port
    # Nothing listening any more: exit 1 with a message.
    rc, out, err = run_bin(["query", "--server", "http://127.0.0.1:%d" % port, "--devices"])
    eq(rc, 1)
    contains(err, "cannot connect")


@suite.test
def auth_on_requires_the_token():
    with Server(args=["--auth", "on"]) as s:
        r = s.post("/write", b"m,device=au v=1 1", precision="ms")
        eq(r.status, 401)
        contains(r.json()["error"], "authorization")
        r = s.post("/write", b"m,device=au v=1 1", {"Authorization": "Token wrong"},
                   precision="ms")
        eq(r.status, 401)
        import base64
        good = [{"Authorization": "Token " + s.token}, {"Authorization": "Bearer " + s.token},
                {"Authorization": "Basic " + base64.b64encode(("u:" + s.token).encode())
                 .decode()}]
        for i, h in enumerate(good):
            eq(s.post("/write", b"m,device=au v=1 %d" % (T0 + i), h, precision="ms").status, 204,
               "auth header %r" % list(h.values())[0][:6])
        eq(s.post("/write", b"m,device=au v=1 %d" % (T0 + 9), precision="ms",
                  p=s.token).status, 204, "p= parameter")
        eq(s.get("/api/v1/query", device="au", **{"from": T0, "to": T0 + 10}).status, 401)
        eq(s.get("/api/v1/devices").status, 401)
        r = s.request("GET", "/api/v1/query?device=au&from=%d&to=%d" % (T0, T0 + 10),
                      headers={"Authorization": "Token " + s.token})
        eq(r.status, 200)
        eq(r.json()["count"], 4)
        eq(s.get("/ping").status, 204, "ping needs no token")
        m = s.metrics_text()
        contains(m, "bucketdb_auth_failures_total 4")
        token = s.token
        # The token is kept in the data directory: the same after a restart.
        s.restart()
        eq(s.token, token)


@suite.test
def sigterm_flushes_and_restart_reads_everything():
    with Server() as s:
        lines = ["m,device=st%d v=%d %d" % (i % 4, i, T0 + i * MIN) for i in range(400)]
        s.write(lines, precision="ms")
        before = {d: s.values(device="st%d" % d, **{"from": T0, "to": T0 + 10 * HOUR})
                  for d in range(4)}
        eq(s.stored(), 0, "nothing flushed yet")
        s.stop()  # checks exit 0 and "stopped cleanly"
        check(s.stored() >= 1, "flushed data after a clean stop: %r" % os.listdir(s.data))
        s.start()
        h = s.get("/health").json()["storage"]
        eq(h["head_samples"], 0, "the clean stop flushed everything; nothing to replay")
        for d in range(4):
            eq(s.values(device="st%d" % d, **{"from": T0, "to": T0 + 10 * HOUR}), before[d])
        # SIGINT stops cleanly too; SIGHUP is ignored.
        s.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30
        while "SIGHUP" not in s.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        contains(s.log(), "SIGHUP")
        eq(s.get("/ping").status, 204, "still serving after SIGHUP")
        s.proc.send_signal(signal.SIGINT)
        eq(s.proc.wait(timeout=60), 0)
        s._gone()
        contains(s.log(), "stopped cleanly")
        s.start()
        eq(s.values(device="st0", **{"from": T0, "to": T0 + 10 * HOUR}), before[0])


@suite.test
def second_server_on_same_dir_refuses():
    with Server() as s:
        s.write("m,device=lock v=1 %d" % T0, precision="ms")
        rc, out, err = run_bin(["serve", "--data", s.data, "--listen", "127.0.0.1:0"],
                               timeout=60)
        eq(rc, 1, "second server exit code (stdout %r)" % out)
        contains(err, "in use")
        check("ready" not in out, "second server printed a ready block")
        # The first one is unharmed.
        eq(s.values(device="lock", **{"from": T0, "to": T0 + 1}), [(T0, "m.v", 1)])
    # Once the first stops, the directory can be opened again.
    s2 = Server(data=s.data)
    with s2:
        eq(s2.values(device="lock", **{"from": T0, "to": T0 + 1}), [(T0, "m.v", 1)])


suite.main()
