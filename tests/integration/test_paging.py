#!/usr/bin/env python3
"""Paged listings (docs/API.md#get-apiv1devices, #get-apiv1devicesidpartitions):
/api/v1/devices and /api/v1/devices/{id}/partitions answer at most `limit` entries
(default 1000, at most 10000) with a `next_cursor` to continue; paging through gives
every entry once, in order; a `limit` out of range is 400 (issue 18)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, eq  # noqa: E402

suite = Suite("paging")
HOUR = 3600 * 1000
T0 = 1705276800000  # 2024-01-15T00:00:00Z


@suite.test
def devices_are_paged():
    n = 2345
    names = ["d%05d" % i for i in range(n)]
    with Server() as s:
        for i in range(0, n, 500):
            s.write(["m,device=%s v=1 %d" % (d, T0) for d in names[i:i + 500]], precision="ms")
        first = s.devices()
        eq(first["count"], 1000, "default page")
        eq(first["total"], n)
        eq([d["device"] for d in first["devices"]], names[:1000])
        eq(first["next_cursor"], names[999])
        got, cursor, pages = [], None, 0
        while True:
            params = {"limit": 999}
            if cursor is not None:
                params["cursor"] = cursor
            page = s.devices(**params)
            pages += 1
            check(page["count"] <= 999 and page["count"] == len(page["devices"]), repr(page)[:200])
            eq(page["total"], n)
            got += [d["device"] for d in page["devices"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            check(pages < 10, "paging does not end")
        eq(got, names, "every device once, in name order")
        eq(pages, 3)
        whole = s.devices(limit=10000)
        eq((whole["count"], whole["next_cursor"]), (n, None))
        for bad in ("0", "10001", "-1", "abc", "99999999999999999999999"):
            r = s.get("/api/v1/devices", limit=bad)
            eq(r.status, 400, "limit=%s" % bad)
            eq(r.json()["error"], "invalid 'limit': must be an integer 1..10000")


@suite.test
def partitions_are_paged():
    days = 200  # 4,800 one-hour partitions
    with Server() as s:
        s.write(["m,device=p v=1 %d" % T0, "m,device=p v=2 %d" % (T0 + days * 24 * HOUR - 1)],
                precision="ms")
        path = "/api/v1/devices/p/partitions"
        frm, to = T0, T0 + days * 24 * HOUR
        r = s.get(path, **{"from": frm, "to": to})
        eq(r.status, 200, repr(r))
        first = r.json()
        eq(first["count"], 1000, "default page")
        eq(first["next_cursor"], first["partitions"][-1]["end"])
        starts, cursor, pages = [], None, 0
        while True:
            params = {"from": frm, "to": to, "limit": 1500}
            if cursor is not None:
                params["cursor"] = cursor
            page = s.get(path, **params).json()
            pages += 1
            starts += [p["start"] for p in page["partitions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            check(pages < 10, "paging does not end")
        eq(starts, [T0 + i * HOUR for i in range(days * 24)], "every partition once, in order")
        eq(pages, 4)
        # without from/to: the device's data span, paged the same way
        eq(s.get(path).json()["count"], 1000)
        for bad in ("0", "10001", "x"):
            r = s.get(path, limit=bad)
            eq(r.status, 400, "limit=%s" % bad)
            eq(r.json()["error"], "invalid 'limit': must be an integer 1..10000")
        eq(s.get(path, cursor="-9223372036854775808").status, 400)


if __name__ == "__main__":
    suite.main()
