/* server_auth: who is asking (the admin token, a tenant's token, or nobody where no
 * token is required), which tenant a request acts for, and who may read /metrics
 * (docs/TENANCY.md, metrics_auth in docs/CONFIG.md). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Token from "Authorization: Token X", "Bearer X", Basic auth's password, or the
 * Influx 1.x `p` parameter. The user name (Basic, or `u`) is not read: the token alone
 * says who is asking, so `u` may carry the tenant name or anything else. An empty
 * token counts as none. */
static const char *req_token(struct MHD_Connection *c, char *buf, size_t buflen)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h) {
        if (!strncasecmp(h, "Token ", 6))
            return h + 6;
        if (!strncasecmp(h, "Bearer ", 7))
            return h + 7;
    }
    /* MHD returns the user name and hands the password back through the pointer. */
    char *pass = NULL;
    char *user = MHD_basic_auth_get_username_password(c, &pass);
    if (pass) {
        snprintf(buf, buflen, "%s", pass);
        MHD_free(pass);
        if (user)
            MHD_free(user);
        return buf;
    }
    if (user)
        MHD_free(user);
    return arg(c, "p");
}

/* Who is asking, without answering: 0 with *id filled, -1 (no token where one is
 * required) or -2 (wrong token). */
static int auth_ident(bdb_server *s, struct MHD_Connection *c, req_ident *id)
{
    char buf[1024];
    const char *tok = req_token(c, buf, sizeof buf);
    memset(id, 0, sizeof *id);
    if (!tok || !*tok) {
        if (!s->auth_required) {
            id->who = WHO_ANON;
            return 0;
        }
        return -1;
    }
    /* Compare hashes, never the secrets themselves, in constant time. */
    uint8_t h[BDB_HASH_BYTES];
    bdb_token_hash(tok, strlen(tok), h);
    if (bdb_hash_equal(h, s->admin_hash)) {
        id->who = WHO_ADMIN;
        return 0;
    }
    if (bdb_tenants_find_by_hash_key(s->tenants, h, id->tenant, id->key, sizeof id->key)) {
        id->who = WHO_TENANT;
        return 0;
    }
    if (!s->auth_required) {
        /* InfluxDB with auth off ignores credentials, and its clients send some by
         * default (python influxdb: root/root): refusing them broke such clients
         * while a request without any was served. No more access than none gives. */
        id->who = WHO_ANON;
        id->bad_token = 1;
        return 0;
    }
    return -2;
}

/* " (wrong token)" when credentials were sent that match no token, for the answers
 * of what needs one even where auth is optional. */
static const char *wrong_note(const req_ident *id)
{
    return id->bad_token ? " (wrong token)" : "";
}

int req_auth(bdb_server *s, struct MHD_Connection *c, req_ident *id, enum MHD_Result *r)
{
    int a = auth_ident(s, c, id);
    if (a == 0)
        return 0;
    if (a == -1) {
        atomic_fetch_add(&s->auth_failures, 1);
        *r = respond_json_error(s, c, 401,
                                "authorization failed: missing token (send Authorization: "
                                "Token <token>)",
                                1);
        return -1;
    }
    atomic_fetch_add(&s->auth_failures, 1);
    *r = respond_json_error(s, c, 401, "authorization failed: wrong token", 1);
    return -1;
}

/* The tenant a request names: its `tenant` and `db` query parameters. Each may be given
 * at most once and may not hold a NUL byte (%00): MHD hands values out as C strings,
 * so "tenant=B%00x" would silently be "B", and with a repeated parameter only the
 * first would count; either could make a client act on another tenant than it meant.
 * 0 with *tenant and *db set (NULL when absent or empty), or -1 with msg filled (400). */
struct tparams {
    const char *tenant, *db, *bucket;
    unsigned n_tenant, n_db, n_bucket;
    int nul;
    int use_bucket; /* /api/v2/write: `bucket` names the tenant; elsewhere it is a width */
};

static enum MHD_Result tparam_it(void *cls, enum MHD_ValueKind kind, const char *key,
                                 size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct tparams *p = cls;
    int is_t = key && !strcmp(key, "tenant"), is_db = key && !strcmp(key, "db");
    int is_b = p->use_bucket && key && !strcmp(key, "bucket");
    if (!is_t && !is_db && !is_b)
        return MHD_YES;
    if (key_size != strlen(key) || (value && value_size != strlen(value)))
        p->nul = 1;
    if (is_t) {
        p->n_tenant++;
        p->tenant = value;
    } else if (is_db) {
        p->n_db++;
        p->db = value;
    } else {
        p->n_bucket++;
        p->bucket = value;
    }
    return MHD_YES;
}

static int req_tenant_params(struct MHD_Connection *c, int use_bucket, const char **tenant,
                             const char **db, char *msg, size_t msglen)
{
    struct tparams p = {0};
    p.use_bucket = use_bucket;
    args_each(c, tparam_it, &p);
    if (p.n_tenant > 1 || p.n_db > 1 || p.n_bucket > 1) {
        const char *name = p.n_tenant > 1 ? "tenant" : p.n_db > 1 ? "db" : "bucket";
        unsigned n = p.n_tenant > 1 ? p.n_tenant : p.n_db > 1 ? p.n_db : p.n_bucket;
        snprintf(msg, msglen, "invalid tenant: the parameter '%s' is given %u times; give it once",
                 name, n);
        return -1;
    }
    if (p.nul) {
        snprintf(msg, msglen,
                 "invalid tenant: the tenant, db or bucket parameter holds a NUL byte (%%00); use "
                 "1..128 characters of A-Z a-z 0-9 _ - .");
        return -1;
    }
    /* v2 clients name the tenant in `bucket` as 1.x clients do in `db`: the same
     * thing twice, so two different names are a mistake to point out, not to pick. */
    const char *d = p.db && *p.db ? p.db : NULL, *b = p.bucket && *p.bucket ? p.bucket : NULL;
    if (d && b && strcmp(d, b) != 0) {
        snprintf(msg, msglen,
                 "invalid tenant: db '%.128s' and bucket '%.128s' name different tenants; give "
                 "one of them",
                 d, b);
        return -1;
    }
    *tenant = p.tenant && *p.tenant ? p.tenant : NULL;
    *db = d ? d : b;
    return 0;
}

const char *req_tenant(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r)
{
    return req_tenant_in(s, c, r, 0);
}

const char *req_tenant_in(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r,
                          int use_bucket)
{
    static _Thread_local char tenant_buf[BDB_TENANT_KEY_MAX + 1];
    req_ident id;
    if (req_auth(s, c, &id, r) != 0)
        return NULL;
    const char *tp, *dbp;
    char perr[400];
    if (req_tenant_params(c, use_bucket, &tp, &dbp, perr, sizeof perr) != 0) {
        *r = respond_json_error(s, c, 400, perr, 1);
        return NULL;
    }
    const char *t = tp ? tp : dbp;
    if (id.who == WHO_TENANT) {
        /* The token decides the tenant; naming another one, in `tenant` or in `db`
         * (Influx clients send `db` with every write), is refused, not ignored. */
        if (tp && strcmp(tp, id.tenant) != 0)
            t = tp;
        else if (dbp && strcmp(dbp, id.tenant) != 0)
            t = dbp;
        else
            t = NULL;
        if (t) {
            atomic_fetch_add(&s->forbidden, 1);
            char msg[400];
            snprintf(msg, sizeof msg,
                     "forbidden: the token belongs to tenant '%s' and may not access tenant "
                     "'%.128s'",
                     id.tenant, t);
            *r = respond_json_error(s, c, 403, msg, 1);
            return NULL;
        }
        /* the key found with the token: a deletion since then must not send this
         * write to the name's next tenant */
        snprintf(tenant_buf, BDB_TENANT_KEY_MAX + 1, "%s", id.key);
        return tenant_buf;
    }
    if (!t || !*t)
        t = s->cfg.default_tenant;
    if (!bdb_tenant_name_valid(t)) {
        *r = respond_json_error(s, c, 400,
                                "invalid tenant: use 1..128 characters of A-Z a-z 0-9 _ - .", 1);
        return NULL;
    }
    if (id.who == WHO_ANON && bdb_tenants_get(s->tenants, t, &(bdb_tenant_info){0}) == BDB_OK) {
        /* A registered tenant is protected by its token even where auth is optional. */
        atomic_fetch_add(&s->auth_failures, 1);
        char msg[300];
        snprintf(msg, sizeof msg,
                 "authorization failed%s: tenant '%s' is registered; send its token",
                 wrong_note(&id), t);
        *r = respond_json_error(s, c, 401, msg, 1);
        return NULL;
    }
    /* Every data path acts on the name's storage key, so what a deleted tenant of this
     * name stored is never reached again (docs/TENANCY.md#deleting-a-tenant). */
    bdb_tenants_storage_key(s->tenants, t, tenant_buf, sizeof tenant_buf);
    return tenant_buf;
}

int req_is_admin(bdb_server *s, struct MHD_Connection *c)
{
    req_ident id;
    return auth_ident(s, c, &id) == 0 && id.who == WHO_ADMIN;
}

int metrics_gate(bdb_server *s, struct MHD_Connection *c, enum MHD_Result *r)
{
    if (!strcmp(s->cfg.metrics_auth, "open"))
        return 0; /* the operator chose a closed monitoring network: tokens ignored */
    req_ident id;
    if (req_auth(s, c, &id, r) != 0)
        return -1;
    if (id.who == WHO_ADMIN)
        return 0;
    if (id.who == WHO_TENANT) {
        atomic_fetch_add(&s->forbidden, 1);
        *r = respond_json_error(s, c, 403,
                                "forbidden: /metrics covers every tenant and needs the admin "
                                "token, not a tenant token (or metrics_auth = open)",
                                0);
        return -1;
    }
    /* No token where none is required: fine while no tenant is registered, since the
     * per-tenant families name registered tenants only, and registering a tenant
     * protects it even where auth is optional. */
    if (bdb_tenants_count(s->tenants) == 0)
        return 0;
    atomic_fetch_add(&s->auth_failures, 1);
    char msg[200];
    snprintf(msg, sizeof msg,
             "authorization failed: %s (/metrics names the registered tenants: send "
             "Authorization: Token <admin token>)",
             id.bad_token ? "wrong token" : "missing token");
    *r = respond_json_error(s, c, 401, msg, 0);
    return -1;
}

int req_peek_tenant(bdb_server *s, struct MHD_Connection *c, int use_bucket,
                    char out[BDB_TENANT_NAME_MAX + 1])
{
    req_ident id;
    if (auth_ident(s, c, &id) != 0)
        return -1;
    if (id.who == WHO_TENANT) {
        snprintf(out, BDB_TENANT_NAME_MAX + 1, "%s", id.tenant);
        return 0;
    }
    const char *tp, *dbp;
    char perr[400];
    if (req_tenant_params(c, use_bucket, &tp, &dbp, perr, sizeof perr) != 0)
        return -1;
    const char *t = tp ? tp : dbp;
    if (!t)
        t = s->cfg.default_tenant;
    if (!bdb_tenant_name_valid(t))
        return -1;
    snprintf(out, BDB_TENANT_NAME_MAX + 1, "%s", t);
    return 0;
}
