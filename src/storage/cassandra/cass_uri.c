/* cass_uri: see cass_uri.h. */
#include "storage/cassandra/cass_uri.h"

#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/wire/cql_proto.h"
#include "storage/cassandra/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_int(const char *k, const char *v, int lo, int hi, int *out, char *err,
                     size_t errlen)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi) {
        snprintf(err, errlen, "storage URI: %s=%s must be an integer in %d..%d", k, v, lo, hi);
        return BDB_ERR_INVALID;
    }
    *out = (int)x;
    return BDB_OK;
}

/* A text value into a fixed field: refused when it does not fit (a cut password or
 * data-center name would fail later, and less clearly). */
static int parse_text(const char *k, const char *v, char *dst, size_t cap, char *err, size_t errlen)
{
    if (strlen(v) >= cap) {
        snprintf(err, errlen, "storage URI: %s= is longer than %zu bytes", k, cap - 1);
        return BDB_ERR_INVALID;
    }
    memcpy(dst, v, strlen(v) + 1);
    return BDB_OK;
}

static int parse_bool(const char *k, const char *v, int *out, char *err, size_t errlen)
{
    if (strcmp(v, "true") && strcmp(v, "false")) {
        snprintf(err, errlen, "storage URI: %s=%s must be true or false", k, v);
        return BDB_ERR_INVALID;
    }
    *out = !strcmp(v, "true");
    return BDB_OK;
}

static int parse_cl(const char *k, const char *v, int *out, char *err, size_t errlen)
{
    int cl = cql_consistency_parse(v);
    if (cl < 0 || cl == CQL_SERIAL || cl == CQL_LOCAL_SERIAL) {
        snprintf(err, errlen,
                 "storage URI: %s=%s is not a consistency level (ONE, TWO, THREE, QUORUM, ALL, "
                 "LOCAL_QUORUM, EACH_QUORUM, LOCAL_ONE)",
                 k, v);
        return BDB_ERR_INVALID;
    }
    *out = cl;
    return BDB_OK;
}

int cass_uri_parse(const char *uri, cass_uri *o, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    o->write_cl = o->read_cl = CQL_LOCAL_QUORUM;
    o->inflight = 16;
    o->batch_rows = 100;
    o->pool = 2;
    o->retries = 6;
    o->timeout_ms = 12000;
    o->create_schema = 1;
    o->bucket_s = 3600;
    o->tls_verify = 1;
    const char *pre = "cassandra://";
    if (strncmp(uri, pre, strlen(pre)) != 0) {
        snprintf(err, errlen, "storage URI '%s' must start with cassandra://", uri);
        return BDB_ERR_INVALID;
    }
    const char *p = uri + strlen(pre);
    const char *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    if (hl == 0) {
        snprintf(err, errlen, "storage URI '%s': no host (cassandra://HOST[:PORT],.../KEYSPACE)",
                 uri);
        return BDB_ERR_INVALID;
    }
    if (hl >= sizeof o->hosts) {
        snprintf(err, errlen, "storage URI: the host list is longer than %zu bytes",
                 sizeof o->hosts - 1);
        return BDB_ERR_INVALID;
    }
    memcpy(o->hosts, p, hl);
    const char *ks = slash ? slash + 1 : "";
    const char *q = strchr(ks, '?');
    size_t kl = q ? (size_t)(q - ks) : strlen(ks);
    if (kl == 0)
        snprintf(o->ks, sizeof o->ks, "bucketdb");
    else if (kl >= sizeof o->ks) {
        snprintf(err, errlen, "storage URI: keyspace longer than 48 characters");
        return BDB_ERR_INVALID;
    } else
        memcpy(o->ks, ks, kl);
    for (const char *c = o->ks; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_')) {
            snprintf(err, errlen, "storage URI: keyspace '%s': letters, digits and _ only", o->ks);
            return BDB_ERR_INVALID;
        }
    const char *env = getenv("CQL_PASSWORD");
    if (env && parse_text("$CQL_PASSWORD", env, o->password, sizeof o->password, err, errlen))
        return BDB_ERR_INVALID;
    if (!q)
        return BDB_OK;
    char *query = strdup(q + 1), *save = NULL;
    if (!query)
        return BDB_ERR_NOMEM;
    int rc = BDB_OK;
    for (char *kv = strtok_r(query, "&", &save); kv && rc == BDB_OK;
         kv = strtok_r(NULL, "&", &save)) {
        char *eq = strchr(kv, '=');
        if (!eq) {
            snprintf(err, errlen, "storage URI: '%s' is not key=value", kv);
            rc = BDB_ERR_INVALID;
            break;
        }
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        if (!strcmp(k, "dc"))
            rc = parse_text(k, v, o->dc, sizeof o->dc, err, errlen);
        else if (!strcmp(k, "consistency")) {
            rc = parse_cl(k, v, &o->write_cl, err, errlen);
            o->read_cl = o->write_cl;
        } else if (!strcmp(k, "write_consistency"))
            rc = parse_cl(k, v, &o->write_cl, err, errlen);
        else if (!strcmp(k, "read_consistency"))
            rc = parse_cl(k, v, &o->read_cl, err, errlen);
        else if (!strcmp(k, "replication"))
            rc = parse_text(k, v, o->replication, sizeof o->replication, err, errlen);
        else if (!strcmp(k, "user"))
            rc = parse_text(k, v, o->user, sizeof o->user, err, errlen);
        else if (!strcmp(k, "password"))
            rc = parse_text(k, v, o->password, sizeof o->password, err, errlen);
        else if (!strcmp(k, "inflight"))
            rc = parse_int(k, v, 1, 256, &o->inflight, err, errlen);
        else if (!strcmp(k, "batch_rows"))
            rc = parse_int(k, v, 1, 1000, &o->batch_rows, err, errlen);
        else if (!strcmp(k, "pool"))
            rc = parse_int(k, v, 1, 8, &o->pool, err, errlen);
        else if (!strcmp(k, "retries"))
            rc = parse_int(k, v, 0, 20, &o->retries, err, errlen);
        else if (!strcmp(k, "offline_start"))
            rc = parse_bool(k, v, &o->offline_start, err, errlen);
        else if (!strcmp(k, "adopt"))
            rc = parse_bool(k, v, &o->adopt, err, errlen);
        else if (!strcmp(k, "ack")) {
            if (strcmp(v, "wal") && strcmp(v, "quorum")) {
                snprintf(err, errlen, "storage URI: ack=%s must be wal or quorum", v);
                rc = BDB_ERR_INVALID;
            }
            o->ack_quorum = !strcmp(v, "quorum");
        } else if (!strcmp(k, "timeout_ms"))
            rc = parse_int(k, v, 100, 600000, &o->timeout_ms, err, errlen);
        else if (!strcmp(k, "schema")) {
            if (strcmp(v, "create") && strcmp(v, "none")) {
                snprintf(err, errlen, "storage URI: schema=%s must be create or none", v);
                rc = BDB_ERR_INVALID;
            }
            o->create_schema = !strcmp(v, "create");
        } else if (!strcmp(k, "bucket")) {
            if (sch_parse_duration(v, &o->bucket_s) != BDB_OK || o->bucket_s <= 0) {
                snprintf(err, errlen, "storage URI: bucket=%s is not a duration (e.g. 1h)", v);
                rc = BDB_ERR_INVALID;
            }
        } else if (!strcmp(k, "tls") || !strcmp(k, "tls_verify")) {
            rc = parse_bool(k, v, !strcmp(k, "tls") ? &o->tls : &o->tls_verify, err, errlen);
        } else if (!strcmp(k, "ca") || !strcmp(k, "cert") || !strcmp(k, "key")) {
            char *dst = !strcmp(k, "ca") ? o->ca : !strcmp(k, "cert") ? o->cert : o->key;
            if (!*v || strlen(v) >= sizeof o->ca) {
                snprintf(err, errlen, "storage URI: %s= needs a file path of 1..%zu bytes", k,
                         sizeof o->ca - 1);
                rc = BDB_ERR_INVALID;
            } else {
                snprintf(dst, sizeof o->ca, "%s", v);
            }
        } else {
            snprintf(
                err, errlen,
                "storage URI: unknown key '%s' (dc, consistency, write_consistency, "
                "read_consistency, replication, user, password, inflight, batch_rows, "
                "pool, retries, timeout_ms, schema, bucket, offline_start, adopt, ack, tls, ca, "
                "cert, key, tls_verify)",
                k);
            rc = BDB_ERR_INVALID;
        }
    }
    free(query);
    if (rc == BDB_OK && !o->tls && (o->ca[0] || o->cert[0] || o->key[0] || !o->tls_verify)) {
        snprintf(err, errlen, "storage URI: ca=, cert=, key= and tls_verify= need tls=true");
        rc = BDB_ERR_INVALID;
    }
    if (rc == BDB_OK && o->key[0] && !o->cert[0]) {
        snprintf(err, errlen, "storage URI: key= needs cert= (the client certificate)");
        rc = BDB_ERR_INVALID;
    }
    return rc;
}
