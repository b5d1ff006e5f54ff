#!/usr/bin/env python3
"""InfluxDB clients and credentials (issue 19, item 2), with the real client libraries:
python3-influxdb 5.3 (Debian; run by /usr/bin/python3, which has it) with its default
credentials root/root against a server where no token is required, and with a
tenant's token as its password where one is; `p` and Basic auth carrying the token,
a wrong token 401, another tenant's db 403; and the InfluxDB 2 client
@influxdata/influxdb-client (npm, installed into .cache/, which git ignores) writing
to the tenant its `bucket` names. Also /api/v2/write's precisions and the v2 query
API's error."""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bdbtest import Server, Suite, check, contains, eq, path_with  # noqa: E402

suite = Suite("influx_auth")
T0 = 1705327200000  # 2024-01-15T14:00:00Z
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM_DIR = os.path.join(ROOT, ".cache", "influxdb-client-npm")
NPM_PKG = "@influxdata/influxdb-client@1.35.0"

# Runs python3-influxdb with the keyword arguments given (nothing but host and port
# when testing its defaults) and prints what happened as JSON.
PY_CLIENT = r"""
import json, sys
from influxdb import InfluxDBClient
from influxdb.exceptions import InfluxDBClientError
a = json.loads(sys.argv[1])
c = InfluxDBClient(host="127.0.0.1", port=a["port"], timeout=30, **a["kw"])
try:
    if a.get("create"):
        c.create_database(a["kw"]["database"])
    ok = c.write_points(a["points"], time_precision="ms")
    print(json.dumps({"ok": ok}))
except InfluxDBClientError as e:
    print(json.dumps({"ok": False, "code": e.code, "content": str(e.content)}))
"""

NODE_CLIENT = r"""
const {InfluxDB, Point} = require(process.env.INFLUX_CLIENT_DIR);
const [url, token, org, bucket, t] = process.argv.slice(1);  // node -e: no script path
const w = new InfluxDB({url, token, timeout: 30000})
    .getWriteApi(org, bucket, 'ms', {maxRetries: 0, flushInterval: 0});
w.writePoint(new Point('env').tag('device', 'v2dev').floatField('temp', 21.5)
    .timestamp(Number(t)));
w.close().then(() => console.log(JSON.stringify({ok: true})),
               e => console.log(JSON.stringify({ok: false, status: e.statusCode || 0,
                                                body: String(e.body || e.message)})));
"""


def tok(t):
    return {"Authorization": "Token " + t}


def make_tenant(s, name):
    r = s.request("POST", "/api/v1/admin/tenants", json.dumps({"name": name}),
                  {"Content-Type": "application/json", **tok(s.token)})
    eq(r.status, 201, "create %s (%r)" % (name, r.body[:200]))
    return r.json()["token"]


def count(s, token, device, tenant=None):
    params = {"device": device, "from": T0 - 1000, "to": T0 + 10**6}
    if tenant:
        params["tenant"] = tenant
    r = s.request("GET", path_with("/api/v1/query", params), None, tok(token) if token else None)
    if r.status == 404:
        return 0
    eq(r.status, 200, "query %s (%r)" % (device, r.body[:200]))
    return r.json()["count"]


def py_client(s, kw, device="d1", t=T0, create=False):
    arg = {"port": s.port, "kw": kw, "create": create,
           "points": [{"measurement": "env", "tags": {"device": device},
                       "fields": {"temp": 21.5}, "time": t}]}
    p = subprocess.run(["/usr/bin/python3", "-c", PY_CLIENT, json.dumps(arg)],
                       capture_output=True, text=True, timeout=120)
    eq(p.returncode, 0, "python3-influxdb (is python3-influxdb installed? scripts/setup.sh "
                        "--test): %s" % p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def npm_client():
    """The v2 client's directory, installed once into .cache/ with npm."""
    mod = os.path.join(NPM_DIR, "node_modules", "@influxdata", "influxdb-client")
    if not os.path.isdir(mod):
        os.makedirs(NPM_DIR, exist_ok=True)
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent",
                            "--prefix", NPM_DIR, NPM_PKG],
                           capture_output=True, text=True, timeout=600)
        eq(p.returncode, 0, "npm install %s: %s" % (NPM_PKG, p.stderr[-2000:]))
    return mod


def node_client(s, token, org, bucket, t=T0):
    env = dict(os.environ, INFLUX_CLIENT_DIR=npm_client())
    p = subprocess.run(["node", "-e", NODE_CLIENT, "http://127.0.0.1:%d" % s.port, token, org,
                        bucket, str(t)], capture_output=True, text=True, timeout=120, env=env)
    eq(p.returncode, 0, "node: %s" % p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


@suite.test
def python_client_defaults_where_auth_is_optional():
    # python3-influxdb sends root/root unless told otherwise; InfluxDB with auth off
    # ignores them. bucketdb answered 401 "wrong token".
    with Server() as s:
        contains(s.ready_text, "auth optional")
        got = py_client(s, {"database": "fleet"}, create=True)
        eq(got, {"ok": True})
        eq(count(s, None, "d1", tenant="fleet"), 1, "the write is in tenant fleet")
        eq(count(s, None, "d1"), 0, "and not in the default tenant")
        # A registered tenant still wants its own token: root/root is not it.
        make_tenant(s, "acme")
        got = py_client(s, {"database": "acme"})
        eq((got["ok"], got.get("code")), (False, 401), got)
        contains(got["content"], "wrong token")


@suite.test
def python_client_with_a_token_where_auth_is_required():
    with Server(args=["--auth", "on"]) as s:
        ta, tb = make_tenant(s, "acme"), make_tenant(s, "beta")
        # Basic auth (the client's way): the password carries the token, the user name
        # is free.
        eq(py_client(s, {"username": "acme", "password": ta, "database": "acme"}), {"ok": True})
        eq(count(s, ta, "d1"), 1)
        got = py_client(s, {"username": "acme", "password": "0" * 64, "database": "acme"},
                        t=T0 + 1)
        eq((got["ok"], got.get("code")), (False, 401), got)
        contains(got["content"], "wrong token")
        got = py_client(s, {"username": "root", "password": "root", "database": "acme"},
                        t=T0 + 1)
        eq((got["ok"], got.get("code")), (False, 401), got)
        # Another tenant's db is refused, not silently written to the token's tenant.
        got = py_client(s, {"username": "acme", "password": ta, "database": "beta"}, t=T0 + 2)
        eq((got["ok"], got.get("code")), (False, 403), got)
        contains(got["content"], "tenant 'acme'")
        eq(count(s, tb, "d1"), 0)
        eq(count(s, ta, "d1"), 1)
        # The 1.x `p` parameter carries it too.
        r = s.request("POST", "/write?db=acme&u=x&p=%s&precision=ms" % ta,
                      "env,device=d1 temp=3 %d" % (T0 + 3))
        eq(r.status, 204, r.body[:200])
        r = s.request("POST", "/write?db=beta&u=x&p=%s&precision=ms" % ta,
                      "env,device=d1 temp=3 %d" % (T0 + 4))
        eq(r.status, 403, r.body[:200])
        eq(count(s, ta, "d1"), 2)


@suite.test
def v2_client_writes_to_the_bucket_it_names():
    # @influxdata/influxdb-client's writes landed in tenant `default` whatever the
    # bucket said.
    with Server() as s:
        got = node_client(s, "any-token", "my-org", "plant7")
        eq(got, {"ok": True})
        eq(count(s, None, "v2dev", tenant="plant7"), 1, "tenant plant7 has it")
        eq(count(s, None, "v2dev"), 0, "the default tenant does not")
    with Server(args=["--auth", "on"]) as s:
        ta = make_tenant(s, "acme")
        make_tenant(s, "beta")
        eq(node_client(s, ta, "ignored-org", "acme"), {"ok": True})
        eq(count(s, ta, "v2dev"), 1)
        got = node_client(s, ta, "ignored-org", "beta", t=T0 + 1)
        eq((got["ok"], got["status"]), (False, 403), got)
        got = node_client(s, "0" * 64, "ignored-org", "acme", t=T0 + 2)
        eq((got["ok"], got["status"]), (False, 401), got)
        eq(count(s, ta, "v2dev"), 1)


@suite.test
def v2_write_parameters_and_query_api():
    with Server() as s:
        line = "env,device=p1 temp=1 %d" % T0
        for prec, mul in (("ns", 10**6), ("us", 1000), ("ms", 1), ("s", 0.001)):
            r = s.request("POST", "/api/v2/write?bucket=b1&org=o&precision=" + prec,
                          "env,device=p1 temp=1 %d" % int(T0 * mul))
            eq(r.status, 204, "precision %s (%r)" % (prec, r.body[:200]))
        for prec in ("h", "m", "u", "n", "xs"):
            r = s.request("POST", "/api/v2/write?bucket=b1&precision=" + prec, line)
            eq(r.status, 400, "precision %s" % prec)
            contains(r.json()["error"], "ns, us, ms or s")
        # /write keeps 1.x's precisions
        eq(s.request("POST", "/write?db=b1&precision=h", "env,device=p1 temp=1 1").status, 204)
        # bucket and db naming two tenants: which one was meant is unknown
        r = s.request("POST", "/api/v2/write?bucket=b1&db=b2&precision=ms", line)
        eq(r.status, 400)
        contains(r.json()["error"], "different tenants")
        eq(s.request("POST", "/api/v2/write?bucket=b1&db=b1&precision=ms", line).status, 204)
        # only /api/v2/write reads `bucket` as a tenant
        eq(s.request("POST", "/write?bucket=b9&precision=ms", line).status, 204)
        eq(count(s, None, "p1", tenant="b9"), 0)
        # The v2 query API (Flux) is not served: a v2-shaped error says so.
        r = s.request("POST", "/api/v2/query?org=o", '{"query":"from(bucket:\\"b1\\")"}',
                      {"Content-Type": "application/json"})
        eq(r.status, 501)
        doc = r.json()
        eq(sorted(doc), ["code", "message"])
        eq(doc["code"], "not implemented")
        contains(doc["message"], "Flux")
        contains(doc["message"], "/query")


@suite.test
def show_databases_lists_what_the_caller_may_read():
    # docs/INFLUX.md: anonymous (no token required here): the default tenant and the
    # unregistered tenants with data; the admin token: those and every registered
    # tenant, data or not; a tenant token: its tenant.
    with Server() as s:
        ta = make_tenant(s, "acme")
        make_tenant(s, "empty")
        for db, headers in (("fleet", None), ("acme", tok(ta)), ("zoo", None)):
            r = s.request("POST", "/write?db=%s&precision=ms" % db,
                          "env,device=d1 temp=1 %d" % T0, headers)
            eq(r.status, 204, r.body[:200])

        def dbs(headers):
            r = s.request("GET", "/query?q=SHOW+DATABASES", None, headers)
            eq(r.status, 200, r.body[:200])
            return [v[0] for v in r.json()["results"][0]["series"][0]["values"]]

        eq(dbs(None), ["default", "fleet", "zoo"], "anonymous")
        eq(dbs(tok(s.token)), ["acme", "default", "empty", "fleet", "zoo"], "admin")
        eq(dbs(tok(ta)), ["acme"], "a tenant's token")


if __name__ == "__main__":
    suite.main()
