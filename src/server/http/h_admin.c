/* h_admin: the tenant registry over HTTP, for the admin token only (docs/TENANCY.md).
 *
 *   POST   /api/v1/admin/tenants                  create  -> 201 {"name","token",...}
 *   GET    /api/v1/admin/tenants                  list
 *   GET    /api/v1/admin/tenants/<name>           show
 *   PATCH  /api/v1/admin/tenants/<name>           change quotas / retention
 *   DELETE /api/v1/admin/tenants/<name>           delete the tenant and its data
 *   POST   /api/v1/admin/tenants/<name>/token     rotate -> 200 {"name","token",...}
 *
 * A token appears in a response only when it is made (create, rotate); the registry
 * keeps its SHA-256 alone, so it cannot be shown again. */
#include "server/server_int.h"

#include "ingest/devrule.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "server/admission/hotpart.h"
#include "server/admission/quota.h"

#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

static void tenant_json(bdb_server *s, bdb_buf *b, const bdb_tenant_info *t, const char *token)
{
    uint64_t devices = 0, fresh = 0;
    char key[BDB_TENANT_KEY_MAX + 1]; /* the engine knows the tenant by it */
    bdb_tenants_storage_key(s->tenants, t->name, key, sizeof key);
    bdb_db_tenant_usage(s->db, key, NULL, &devices, &fresh);
    bdb_usage_opts uo = {s->cfg.partition_warn_bytes, 0};
    bdb_db_usage_start(s->db, &uo);
    bdb_storage_usage su;
    bdb_db_tenant_storage(s->db, key, &su);
    char created[40], rotated[40];
    bdb_format_time_ms(t->created_ms, created, sizeof created);
    bdb_format_time_ms(t->token_rotated_ms, rotated, sizeof rotated);
    bdb_buf_puts(b, "{\"name\":\"");
    bdb_buf_json_str(b, t->name, strlen(t->name));
    bdb_buf_putc(b, '"');
    if (token)
        bdb_buf_printf(b, ",\"token\":\"%s\"", token);
    const bdb_quotas *q = &t->quotas;
    bdb_buf_printf(b,
                   ",\"created\":\"%s\",\"created_ms\":%lld,\"token_rotated\":\"%s\","
                   "\"token_rotated_ms\":%lld,"
                   "\"quotas\":{\"writes_per_second\":%llu,\"burst\":%llu,"
                   "\"effective_burst\":%llu,\"max_devices\":%llu,\"storage_bytes\":%llu},"
                   "\"retention_ms\":%lld,\"not_enforced\":[],"
                   "\"usage\":{\"devices\":%llu,",
                   created, (long long)t->created_ms, rotated, (long long)t->token_rotated_ms,
                   (unsigned long long)q->writes_per_second, (unsigned long long)q->burst,
                   (unsigned long long)(q->writes_per_second
                                            ? bdb_quota_burst(q->writes_per_second, q->burst)
                                            : 0),
                   (unsigned long long)q->max_devices, (unsigned long long)q->storage_bytes,
                   (long long)t->retention_ms, (unsigned long long)devices);
    /* storage: what the storage_bytes quota is checked against (docs/TENANCY.md) */
    bdb_buf_printf(b,
                   "\"storage_bytes\":%llu,\"storage_block_bytes\":%llu,"
                   "\"storage_cassandra_bytes\":%llu,"
                   "\"storage_unflushed_samples\":%llu},\"rejections\":{",
                   (unsigned long long)su.bytes, (unsigned long long)su.block_bytes,
                   (unsigned long long)su.sink_bytes, (unsigned long long)su.unflushed_samples);
    for (int l = 0; l < BDB_LIMIT_N; l++)
        bdb_buf_printf(b, "%s\"%s\":%llu", l ? "," : "",
                       bdb_quota_limit_name((enum bdb_quota_limit)l),
                       (unsigned long long)t->rejections[l]);
    bdb_buf_putc(b, '}');
    /* hot partition settings: the tenant's own (0 / "default" = the server's) */
    const bdb_tenant_hot *h = &t->hot;
    bdb_buf_printf(b,
                   ",\"hot\":{\"threshold\":%llu,\"policy\":\"%s\",\"subbuckets\":%u,"
                   "\"rate_limit\":%llu,\"sample\":%.6g}",
                   (unsigned long long)h->threshold,
                   h->policy ? bdb_hot_kind_name(h->policy - 1) : "default", h->subbuckets,
                   (unsigned long long)h->rate_limit, h->sample);
    /* rollup tier TTL: the tenant's own (0 = the server's, -1 = forever) */
    bdb_buf_printf(b, ",\"tier_retention\":{\"1m\":%lld,\"1h\":%lld,\"1d\":%lld}",
                   (long long)t->tier_retention_ms[0], (long long)t->tier_retention_ms[1],
                   (long long)t->tier_retention_ms[2]);
    /* the tenant's device rule; "" = the server's device_rule (docs/API.md#mapping-rule) */
    bdb_buf_puts(b, ",\"device_rule\":\"");
    bdb_buf_json_str(b, t->device_rule, strlen(t->device_rule));
    bdb_buf_puts(b, "\"}");
}

static enum MHD_Result send_tenant(bdb_server *s, struct MHD_Connection *c, unsigned status,
                                   const bdb_tenant_info *t, const char *token)
{
    bdb_buf b;
    bdb_buf_init(&b);
    tenant_json(s, &b, t, token);
    bdb_buf_putc(&b, '\n');
    enum MHD_Result r = respond(s, c, status, "application/json", b.data, b.len);
    if (b.data)
        OPENSSL_cleanse(b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

static enum MHD_Result registry_error(bdb_server *s, struct MHD_Connection *c, int rc,
                                      const char *name)
{
    char msg[400];
    switch (rc) {
    case BDB_ERR_NOTFOUND:
        snprintf(msg, sizeof msg, "no tenant '%.200s' in the registry", name);
        return respond_json_error(s, c, 404, msg, 0);
    case BDB_ERR_EXISTS:
        snprintf(msg, sizeof msg, "tenant '%.200s' already exists", name);
        return respond_json_error(s, c, 409, msg, 0);
    case BDB_ERR_INVALID:
        return respond_json_error(s, c, 400,
                                  "invalid tenant: the name must be 1..128 characters of A-Z a-z "
                                  "0-9 _ - . and quotas at most 1000000000000",
                                  0);
    case BDB_ERR_AGAIN: /* its store (Cassandra) did not confirm: retry later */
        return respond_json_error(s, c, 503,
                                  "the storage backend that keeps the tenant registry did not "
                                  "confirm the change (not reachable?); nothing changed",
                                  0);
    default:
        snprintf(msg, sizeof msg, "cannot save the tenant registry: %s; nothing changed",
                 bdb_strerror(rc));
        return respond_json_error(s, c, 500, msg, 0);
    }
}

_Static_assert(BDB_TENANT_RETENTION_MAX_MS == INT64_C(3153600000000),
               "the retention bound is spelled out in the error messages below");

/* A non-negative integer: a JSON integer, or for durations a string like "30d". */
static int get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int get_duration(json_t *v, int64_t *out)
{
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = json_integer_value(v);
        return 0;
    }
    if (json_is_string(v))
        return bdb_config_parse_duration(json_string_value(v), out);
    return -1;
}

/* The "tier_retention" object: {"1m","1h","1d"}, each optional: milliseconds or a
 * duration ("2d"), 0 or "default" for the server's setting, -1 or "forever". */
static int parse_tier_retention(json_t *val, bdb_tenant_patch *p, char *err, size_t errlen)
{
    static const char *const keys[3] = {"1m", "1h", "1d"};
    if (!json_is_object(val)) {
        snprintf(err, errlen, "'tier_retention' must be an object with keys 1m, 1h, 1d");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(val, k, v)
    {
        int t = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(k, keys[i]))
                t = i;
        if (t < 0) {
            snprintf(err, errlen, "tier_retention: unknown tier '%.100s' (known: 1m, 1h, 1d)", k);
            return -1;
        }
        int64_t ms = 0;
        if ((json_is_integer(v) && json_integer_value(v) == -1) ||
            (json_is_string(v) && !strcmp(json_string_value(v), "forever")))
            ms = -1;
        else if (json_is_string(v) && !strcmp(json_string_value(v), "default"))
            ms = 0;
        else if (get_duration(v, &ms) || ms > BDB_TENANT_RETENTION_MAX_MS) {
            snprintf(err, errlen,
                     "tier_retention.%s must be milliseconds from 0 to 3153600000000 (36500d, "
                     "100 years), a duration such as \"2d\", \"default\" or \"forever\"",
                     k);
            return -1;
        }
        p->tier_retention_ms[t] = ms;
        p->has_tier_retention[t] = 1;
    }
    return 0;
}

/* The "hot" object: {"threshold","policy","subbuckets","rate_limit","sample"}, each
 * optional; 0 (or "default" for policy) goes back to the server's setting. */
static int parse_hot(json_t *val, bdb_tenant_patch *p, char *err, size_t errlen)
{
    if (!json_is_object(val)) {
        snprintf(err, errlen, "'hot' must be an object");
        return -1;
    }
    const char *k;
    json_t *v;
    json_object_foreach(val, k, v)
    {
        uint64_t u = 0;
        if (!strcmp(k, "policy")) {
            const char *name = json_is_string(v) ? json_string_value(v) : "";
            int kind = !strcmp(name, "default") ? -1 : bdb_hot_kind_parse(name);
            if (kind < 0 && strcmp(name, "default")) {
                snprintf(err, errlen,
                         "hot.policy must be none, subbucket, ratelimit, sample or default");
                return -1;
            }
            p->hot.policy = kind + 1;
            p->has_hot_policy = 1;
        } else if (!strcmp(k, "sample")) {
            double f = json_is_number(v) ? json_number_value(v) : -1;
            if (f < 0 || f > 1 || (f > 0 && f < 0.000001)) {
                snprintf(err, errlen, "hot.sample must be a fraction in (0, 1], or 0 (default)");
                return -1;
            }
            p->hot.sample = f;
            p->has_hot_sample = 1;
        } else if (!strcmp(k, "threshold") || !strcmp(k, "rate_limit")) {
            if (get_u64(v, &u) || u > UINT32_MAX) {
                snprintf(err, errlen, "hot.%s must be an integer from 0 (default) to %u", k,
                         UINT32_MAX);
                return -1;
            }
            if (k[0] == 't')
                p->hot.threshold = u, p->has_hot_threshold = 1;
            else
                p->hot.rate_limit = u, p->has_hot_rate_limit = 1;
        } else if (!strcmp(k, "subbuckets")) {
            if (get_u64(v, &u) || u == 1 || u > 64) {
                snprintf(err, errlen, "hot.subbuckets must be 2..64, or 0 (default)");
                return -1;
            }
            p->hot.subbuckets = (uint32_t)u;
            p->has_hot_subbuckets = 1;
        } else {
            snprintf(err, errlen,
                     "unknown hot setting '%.100s' (known: threshold, policy, subbuckets, "
                     "rate_limit, sample)",
                     k);
            return -1;
        }
    }
    return 0;
}

/* Reads the settings of a create or update body into p. 0, or -1 with err set. */
static int parse_settings(json_t *root, int create, bdb_tenant_patch *p, const char **name,
                          char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    *name = NULL;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val)
    {
        if (!strcmp(key, "name")) {
            if (!json_is_string(val)) {
                snprintf(err, errlen, "'name' must be a string");
                return -1;
            }
            *name = json_string_value(val);
        } else if (!strcmp(key, "retention_ms") || !strcmp(key, "retention")) {
            if (p->has_retention) { /* both spellings: the same field twice */
                snprintf(err, errlen,
                         "'retention_ms' and 'retention' are the same field; give it once");
                return -1;
            }
            if (get_duration(val, &p->retention_ms) ||
                p->retention_ms > BDB_TENANT_RETENTION_MAX_MS) {
                snprintf(err, errlen,
                         "'%s' must be milliseconds from 0 (the server's retention_ms) to "
                         "3153600000000 (36500d, 100 years), or a duration such as \"30d\"",
                         key);
                return -1;
            }
            p->has_retention = 1;
        } else if (!strcmp(key, "quotas")) {
            if (!json_is_object(val)) {
                snprintf(err, errlen, "'quotas' must be an object");
                return -1;
            }
            const char *qk;
            json_t *qv;
            json_object_foreach(val, qk, qv)
            {
                uint64_t *dst;
                int *has;
                if (!strcmp(qk, "writes_per_second"))
                    dst = &p->quotas.writes_per_second, has = &p->has_writes_per_second;
                else if (!strcmp(qk, "burst"))
                    dst = &p->quotas.burst, has = &p->has_burst;
                else if (!strcmp(qk, "max_devices"))
                    dst = &p->quotas.max_devices, has = &p->has_max_devices;
                else if (!strcmp(qk, "storage_bytes"))
                    dst = &p->quotas.storage_bytes, has = &p->has_storage_bytes;
                else {
                    snprintf(err, errlen,
                             "unknown quota '%.100s' (known: writes_per_second, burst, "
                             "max_devices, storage_bytes)",
                             qk);
                    return -1;
                }
                if (get_u64(qv, dst) || *dst > BDB_QUOTA_MAX_RATE) {
                    snprintf(err, errlen,
                             "quota '%s' must be an integer from 0 (no limit) to "
                             "1000000000000",
                             qk);
                    return -1;
                }
                *has = 1;
            }
        } else if (!strcmp(key, "hot")) {
            if (parse_hot(val, p, err, errlen) != 0)
                return -1;
        } else if (!strcmp(key, "tier_retention")) {
            if (parse_tier_retention(val, p, err, errlen) != 0)
                return -1;
        } else if (!strcmp(key, "device_rule")) {
            if (!json_is_string(val)) {
                snprintf(err, errlen,
                         "'device_rule' must be a string (\"\" = the server's device_rule)");
                return -1;
            }
            p->has_device_rule = 1;
            if (json_string_value(val)[0]) {
                bdb_devrule d;
                char why[240];
                if (bdb_devrule_parse(json_string_value(val), &d, why, sizeof why) != 0) {
                    snprintf(err, errlen, "device_rule: %s", why);
                    return -1;
                }
                snprintf(p->device_rule, sizeof p->device_rule, "%s", bdb_devrule_text(&d));
            }
        } else {
            snprintf(err, errlen,
                     "unknown field '%.100s' (known: name, quotas, retention_ms, hot, "
                     "tier_retention, device_rule)",
                     key);
            return -1;
        }
    }
    if (create && !*name) {
        snprintf(err, errlen, "missing 'name'");
        return -1;
    }
    return 0;
}

static json_t *parse_body(req *r, char *err, size_t errlen)
{
    if (!r->body.len) {
        snprintf(err, errlen, "missing JSON body");
        return NULL;
    }
    json_error_t je;
    /* A key given twice ({"name":"a","name":"b"}) is refused, never the last one
     * taken silently (docs/TENANCY.md#admin-api). */
    json_t *root = json_loadb((const char *)r->body.data, r->body.len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "invalid JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        snprintf(err, errlen, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

static enum MHD_Result create_tenant(bdb_server *s, struct MHD_Connection *c, req *r)
{
    char err[300];
    json_t *root = parse_body(r, err, sizeof err);
    if (!root)
        return respond_json_error(s, c, 400, err, 0);
    bdb_tenant_patch p;
    const char *name;
    if (parse_settings(root, 1, &p, &name, err, sizeof err)) {
        json_decref(root);
        return respond_json_error(s, c, 400, err, 0);
    }
    char nm[BDB_TENANT_NAME_MAX + 1];
    if (bdb_tenant_name_registrable(name, s->cfg.default_tenant, err, sizeof err) != 0) {
        json_decref(root);
        return respond_json_error(s, c, 400, err, 0);
    }
    snprintf(nm, sizeof nm, "%s", name);
    json_decref(root);
    char token[BDB_TOKEN_HEX + 1];
    /* one change with every setting: never stored without them (nor half-undone when
     * the registry's store goes away between two changes) */
    int rc = bdb_tenants_create_with(s->tenants, nm, &p, bdb_now_ms(), token);
    if (rc != BDB_OK)
        return registry_error(s, c, rc, nm);
    BDB_INFO("tenant '%s' created", nm);
    bdb_tenant_info t;
    if (bdb_tenants_get(s->tenants, nm, &t) != BDB_OK) { /* deleted meanwhile */
        OPENSSL_cleanse(token, sizeof token);
        return registry_error(s, c, BDB_ERR_NOTFOUND, nm);
    }
    enum MHD_Result res = send_tenant(s, c, 201, &t, token);
    OPENSSL_cleanse(token, sizeof token);
    return res;
}

struct list_ctx {
    bdb_server *s;
    bdb_buf *b;
    size_t n;
};

static int list_cb(void *ctx, const bdb_tenant_info *t)
{
    struct list_ctx *l = ctx;
    if (l->n++)
        bdb_buf_putc(l->b, ',');
    tenant_json(l->s, l->b, t, NULL);
    return 0;
}

static enum MHD_Result list_tenants(bdb_server *s, struct MHD_Connection *c)
{
    bdb_buf b;
    bdb_buf_init(&b);
    struct list_ctx l = {s, &b, 0};
    bdb_buf_puts(&b, "{\"tenants\":[");
    bdb_tenants_list(s->tenants, list_cb, &l);
    bdb_buf_printf(&b, "],\"count\":%zu}\n", l.n);
    enum MHD_Result r = respond(s, c, 200, "application/json", b.data, b.len);
    bdb_buf_free(&b);
    return r;
}

static enum MHD_Result one_tenant(bdb_server *s, struct MHD_Connection *c, const char *name,
                                  const char *method, req *r)
{
    bdb_tenant_info t;
    int rc;
    if (!strcmp(method, "GET") || !strcmp(method, "HEAD")) {
        rc = bdb_tenants_get(s->tenants, name, &t);
        return rc == BDB_OK ? send_tenant(s, c, 200, &t, NULL) : registry_error(s, c, rc, name);
    }
    if (!strcmp(method, "DELETE")) {
        rc = bdb_tenants_delete(s->tenants, name, bdb_now_ms());
        if (rc != BDB_OK)
            return registry_error(s, c, rc, name);
        BDB_INFO("tenant '%s' deleted: its data is unreachable now and is being removed "
                 "(docs/TENANCY.md#deleting-a-tenant)",
                 name);
        bdb_purge_kick(s->purge);
        return respond(s, c, 204, NULL, "", 0);
    }
    if (!strcmp(method, "PATCH")) {
        char err[300];
        json_t *root = parse_body(r, err, sizeof err);
        if (!root)
            return respond_json_error(s, c, 400, err, 0);
        bdb_tenant_patch p;
        const char *nm;
        int bad = parse_settings(root, 0, &p, &nm, err, sizeof err);
        if (!bad && nm && strcmp(nm, name)) {
            snprintf(err, sizeof err, "a tenant cannot be renamed ('name' must be '%s')", name);
            bad = 1;
        }
        if (bad) {
            json_decref(root);
            return respond_json_error(s, c, 400, err, 0);
        }
        json_decref(root);
        rc = bdb_tenants_update(s->tenants, name, &p, &t);
        if (rc != BDB_OK)
            return registry_error(s, c, rc, name);
        BDB_INFO("tenant '%s' updated", name);
        return send_tenant(s, c, 200, &t, NULL);
    }
    return respond_json_error(s, c, 405, "use GET, PATCH or DELETE", 0);
}

static enum MHD_Result rotate_token(bdb_server *s, struct MHD_Connection *c, const char *name,
                                    const char *method)
{
    if (strcmp(method, "POST"))
        return respond_json_error(s, c, 405, "use POST", 0);
    char token[BDB_TOKEN_HEX + 1];
    int rc = bdb_tenants_rotate(s->tenants, name, bdb_now_ms(), token);
    if (rc != BDB_OK)
        return registry_error(s, c, rc, name);
    BDB_INFO("tenant '%s': token rotated", name);
    bdb_tenant_info t;
    if (bdb_tenants_get(s->tenants, name, &t) != BDB_OK) {
        OPENSSL_cleanse(token, sizeof token);
        return registry_error(s, c, BDB_ERR_NOTFOUND, name);
    }
    enum MHD_Result res = send_tenant(s, c, 200, &t, token);
    OPENSSL_cleanse(token, sizeof token);
    return res;
}

enum MHD_Result h_admin(bdb_server *s, struct MHD_Connection *c, const char *rest,
                        const char *method, req *r)
{
    enum MHD_Result res;
    req_ident id;
    if (req_auth(s, c, &id, &res) != 0)
        return res;
    if (id.who == WHO_ANON) {
        /* The admin API needs the admin token even where other requests need none. */
        atomic_fetch_add(&s->auth_failures, 1);
        return respond_json_error(s, c, 401,
                                  id.bad_token ? "authorization failed: wrong token (the admin "
                                                 "API needs the admin token, <data>/token)"
                                               : "authorization failed: the admin API needs the "
                                                 "admin token (<data>/token)",
                                  0);
    }
    if (id.who != WHO_ADMIN) {
        atomic_fetch_add(&s->forbidden, 1);
        return respond_json_error(s, c, 403,
                                  "forbidden: a tenant token cannot use the admin API; use the "
                                  "admin token (<data>/token)",
                                  0);
    }
    if (!strcmp(rest, "/tenants") || !strcmp(rest, "/tenants/")) {
        if (!strcmp(method, "GET") || !strcmp(method, "HEAD"))
            return list_tenants(s, c);
        if (!strcmp(method, "POST"))
            return create_tenant(s, c, r);
        return respond_json_error(s, c, 405, "use GET or POST", 0);
    }
    if (!strncmp(rest, "/tenants/", 9)) {
        char name[BDB_TENANT_NAME_MAX + 16];
        const char *p = rest + 9;
        size_t n = strcspn(p, "/");
        if (n == 0 || n > BDB_TENANT_NAME_MAX)
            return respond_json_error(s, c, 404, "no such tenant", 0);
        memcpy(name, p, n);
        name[n] = '\0';
        if (!bdb_tenant_name_valid(name))
            return respond_json_error(s, c, 404, "no such tenant", 0);
        const char *sub = p + n;
        if (!*sub || !strcmp(sub, "/"))
            return one_tenant(s, c, name, method, r);
        if (!strcmp(sub, "/token"))
            return rotate_token(s, c, name, method);
    }
    char msg[300];
    snprintf(msg, sizeof msg, "no such endpoint: %s /api/v1/admin%.200s", method, rest);
    return respond_json_error(s, c, 404, msg, 0);
}
