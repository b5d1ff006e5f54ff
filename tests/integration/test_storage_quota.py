#!/usr/bin/env python3
"""Storage quota and partition sizes: a tenant with a small storage_bytes quota writes
until it is refused (429 with Retry-After and a JSON body naming tenant, limit and
value), the refused request stored nothing, other tenants keep writing, raising the
quota lets writes in again, the refusals are counted in /metrics and the admin API;
after a flush the usage is the tenant's share of the block files (the tenants' shares
add up to bucketdb_block_bytes), or on Cassandra the bytes of the rows it confirmed
(rows x their encoded size, the row count checked against the telemetry table); the
usage survives a restart and a kill -9. The partition-size histogram counts whole partitions
(a partition spread over three block windows is one), with quantiles and the max, and
a partition over partition_warn_bytes is logged exactly once."""

import json
import os
import random
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import (HOUR, MIN, Server, Suite, check, contains, eq, now_ms,  # noqa: E402
                     path_with, run_bin)
from bdbtest import ON_CASSANDRA, embedded_only  # noqa: E402

# Partition sizes are measured on block files; with Cassandra there are none
# (docs/CASSANDRA.md, "What runs where"). Storage use is measured on both.
NOT_MEASURED = "partition sizes are measured on block files only"
# Bytes of one telemetry row as the Cassandra sink sends it (docs/TENANCY.md):
# tenant, device and metric names plus 32 fixed bytes.
ROW_FIXED = 32


def row_bytes(tenant, device, metric):
    return len(tenant) + len(device) + len(metric) + ROW_FIXED

suite = Suite("storage_quota")
DAY = 24 * HOUR
POLL_S = 20  # bound of every wait for the usage tracker (it looks every second)


def tok(t):
    return {"Authorization": "Token " + t}


def admin(s, method, path, doc=None):
    body = json.dumps(doc) if doc is not None else None
    hdrs = tok(s.token)
    if body is not None:
        hdrs["Content-Type"] = "application/json"
    return s.request(method, "/api/v1/admin" + path, body, hdrs)


def create(s, name, **quotas):
    r = admin(s, "POST", "/tenants", {"name": name, "quotas": quotas})
    eq(r.status, 201, "create %s (%r)" % (name, r.body[:300]))
    return r.json()["token"]


def write(s, lines, token, expect=204):
    body = "\n".join(lines) + "\n"
    r = s.request("POST", path_with("/write", {"precision": "ms"}), body, tok(token))
    if expect is not None:
        eq(r.status, expect, "POST /write (%r)" % r.body[:300])
    return r


def count(s, token, device, lo, hi):
    r = s.request("GET", path_with("/api/v1/query", {"device": device, "from": lo, "to": hi}),
                  None, tok(token))
    if r.status == 404:
        return 0
    eq(r.status, 200, "query %s (%r)" % (device, r.body[:300]))
    return r.json()["count"]


def metric(text, name, labels=""):
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), re.escape(labels)), text, re.M)
    return float(m.group(1)) if m else None


def usage(s, tenant):
    r = admin(s, "GET", "/tenants/" + tenant)
    eq(r.status, 200)
    return r.json()


def wait_for(what, fn, timeout=POLL_S):
    """Polls fn() (bounded in time) until it returns a true value, which it returns."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.1)


def flush(s):
    eq(s.request("POST", "/internal/flush", b"", tok(s.token)).status, 204)


@suite.test
def storage_quota_refuses_whole_requests():
    with Server(args=["--auth", "on"]) as s:
        limit = 20000
        tq = create(s, "sq", storage_bytes=limit)
        to = create(s, "other")
        t0 = now_ms() - 2 * HOUR
        # 100 samples a request: each adds 1,600 bytes (16 per unflushed sample) until
        # the tenant stores 20,000 or more; the request after that is refused.
        accepted, refused, i = 0, None, 0
        while refused is None:
            check(i < 40, "never refused after %d requests" % i)
            lines = ["m,device=d1 v=%d %d" % (k, t0 + i * 100 + k) for k in range(100)]
            r = write(s, lines, tq, expect=None)
            if r.status == 204:
                accepted += 100
            else:
                refused = r
            i += 1
        eq(refused.status, 429, "refusal (%r)" % refused.body[:300])
        doc = refused.json()
        eq((doc["tenant"], doc["limit"], doc["value"], doc["retry_after"]),
           ("sq", "storage_bytes", limit, 300))
        check(doc["usage"] >= limit, "usage %r below the limit" % doc["usage"])
        eq(refused.headers.get("retry-after"), "300")
        contains(refused.headers.get("x-influxdb-error", ""), "storage")
        check(accepted >= limit // 16 - 100, "refused too early: %d samples" % accepted)
        check(accepted <= limit // 16 + 100, "refused too late: %d samples" % accepted)

        # The refused request stored nothing, whatever it carried: a new device and
        # more samples of d1 (JSON too).
        lo, hi = t0 - HOUR, t0 + HOUR
        r = write(s, ["m,device=fresh v=1 %d" % t0, "m,device=d1 v=7 %d" % (t0 + 99999)], tq,
                  expect=429)
        hdrs = dict(tok(tq), **{"Content-Type": "application/json"})
        r = s.request("POST", "/api/v1/write/json",
                      json.dumps({"device": "fresh", "time": t0, "metrics": {"v": 1}}), hdrs)
        eq(r.status, 429)
        eq(r.json()["limit"], "storage_bytes")
        eq(count(s, tq, "d1", lo, hi), accepted)
        eq(count(s, tq, "fresh", lo, hi), 0)
        eq(usage(s, "sq")["usage"]["devices"], 1)

        # Other tenants are not affected.
        write(s, ["m,device=o v=%d %d" % (k, t0 + k) for k in range(500)], to)
        eq(count(s, to, "o", lo, hi), 500)

        # Counted per tenant and limit, in /metrics and the admin API.
        m = s.metrics_text()
        eq(metric(m, "bucketdb_quota_rejections_total", '{tenant="sq",limit="storage_bytes"}'),
           3.0)
        eq(metric(m, "bucketdb_quota_rejections_total",
                  '{tenant="other",limit="storage_bytes"}'), 0.0)
        check(metric(m, "bucketdb_tenant_storage_bytes", '{tenant="sq"}') >= limit,
              "tenant storage gauge")
        doc = usage(s, "sq")
        eq(doc["rejections"]["storage_bytes"], 3)
        eq(doc["not_enforced"], [])
        check(doc["usage"]["storage_bytes"] >= limit, "usage in the admin API: %r" % doc)

        # Raising the quota lets the next request in at once.
        eq(admin(s, "PATCH", "/tenants/sq", {"quotas": {"storage_bytes": 10**9}}).status, 200)
        write(s, ["m,device=fresh v=1 %d" % t0], tq)
        eq(count(s, tq, "fresh", lo, hi), 1)

        # After a flush the usage is the block files: both tenants' shares add up to
        # every block byte, and nothing is left unflushed. On Cassandra it is the rows
        # Cassandra confirmed, each counted at its encoded size (one replica).
        flush(s)

        def measured():
            a, b = usage(s, "sq")["usage"], usage(s, "other")["usage"]
            if a["storage_unflushed_samples"] or b["storage_unflushed_samples"]:
                return None
            return a, b
        a, b = wait_for("usage measured after the flush", measured)
        if ON_CASSANDRA:
            flushed = "storage_cassandra_bytes"
            eq((a["storage_block_bytes"], b["storage_block_bytes"]), (0, 0))
            eq(a[flushed], accepted * row_bytes("sq", "d1", "m.v") +
               row_bytes("sq", "fresh", "m.v"))
            eq(b[flushed], 500 * row_bytes("other", "o", "m.v"))
            eq(s.stored(), accepted + 1 + 500)  # the rows counted are the table's rows
        else:
            flushed = "storage_block_bytes"
            eq((a["storage_cassandra_bytes"], b["storage_cassandra_bytes"]), (0, 0))
            check(a[flushed] > 0 and b[flushed] > 0, "%r %r" % (a, b))
            blocks = metric(s.metrics_text(), "bucketdb_block_bytes")
            eq(a[flushed] + b[flushed], blocks)
        eq(a["storage_bytes"], a[flushed])
        eq(metric(s.metrics_text(), "bucketdb_tenant_storage_bytes", '{tenant="sq"}'),
           a["storage_bytes"])
        # A quota below what is now on disk refuses again; `tenant show` prints it.
        eq(admin(s, "PATCH", "/tenants/sq",
                 {"quotas": {"storage_bytes": a["storage_bytes"]}}).status, 200)
        r = write(s, ["m,device=d1 v=1 %d" % (t0 + 5)], tq, expect=429)
        eq(r.json()["value"], a["storage_bytes"])
        url = "http://127.0.0.1:%d" % s.port
        rc, out, err = run_bin(["tenant", "show", "sq", "--server", url, "--admin-token",
                                s.token])
        eq(rc, 0, err)
        shown = json.loads(out)
        eq((shown["quotas"]["storage_bytes"], shown["usage"]["storage_bytes"]),
           (a["storage_bytes"], a["storage_bytes"]))

        # The usage survives a clean restart and a kill -9 after a further flush (on
        # Cassandra it is saved in the data directory by every flush).
        s.restart()

        def stores(tenant, want):
            """Waits for the first measurement after a start (bounded), then compares."""
            got = wait_for("%s measured" % tenant,
                           lambda: usage(s, tenant)["usage"]["storage_bytes"] or None)
            eq(got, want, "%s after the start" % tenant)
        stores("sq", a[flushed])
        eq(usage(s, "sq")["usage"][flushed], a[flushed])
        write(s, ["m,device=d1 v=1 %d" % (t0 + 6)], tq, expect=429)
        eq(admin(s, "PATCH", "/tenants/sq", {"quotas": {"storage_bytes": 10**9}}).status, 200)
        write(s, ["m,device=d2 v=%d %d" % (k, t0 + k) for k in range(10)], tq)
        flush(s)
        grown = wait_for("the new rows counted",
                         lambda: (usage(s, "sq")["usage"][flushed] > a[flushed] and
                                  usage(s, "sq")["usage"][flushed]))
        if ON_CASSANDRA:
            eq(grown, a[flushed] + 10 * row_bytes("sq", "d2", "m.v"))
        s.kill()
        s.start()
        if ON_CASSANDRA:
            stores("sq", grown)
            stores("other", b[flushed])
        else:
            # Two blocks of one window now; a compaction after the start may merge
            # them, and a file's header, index and footer are split among its tenants
            # in proportion to their chunk bytes, so a tenant's share of the merged
            # file moves by a few bytes (CI once saw "other" at 15 instead of 14).
            # What must hold: both measured again, near their shares before, and
            # adding up to every block byte.
            def both():
                x, y = usage(s, "sq")["usage"], usage(s, "other")["usage"]
                if not (x["storage_bytes"] and y["storage_bytes"]):
                    return None
                blocks = metric(s.metrics_text(), "bucketdb_block_bytes")
                return (x, y) if x[flushed] + y[flushed] == blocks else None
            x, y = wait_for("both tenants measured after the start", both)
            for tenant, got, want in (("sq", x[flushed], grown), ("other", y[flushed], b[flushed])):
                check(abs(got - want) <= max(4, want // 20),
                      "%s after the start: %d, before the kill %d" % (tenant, got, want))


def samples(device, t, n, step, rnd):
    # full-precision random values: about 8 bytes each in a block, whatever the codec
    return ["m,device=%s v=%r %d" % (device, rnd.random() * 1000, t + k * step)
            for k in range(n)]


@suite.test
@embedded_only(NOT_MEASURED)
def partition_sizes_are_whole_partitions_and_warn_once():
    rnd = random.Random(7)
    # A piece of 250 samples is 2-3 KB, three pieces are more than 4,000 bytes.
    with Server(args=["--partition-warn-bytes", "4000"]) as s:
        day = (now_ms() // DAY) * DAY - 2 * DAY  # a whole UTC day, inside the retention
        # One sample a day earlier, then a 1-day bucket from there on: the big
        # device's day is one partition over three 2-hour block windows.
        s.write(samples("big", day - DAY, 1, 1000, rnd), precision="ms")
        s.set_bucket("big", "1d")
        for w in range(3):
            s.write(samples("big", day + w * 2 * HOUR, 250, 1000, rnd), precision="ms")
        s.write(samples("small", day, 10, MIN // 10, rnd), precision="ms")
        s.flush()

        def whole():
            m = s.metrics_text()
            return m if metric(m, "bucketdb_partition_size_bytes_count") == 3 else None
        # big's two days and small's one; per block there would be five pieces.
        m = wait_for("3 partitions in /metrics", whole)
        total = metric(m, "bucketdb_partition_size_bytes_sum")
        biggest = metric(m, "bucketdb_partition_size_max_bytes")
        check(biggest > 4000 and biggest > total * 0.8, "max %r of %r" % (biggest, total))
        eq(metric(m, "bucketdb_large_partitions"), 1.0)
        eq(metric(m, "bucketdb_partition_warn_bytes"), 4000.0)
        eq(metric(m, "bucketdb_partition_size_bytes_bucket", '{le="+Inf"}'), 3.0)
        eq(metric(m, "bucketdb_partition_size_bytes_bucket", '{le="65536"}'), 3.0)
        p50 = metric(m, "bucketdb_partition_size_quantile_bytes", '{quantile="0.5"}')
        p99 = metric(m, "bucketdb_partition_size_quantile_bytes", '{quantile="0.99"}')
        check(0 < p50 < 4000, "p50 %r" % p50)
        check(p50 <= p99 <= biggest, "p99 %r, max %r" % (p99, biggest))
        check(metric(m, "bucketdb_storage_usage_age_seconds") is not None, "age gauge")

        def warnings():
            with open(s.log_path, errors="replace") as f:
                return [ln for ln in f if "large partition:" in ln]
        w = wait_for("the warning", warnings)
        eq(len(w), 1, "one warning: %r" % w)
        contains(w[0], "tenant 'default' device 'big'")
        contains(w[0], "partition_warn_bytes 4000")

        # More measurements (a new block file, then the 10 s head re-measure) see the
        # big partition again: still counted, never logged twice.
        s.write(samples("small2", day, 10, 1000, rnd), precision="ms")
        s.flush()
        wait_for("4 partitions", lambda: metric(s.metrics_text(),
                                                "bucketdb_partition_size_bytes_count") == 4)
        eq(metric(s.metrics_text(), "bucketdb_large_partitions"), 1.0)
        eq(len(warnings()), 1, "warned once")
        # A second partition over the limit is warned about in its turn.
        s.write(samples("big", day + DAY + HOUR, 750, 1000, rnd), precision="ms")
        s.flush()
        wait_for("2 large partitions",
                 lambda: metric(s.metrics_text(), "bucketdb_large_partitions") == 2)
        eq(len(warnings()), 2)


if __name__ == "__main__":
    suite.main()
