/* cass_owner: the keyspace's identity and the writer lease (cass_owner.h). */
#include "storage/cassandra/cass_owner.h"
#include "storage/cassandra/cass_state.h" /* cass_column_exists */
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/cassandra/cql/wire/cql_value.h"
#include "storage/vfs/vfs.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define ID_HEX 32 /* 128 random bits */

struct cass_owner {
    char ks[64];
    char node[ID_HEX + 1]; /* this data directory's node id */
    char host[256];
    int32_t pid;
    int write_cl;
    int report; /* the owner table has the report's columns */
    atomic_int valid;
    char q_take[384], q_renew[384], q_release[192];
    /* the flush generation (cass_owner_flushed); only the flushes touch these */
    int gen_col;    /* the owner table has column generation */
    int64_t gen;    /* what the file 'cluster' holds */
    int64_t ks_gen; /* what the keyspace holds, as far as this server wrote or read it */
    int64_t gen_ts; /* the last generation write's timestamp (microseconds) */
    char *dir;
    char id[ID_HEX + 1];
    char q_gen[256];
};

/* The report's columns (cass_owner_report), in the order the statements bind them. */
static const char *const rep_cols[][2] = {
    {"backlog_bytes", "bigint"}, {"last_flush", "bigint"}, {"listen", "text"}, {"version", "text"}};
#define NREP 4
/* The flush generation's column (cass_owner_flushed): added by upgrade as well. */
#define GEN_COL "generation"

/* ---------------------------------------------------------------- statements */

static cql_bytes txt(const char *s)
{
    return (cql_bytes){(const uint8_t *)s, (int32_t)strlen(s)};
}

/* Whether cl keeps a request inside the local data center. */
static int dc_local(int cl)
{
    return cl == CQL_LOCAL_QUORUM || cl == CQL_LOCAL_ONE || cl == CQL_LOCAL_SERIAL;
}

/* The serial level of the owner row's transactions and linearizable reads: where the
 * writes stay in the local data center (LOCAL_*), so does the lease's Paxos round
 * (LOCAL_SERIAL), else a server could neither start nor keep its lease while another
 * region is down, which "write local" exists to survive. The lease is then
 * linearizable within the data center whose servers write the keyspace; a server of
 * another DC sees a live lease once it is replicated there (docs/CASSANDRA.md#regions). */
static int serial_of(int write_cl)
{
    return dc_local(write_cl) ? CQL_LOCAL_SERIAL : CQL_SERIAL;
}

/* One statement sent as a QUERY (a lightweight transaction's answer has columns a
 * prepared statement's metadata does not name); a conditional one runs its Paxos
 * round at serial_of(cl). */
static int run(cql_session *sess, const char *q, const cql_bytes *v, uint16_t n, int cl,
               cql_response **r, char *err, size_t errlen)
{
    cql_call c = {.query = q,
                  .values = v,
                  .nvalues = n,
                  .consistency = cl,
                  .serial_consistency = dc_local(cl) ? CQL_LOCAL_SERIAL : 0,
                  .unprepared = 1};
    int rc = cql_session_execute(sess, &c, r);
    if (rc != BDB_OK && err)
        snprintf(err, errlen, "cassandra: %.120s: %s", q,
                 *r && (*r)->h.opcode == CQL_OP_ERROR && (*r)->error.message ? (*r)->error.message
                                                                             : bdb_strerror(rc));
    return rc;
}

static void be64(char out[8], int64_t v)
{
    for (int i = 0; i < 8; i++)
        out[i] = (char)((uint64_t)v >> (56 - 8 * i));
}

/* Column name's cell of row 0, or NULL (absent, null or no row). */
static const cql_bytes *cell(const cql_response *r, const char *name)
{
    const cql_result *res = &r->result;
    if (res->kind != CQL_RESULT_ROWS || res->nrows < 1 || !res->meta.cols)
        return NULL;
    for (int32_t i = 0; i < res->meta.ncols; i++)
        if (res->meta.cols[i].name && !strcmp(res->meta.cols[i].name, name))
            return res->cells[i].len >= 0 ? &res->cells[i] : NULL;
    return NULL;
}

static void cell_str(const cql_response *r, const char *name, char *out, size_t cap)
{
    const cql_bytes *c = cell(r, name);
    size_t n = c ? (size_t)c->len : 0;
    if (n >= cap)
        n = cap - 1;
    if (n)
        memcpy(out, c->p, n);
    out[n] = 0;
}

static int applied(const cql_response *r)
{
    const cql_bytes *c = cell(r, "[applied]");
    int v = 0;
    return c && cql_dec_boolean(*c, &v) == BDB_OK && v;
}

/* ---------------------------------------------------------------- the local file */

static int random_hex(char out[ID_HEX + 1])
{
    uint8_t b[ID_HEX / 2];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        return BDB_ERR_IO;
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
    return BDB_OK;
}

static int hex_ok(const char *s)
{
    if (strlen(s) != ID_HEX)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

/* "generation N" at p (after the node line): 1 with *gen set, 0 none there, -1 bad. */
static int gen_line(const char *p, int64_t *gen)
{
    while (*p == '\n')
        p++;
    if (!*p)
        return 0;
    if (strncmp(p, "generation ", 11) != 0)
        return -1;
    p += 11;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (*p < '0' || *p > '9' || errno == ERANGE || *end != '\n' || end[1])
        return -1;
    *gen = (int64_t)v;
    return 1;
}

int cass_owner_file_parse(const char *text, char ks[64], char id[ID_HEX + 1], char node[ID_HEX + 1],
                          int64_t *gen)
{
    *gen = -1;
    int ver = 0, pos = 0;
    if (sscanf(text, "bucketdb-cluster %d\nkeyspace %63s\nid %32s\nnode %32s%n", &ver, ks, id, node,
               &pos) != 4 ||
        pos <= 0 || (ver != 1 && ver != 2) || !hex_ok(id) || !hex_ok(node))
        return -1;
    /* Version 2 has the generation line; version 1 was written without one, and may
     * have one after a downgrade (docs/formats: an older bucketdb reads the first
     * four lines only). */
    const char *rest = text + pos;
    if (*rest != '\n')
        return -1;
    int g = gen_line(rest, gen);
    if (g < 0 || (ver == 2 && g == 0))
        return -1;
    return 1;
}

/* Reads <dir>/cluster: 1 found (ks, id, node, gen filled), 0 absent, -1 damaged. */
static int file_read(const char *dir, char ks[64], char id[ID_HEX + 1], char node[ID_HEX + 1],
                     int64_t *gen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, CASS_OWNER_FILE);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -1;
    char buf[512];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return cass_owner_file_parse(buf, ks, id, node, gen);
}

static int file_write(const char *dir, const char *ks, const char *id, const char *node,
                      int64_t gen)
{
    bdb_vfs *vfs = bdb_vfs_posix();
    int rc = bdb_vfs_mkdir(vfs, dir);
    if (rc != BDB_OK)
        return rc;
    char buf[512];
    int n = snprintf(buf, sizeof buf,
                     "bucketdb-cluster 2\nkeyspace %s\nid %s\nnode %s\ngeneration %" PRId64 "\n",
                     ks, id, node, gen);
    return bdb_vfs_write_atomic(vfs, dir, CASS_OWNER_FILE, buf, (size_t)n);
}

/* 1 when dir holds an engine catalog (a data directory that has flushed before). */
static int has_catalog(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/catalog", dir);
    return access(path, F_OK) == 0;
}

/* ---------------------------------------------------------------- identity */

static int keyspace_has_data(cql_session *sess, const char *ks, int cl, int *yes, char *err,
                             size_t errlen)
{
    char q[160];
    snprintf(q, sizeof q, "SELECT tenant_id FROM %s.devices LIMIT 1", ks);
    cql_response *r = NULL;
    int rc = run(sess, q, NULL, 0, cl, &r, err, errlen);
    *yes = rc == BDB_OK && r->result.kind == CQL_RESULT_ROWS && r->result.nrows > 0;
    cql_response_free(r);
    return rc;
}

/* A refusal, or with adopt a warning and BDB_OK (the caller takes the keyspace over). */
static int refuse(int adopt, char *err, size_t errlen)
{
    if (!adopt)
        return BDB_ERR_EXISTS;
    BDB_WARN("cassandra: adopt=true: %s. Taking the keyspace over: raw and tier reads miss "
             "what the catalog that wrote it knew, and the next flushes overwrite tier, fleet "
             "and device rows of the devices that report",
             err);
    err[0] = 0;
    (void)errlen;
    return BDB_OK;
}

/* The keyspace's id into id (made now when it has none and may get one). */
static int identity(cql_session *sess, const char *ks, const char *dir, int cl, int have_local,
                    const char *local_id, int adopt, char id[ID_HEX + 1], char *err, size_t errlen)
{
    char q[256];
    snprintf(q, sizeof q, "SELECT id FROM %s.owner WHERE k = 'keyspace'", ks);
    cql_response *r = NULL;
    int rc = run(sess, q, NULL, 0, serial_of(cl), &r, err, errlen);
    if (rc != BDB_OK) {
        cql_response_free(r);
        return rc;
    }
    cell_str(r, "id", id, ID_HEX + 1);
    cql_response_free(r);
    if (id[0]) {
        if (!have_local && !has_catalog(dir)) {
            /* a new (or lost and replaced) data directory: the engine rebuilds its
             * catalog from the registry and merges the windows it inherits
             * (storage/embedded/sink/db_cat_sink.h), so it may take the keyspace */
            BDB_INFO("cassandra: data directory %s is new: it joins keyspace %s (id %s); the "
                     "catalog is rebuilt from the keyspace's registry",
                     dir, ks, id);
            return BDB_OK;
        }
        if (!have_local) {
            snprintf(err, errlen,
                     "keyspace %s holds the data of another data directory (keyspace id %s), "
                     "and %s has a catalog but no identity file: it is another server's "
                     "directory (an embedded one, or one of an older bucketdb), whose catalog "
                     "and tier files would overwrite tier, fleet and device rows. Start with the "
                     "data directory that wrote the keyspace (its file '%s' names id %s), or "
                     "an empty one; see docs/CASSANDRA.md#one-keyspace-one-writer",
                     ks, id, dir, CASS_OWNER_FILE, id);
            return refuse(adopt, err, errlen);
        }
        if (strcmp(id, local_id) != 0) {
            snprintf(err, errlen,
                     "data directory %s was made for a keyspace with id %s, but keyspace %s "
                     "has id %s (another data directory's, or the keyspace was made again): "
                     "refusing to write; see docs/CASSANDRA.md#one-keyspace-one-writer",
                     dir, local_id, ks, id);
            return refuse(adopt, err, errlen);
        }
        return BDB_OK;
    }
    if (have_local) {
        snprintf(err, errlen,
                 "data directory %s was made for keyspace %s with id %s, which the keyspace "
                 "no longer has (dropped or truncated?): its catalog would point at data that "
                 "is gone; move the directory away to start afresh",
                 dir, ks, local_id);
        if (refuse(adopt, err, errlen) != BDB_OK)
            return BDB_ERR_EXISTS;
    }
    /* A keyspace with data and no id was written by a version before the identity: its
     * own data directory (one with a catalog) takes it over, and so does an empty one,
     * which rebuilds its catalog from the registry as on a keyspace with an id. */
    int data = 0;
    rc = keyspace_has_data(sess, ks, cl, &data, err, errlen);
    if (rc != BDB_OK)
        return rc;
    if (data && !has_catalog(dir))
        BDB_INFO("cassandra: keyspace %s holds data of an older bucketdb and data directory %s "
                 "is new: the catalog is rebuilt from the keyspace's registry",
                 ks, dir);
    char mine[ID_HEX + 1];
    if (random_hex(mine) != BDB_OK) {
        snprintf(err, errlen, "no random bytes for a keyspace id");
        return BDB_ERR_IO;
    }
    char ts[8];
    int64_t now = bdb_now_ms();
    for (int i = 0; i < 8; i++)
        ts[i] = (char)((uint64_t)now >> (56 - 8 * i));
    cql_bytes v[2] = {txt(mine), {(const uint8_t *)ts, 8}};
    snprintf(q, sizeof q,
             "INSERT INTO %s.owner (k, id, since) VALUES ('keyspace', ?, ?) IF NOT EXISTS", ks);
    r = NULL;
    rc = run(sess, q, v, 2, cl, &r, err, errlen);
    if (rc == BDB_OK && applied(r)) {
        memcpy(id, mine, sizeof mine);
    } else if (rc == BDB_OK) {
        cell_str(r, "id", id, ID_HEX + 1); /* another server made it first */
        if (!id[0]) {
            snprintf(err, errlen, "keyspace %s: the owner row 'keyspace' has no id", ks);
            rc = BDB_ERR_CORRUPT;
        } else {
            snprintf(err, errlen,
                     "keyspace %s was claimed by another data directory (id %s) while this "
                     "one (%s) started: refusing to write",
                     ks, id, dir);
            rc = BDB_ERR_EXISTS;
        }
    }
    cql_response_free(r);
    return rc;
}

/* ---------------------------------------------------------------- the flush generation */

int cass_owner_gen_check(int64_t dir, int64_t ks)
{
    if (dir < ks)
        return CASS_GEN_OLDER;
    /* the file is written before the keyspace: a crash between them leaves it one ahead */
    return dir - ks <= 1 ? CASS_GEN_OK : CASS_GEN_AHEAD;
}

static void ms_text(int64_t ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    if (ms <= 0 || !gmtime_r(&t, &tm) || !strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm))
        snprintf(out, cap, "an unknown time");
}

/* The keyspace's generation row: gen (0 none), the node that wrote it and when. */
static int gen_read(cql_session *sess, const char *ks, int cl, int64_t *gen, char node[ID_HEX + 1],
                    int64_t *since, char *err, size_t errlen)
{
    char q[160];
    snprintf(q, sizeof q, "SELECT " GEN_COL ", node, since FROM %s.owner WHERE k = 'generation'",
             ks);
    cql_response *r = NULL;
    /* serial as the identity's read: the newest value whatever the write consistency */
    int rc = run(sess, q, NULL, 0, serial_of(cl), &r, err, errlen);
    *gen = *since = 0;
    node[0] = 0;
    if (rc == BDB_OK) {
        const cql_bytes *g = cell(r, GEN_COL), *t = cell(r, "since");
        if (g && cql_dec_bigint(*g, gen) != BDB_OK)
            *gen = 0;
        if (t && cql_dec_bigint(*t, since) != BDB_OK)
            *since = 0;
        cell_str(r, "node", node, ID_HEX + 1);
        if (*gen < 0) {
            snprintf(err, errlen, "keyspace %s: the owner row 'generation' holds %" PRId64, ks,
                     *gen);
            rc = BDB_ERR_CORRUPT;
        }
    }
    cql_response_free(r);
    return rc;
}

/* Compares the directory's generation (*dgen, 0 none) with the keyspace's: a refusal
 * of an older copy, or with adopt a warning and *dgen set to the keyspace's. */
static int gen_compare(cass_owner *o, cql_session *sess, const char *dir, int has_gen,
                       const char *node, int adopt, int64_t *dgen, char *err, size_t errlen)
{
    int64_t kgen, since;
    char who[ID_HEX + 1];
    int rc = gen_read(sess, o->ks, o->write_cl, &kgen, who, &since, err, errlen);
    if (rc != BDB_OK)
        return rc;
    o->ks_gen = kgen;
    if (*dgen < 0)
        *dgen = 0;
    int v = cass_owner_gen_check(*dgen, kgen);
    if (v == CASS_GEN_AHEAD)
        BDB_WARN("cassandra: data directory %s is at flush generation %" PRId64 " and keyspace "
                 "%s at %" PRId64 ": the keyspace lost writes this directory made (restored "
                 "from an older snapshot, or its owner row deleted?): raw and tier reads of "
                 "what was flushed since may find nothing; starting",
                 dir, *dgen, o->ks, kgen);
    if (v != CASS_GEN_OLDER)
        return BDB_OK;
    char when[32], mine[48];
    ms_text(since, when, sizeof when);
    if (has_gen)
        snprintf(mine, sizeof mine, "%" PRId64, *dgen);
    else
        snprintf(mine, sizeof mine, "none (a file of an older bucketdb)");
    snprintf(err, errlen,
             "data directory %s is an older copy: flush generation %s, keyspace %s is at %" PRId64
             " (last flush by node %s%s at %s): its catalog misses what was flushed since "
             "(404s for those devices and ranges; tier, fleet and device rows overwritten "
             "with partial windows). Start on the newest copy of the directory, or add "
             "adopt=true to the URI to take the keyspace over with what this copy knows; see "
             "docs/CASSANDRA.md#older-copies-of-the-data-directory",
             dir, mine, o->ks, kgen, who[0] ? who : "unknown",
             !strcmp(who, node) ? " (this directory's)" : "", when);
    rc = refuse(adopt, err, errlen);
    if (rc == BDB_OK) {
        BDB_WARN("cassandra: adopt=true: data directory %s takes flush generation %" PRId64 " over",
                 dir, kgen);
        *dgen = kgen;
    }
    return rc;
}

int cass_owner_flushed(cass_owner *o, cql_session *sess, char *err, size_t errlen)
{
    if (!o->gen_col)
        return BDB_OK;
    int64_t next = o->ks_gen + 1;
    /* The file first: a directory's file is then never behind the keyspace it wrote, and
     * a copy made before this flush is behind it from now on. */
    if (o->gen < next) {
        int rc = file_write(o->dir, o->ks, o->id, o->node, next);
        if (rc != BDB_OK) {
            snprintf(err, errlen, "cannot write %s/%s (flush generation %" PRId64 "): %s", o->dir,
                     CASS_OWNER_FILE, next, bdb_strerror(rc));
            return rc;
        }
        o->gen = next;
    }
    /* A timestamp of our own, rising: two coordinators' clocks must not order the
     * generations (an older one winning would let an older copy through). */
    int64_t ts = bdb_now_ms() * 1000;
    if (ts <= o->gen_ts)
        ts = o->gen_ts + 1;
    char g[8], t[8], since[8];
    be64(g, next);
    be64(t, ts);
    be64(since, bdb_now_ms());
    cql_bytes v[4] = {{(const uint8_t *)g, 8},
                      txt(o->node),
                      {(const uint8_t *)since, 8},
                      {(const uint8_t *)t, 8}};
    cql_response *r = NULL;
    int rc = run(sess, o->q_gen, v, 4, o->write_cl, &r, err, errlen);
    cql_response_free(r);
    if (rc != BDB_OK)
        return rc;
    o->gen_ts = ts;
    o->ks_gen = next;
    return BDB_OK;
}

/* ---------------------------------------------------------------- the lease */

/* Values of the lease's statements: node, host, pid, since, then (o->report) the
 * report's columns; an unknown figure is a null (every column is written each time,
 * for the TTL's sake: cass_owner_claim). */
struct lv {
    char pid[4], since[8], backlog[8], flush[8];
    cql_bytes v[4 + NREP];
    uint16_t n;
};

static void lease_values(const cass_owner *o, const cass_owner_report *rep, struct lv *x)
{
    for (int i = 0; i < 4; i++)
        x->pid[i] = (char)((uint32_t)o->pid >> (24 - 8 * i));
    be64(x->since, bdb_now_ms());
    x->v[0] = txt(o->node);
    x->v[1] = txt(o->host);
    x->v[2] = (cql_bytes){(const uint8_t *)x->pid, 4};
    x->v[3] = (cql_bytes){(const uint8_t *)x->since, 8};
    x->n = 4;
    if (!o->report)
        return;
    const cql_bytes null = {NULL, CQL_NULL};
    cass_owner_report none = {.backlog_bytes = -1};
    if (!rep)
        rep = &none;
    be64(x->backlog, rep->backlog_bytes);
    be64(x->flush, rep->last_flush_ms);
    x->v[4] = rep->backlog_bytes >= 0 ? (cql_bytes){(const uint8_t *)x->backlog, 8} : null;
    x->v[5] = rep->last_flush_ms > 0 ? (cql_bytes){(const uint8_t *)x->flush, 8} : null;
    x->v[6] = rep->listen && rep->listen[0] ? txt(rep->listen) : null;
    x->v[7] = txt(BDB_VERSION);
    x->n = 4 + NREP;
}

/* The renewal's values: host, pid, since, node, the report, then its condition's node. */
static uint16_t renew_values(const struct lv *x, const char *cond_node, cql_bytes v[5 + NREP])
{
    v[0] = x->v[1];
    v[1] = x->v[2];
    v[2] = x->v[3];
    v[3] = x->v[0];
    for (uint16_t i = 4; i < x->n; i++)
        v[i] = x->v[i];
    v[x->n] = txt(cond_node);
    return (uint16_t)(x->n + 1);
}

/* The process holding a lease of this node is gone: on this host and no such pid. */
static int holder_gone(const cass_owner *o, const char *host, int32_t pid)
{
    return !strcmp(host, o->host) && pid > 0 && pid != o->pid && kill(pid, 0) != 0 &&
           errno == ESRCH;
}

static int take(cass_owner *o, cql_session *sess, const cass_owner_report *rep, char *err,
                size_t errlen)
{
    struct lv x;
    lease_values(o, rep, &x);
    cql_response *r = NULL;
    int rc = run(sess, o->q_take, x.v, x.n, o->write_cl, &r, err, errlen);
    if (rc != BDB_OK || applied(r)) {
        cql_response_free(r);
        return rc;
    }
    char node[ID_HEX + 1], host[256];
    cell_str(r, "node", node, sizeof node);
    cell_str(r, "host", host, sizeof host);
    const cql_bytes *pc = cell(r, "pid");
    int32_t pid = 0;
    if (pc)
        cql_dec_int(*pc, &pid);
    cql_response_free(r);
    /* Ours already: an earlier attempt of this process applied but its answer was lost
     * (a timeout of the transaction's commit). Or this directory's server before a
     * crash, gone now: its lease is ours. */
    int self = !strcmp(host, o->host) && pid == o->pid;
    if (!strcmp(node, o->node) && (self || holder_gone(o, host, pid))) {
        lease_values(o, rep, &x);
        cql_bytes v[5 + NREP];
        uint16_t nv = renew_values(&x, node, v);
        r = NULL;
        rc = run(sess, o->q_renew, v, nv, o->write_cl, &r, err, errlen);
        int ok = rc == BDB_OK && applied(r);
        cql_response_free(r);
        if (rc != BDB_OK || ok)
            return rc;
    }
    snprintf(err, errlen,
             "another server writes to keyspace %s (node %s%s, host %s, pid %d): two servers "
             "on one keyspace overwrite each other's tier, fleet and device rows. Its lease "
             "lasts %d s after its last renewal; see docs/CASSANDRA.md#one-keyspace-one-writer",
             o->ks, node, !strcmp(node, o->node) ? ", this data directory's: a copy running" : "",
             host, pid, CASS_OWNER_TTL_S);
    return BDB_ERR_EXISTS;
}

int cass_owner_claim(cql_session *sess, const char *ks, const char *data_dir, int write_cl,
                     int adopt, cass_owner **out, char *err, size_t errlen)
{
    *out = NULL;
    char fks[64] = "", lid[ID_HEX + 1] = "", node[ID_HEX + 1] = "", id[ID_HEX + 1] = "";
    int64_t dgen = 0;
    int have = file_read(data_dir, fks, lid, node, &dgen);
    if (have < 0) {
        snprintf(err, errlen, "%s/%s is damaged or unreadable: refusing to write", data_dir,
                 CASS_OWNER_FILE);
        return BDB_ERR_CORRUPT;
    }
    if (have && strcmp(fks, ks) != 0) {
        snprintf(err, errlen,
                 "data directory %s was made for keyspace %s, not %s: refusing to write; see "
                 "docs/CASSANDRA.md#one-keyspace-one-writer",
                 data_dir, fks, ks);
        return BDB_ERR_EXISTS;
    }
    int rc = identity(sess, ks, data_dir, write_cl, have, lid, adopt, id, err, errlen);
    if (rc != BDB_OK)
        return rc;
    if (!have && random_hex(node) != BDB_OK) {
        snprintf(err, errlen, "no random bytes for a node id");
        return BDB_ERR_IO;
    }
    cass_owner *o = calloc(1, sizeof *o);
    if (!o || !(o->dir = strdup(data_dir))) {
        free(o);
        return BDB_ERR_NOMEM;
    }
    snprintf(o->ks, sizeof o->ks, "%s", ks);
    o->write_cl = write_cl;
    memcpy(o->node, node, sizeof node);
    memcpy(o->id, id, sizeof id);
    /* the flush generation: an older copy of the directory is refused (cass_owner.h) */
    int64_t fgen = dgen < 0 ? 0 : dgen; /* a file without one gets it at the first flush */
    o->gen_col = cass_column_exists(sess, ks, "owner", GEN_COL) != 0;
    if (!o->gen_col)
        BDB_WARN("cassandra: table %s.owner has no column " GEN_COL " (a keyspace from an older "
                 "bucketdb, schema=none): an older copy of the data directory is not detected",
                 ks);
    else if (have) {
        rc = gen_compare(o, sess, data_dir, dgen >= 0, node, adopt, &dgen, err, errlen);
    } else { /* a first start (0), or an empty directory adopting the keyspace */
        char who[ID_HEX + 1];
        int64_t since;
        rc = gen_read(sess, ks, write_cl, &o->ks_gen, who, &since, err, errlen);
        dgen = o->ks_gen;
    }
    if (dgen < 0) /* a file from before generations: counting starts here */
        dgen = 0;
    if (rc != BDB_OK) {
        free(o->dir);
        free(o);
        return rc;
    }
    /* after a crash between the file's write and the keyspace's, the next flush writes
     * the file's generation to the keyspace (cass_owner_flushed) */
    o->gen = dgen;
    if (o->ks_gen < dgen - 1)
        o->ks_gen = dgen - 1;
    /* a first start, or an adopted keyspace or generation: the directory takes them */
    if ((!have || strcmp(lid, id) != 0 || dgen != fgen) &&
        (rc = file_write(data_dir, ks, id, node, dgen)) != BDB_OK) {
        snprintf(err, errlen, "cannot write %s/%s: %s", data_dir, CASS_OWNER_FILE,
                 bdb_strerror(rc));
        free(o->dir);
        free(o);
        return rc;
    }
    if (gethostname(o->host, sizeof o->host - 1) != 0)
        snprintf(o->host, sizeof o->host, "unknown");
    o->pid = (int32_t)getpid();
    o->write_cl = write_cl;
    atomic_store(&o->valid, 1);
    /* schema=none on a keyspace older than the report: the lease works without it */
    o->report = cass_column_exists(sess, ks, "owner", rep_cols[NREP - 1][0]) != 0;
    if (!o->report)
        BDB_WARN("cassandra: table %s.owner has no column %s (a keyspace from an older "
                 "bucketdb, schema=none): `bucketdb cluster status` shows the writer lease "
                 "without its backlog, last flush, listen address and version",
                 ks, rep_cols[NREP - 1][0]);
    const char *rc_set =
        o->report ? ", backlog_bytes = ?, last_flush = ?, listen = ?, version = ?" : "";
    snprintf(o->q_take, sizeof o->q_take,
             "INSERT INTO %s.owner (k, node, host, pid, since%s) VALUES ('writer', ?, ?, ?, "
             "?%s) IF NOT EXISTS USING TTL %d",
             ks, o->report ? ", backlog_bytes, last_flush, listen, version" : "",
             o->report ? ", ?, ?, ?, ?" : "", CASS_OWNER_TTL_S);
    /* Every column again: a column not written keeps the TTL of the write that set
     * it, so a node written once would expire under a lease renewed ever after. */
    snprintf(o->q_renew, sizeof o->q_renew,
             "UPDATE %s.owner USING TTL %d SET host = ?, pid = ?, since = ?, node = ?%s WHERE k "
             "= 'writer' IF node = ?",
             ks, CASS_OWNER_TTL_S, rc_set);
    snprintf(o->q_release, sizeof o->q_release,
             "DELETE FROM %s.owner WHERE k = 'writer' IF node = ?", ks);
    snprintf(o->q_gen, sizeof o->q_gen,
             "INSERT INTO %s.owner (k, " GEN_COL ", node, since) VALUES ('generation', ?, ?, ?) "
             "USING TIMESTAMP ?",
             ks);
    rc = take(o, sess, NULL, err, errlen);
    if (rc != BDB_OK) {
        free(o->dir);
        free(o);
        return rc;
    }
    BDB_INFO("cassandra: keyspace %s (id %s) claimed by this data directory (node %s)", ks, id,
             node);
    *out = o;
    return BDB_OK;
}

int cass_owner_renew(cass_owner *o, cql_session *sess, const cass_owner_report *rep)
{
    if (!atomic_load(&o->valid))
        return BDB_ERR_EXISTS;
    struct lv x;
    lease_values(o, rep, &x);
    cql_bytes v[5 + NREP];
    uint16_t nv = renew_values(&x, o->node, v);
    cql_response *r = NULL;
    char err[256];
    int rc = run(sess, o->q_renew, v, nv, o->write_cl, &r, err, sizeof err);
    if (rc != BDB_OK) {
        cql_response_free(r);
        BDB_WARN("cassandra: renewing the writer lease failed: %s", err);
        return rc;
    }
    if (applied(r)) {
        cql_response_free(r);
        return BDB_OK;
    }
    char node[ID_HEX + 1];
    cell_str(r, "node", node, sizeof node);
    cql_response_free(r);
    if (!node[0]) { /* expired during an outage and nobody took it: take it again */
        char terr[512];
        int trc = take(o, sess, rep, terr, sizeof terr);
        if (trc == BDB_OK)
            return BDB_OK;
        if (trc != BDB_ERR_EXISTS) {
            /* the cluster is not answering yet (nodes restarting, a transaction's
             * timeout): nobody else holds the lease, so try again at the next renewal */
            BDB_WARN("cassandra: taking the expired writer lease again failed: %s", terr);
            return trc;
        }
        BDB_ERROR("cassandra: %s", terr);
    }
    atomic_store(&o->valid, 0);
    BDB_ERROR("cassandra: the writer lease of keyspace %s is lost%s%s: flushes fail from now "
              "on (the WAL keeps every sample); stop this server",
              o->ks, node[0] ? " to node " : "", node);
    return BDB_ERR_EXISTS;
}

int cass_owner_valid(const cass_owner *o)
{
    return atomic_load(&((cass_owner *)o)->valid);
}

void cass_owner_free(cass_owner *o, cql_session *sess)
{
    if (!o)
        return;
    if (sess && atomic_load(&o->valid)) {
        cql_bytes v[1] = {txt(o->node)};
        cql_response *r = NULL;
        char err[256];
        if (run(sess, o->q_release, v, 1, o->write_cl, &r, err, sizeof err) != BDB_OK)
            BDB_WARN("cassandra: giving the writer lease up failed (%s); it expires in %d s", err,
                     CASS_OWNER_TTL_S);
        cql_response_free(r);
    }
    free(o->dir);
    free(o);
}

void cass_owner_upgrade(cql_session *sess, const char *ks)
{
    for (int i = 0; i <= NREP; i++) {
        const char *col = i < NREP ? rep_cols[i][0] : GEN_COL;
        const char *type = i < NREP ? rep_cols[i][1] : "bigint";
        if (cass_column_exists(sess, ks, "owner", col) == 1)
            continue;
        char q[192];
        snprintf(q, sizeof q, "ALTER TABLE %s.owner ADD %s %s", ks, col, type);
        cql_call c = {.query = q, .consistency = CQL_ONE, .idempotent = 1, .unprepared = 1};
        cql_response *r = NULL;
        /* refused when the column is there after all: nothing to do */
        if (cql_session_execute(sess, &c, &r) == BDB_OK) {
            BDB_INFO("cassandra: added owner.%s %s (a keyspace from an older bucketdb)", col, type);
            cql_session_wait_schema(sess, 30000);
        }
        cql_response_free(r);
    }
}
