/* cluster: `bucketdb cluster status`, what an operator checks before touching a
 * Cassandra-backed deployment: the cluster's nodes, the keyspace's identity and the
 * writer lease with what its server published (cass_owner.h), read with plain CQL
 * through one connection, so it works with no bucketdb server running. */
#include "cli/cli.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/cassandra/cass_uri.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROBE_TIMEOUT_MS 3000 /* a node's probe, at most the request timeout */

static void help(FILE *f)
{
    fprintf(f, "usage: bucketdb cluster status --storage URI [--json] [--timeout MS]\n\n"
               "Shows the Cassandra cluster a server's storage URI names (the same URI as\n"
               "`serve --storage`, with its user, password, tls, ca, cert, key, dc and\n"
               "read consistency): its nodes (address, data center, rack, release; up when\n"
               "this command could connect to it, unknown when not), the keyspace's\n"
               "identity and flush generation, and the writer lease: the server that writes to the "
               "keyspace now\n"
               "(node id, host, pid, last renewal, seconds left of its TTL, backlog of\n"
               "acknowledged bytes not yet in Cassandra, last confirmed flush, listen\n"
               "address, version), or \"no writer\".\n\n"
               "  --storage URI   cassandra://[user:password@]host[:port][,host...]/keyspace?...\n"
               "  --json          one JSON object instead of the table (docs/CASSANDRA.md)\n"
               "  --timeout MS    per request and connection, 100..600000 (default: the URI's\n"
               "                  timeout_ms; a node's probe waits at most 3000)\n\n"
               "Exit codes: 0 shown, 1 no contact point answered or a query failed, 2 usage\n"
               "or a bad URI.\n");
}

typedef struct st_node {
    const cql_node *n;
    int up;
} st_node;

typedef struct st_writer {
    int present, has_report;
    char node[64], host[256], listen[300], version[64];
    int32_t pid;
    int64_t since_ms, ttl_s, backlog, last_flush;
    int has_ttl, has_backlog, has_flush;
} st_writer;

typedef struct st_ks {
    int exists;
    char absent_why[256];
    char id[64];
    int64_t since_ms;
    /* the flush generation row (cass_owner.h): the keyspace's newest confirmed flush */
    int has_gen;
    int64_t gen, gen_since_ms;
    char gen_node[64];
} st_ks;

/* ---------------------------------------------------------------- reading */

static int col(const cql_response *r, const char *name)
{
    const cql_meta *m = &r->result.meta;
    for (int32_t i = 0; m->cols && i < m->ncols; i++)
        if (m->cols[i].name && !strcmp(m->cols[i].name, name))
            return i;
    return -1;
}

/* Row 0's cell of column name, NULL when absent or null. */
static const cql_bytes *cell(const cql_response *r, const char *name)
{
    int i = r->result.nrows > 0 ? col(r, name) : -1;
    return i >= 0 && r->result.cells[i].len >= 0 ? &r->result.cells[i] : NULL;
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

static int cell_i64(const cql_response *r, const char *name, int64_t *out)
{
    const cql_bytes *c = cell(r, name);
    if (!c)
        return 0;
    if (c->len == 4) {
        int32_t v;
        if (cql_dec_int(*c, &v) != BDB_OK)
            return 0;
        *out = v;
        return 1;
    }
    return cql_dec_bigint(*c, out) == BDB_OK;
}

static void query_error(char *err, size_t errlen, const char *q, int rc, const cql_response *r)
{
    snprintf(err, errlen, "%.160s: %s", q,
             r && r->h.opcode == CQL_OP_ERROR && r->error.message ? r->error.message
                                                                  : bdb_strerror(rc));
}

static int query(cql_conn *c, const char *q, int cl, cql_response **r)
{
    cql_query_params qp = {.consistency = (uint16_t)cl};
    *r = NULL;
    return cql_query(c, q, &qp, r);
}

/* A server error Invalid: the keyspace, table or column does not exist. */
static int invalid(int rc, const cql_response *r)
{
    return rc != BDB_OK && r && r->h.opcode == CQL_OP_ERROR && r->error.code == CQL_ERR_INVALID;
}

/* The row k = 'generation': absent before a server's first counted flush, and its
 * column absent from an owner table older than generations (neither is an error). */
static int read_generation(cql_conn *c, const cass_uri *u, st_ks *ks, char *err, size_t errlen)
{
    char q[192];
    snprintf(q, sizeof q, "SELECT generation, node, since FROM %s.owner WHERE k = 'generation'",
             u->ks);
    cql_response *r;
    int rc = query(c, q, u->read_cl, &r);
    if (invalid(rc, r)) {
        cql_response_free(r);
        return BDB_OK;
    }
    if (rc != BDB_OK) {
        query_error(err, errlen, q, rc, r);
        cql_response_free(r);
        return rc;
    }
    ks->has_gen = cell_i64(r, "generation", &ks->gen);
    if (ks->has_gen) {
        cell_str(r, "node", ks->gen_node, sizeof ks->gen_node);
        cell_i64(r, "since", &ks->gen_since_ms);
    }
    cql_response_free(r);
    return BDB_OK;
}

static int read_keyspace(cql_conn *c, const cass_uri *u, st_ks *ks, char *err, size_t errlen)
{
    char q[192];
    snprintf(q, sizeof q, "SELECT id, since FROM %s.owner WHERE k = 'keyspace'", u->ks);
    cql_response *r;
    int rc = query(c, q, u->read_cl, &r);
    if (invalid(rc, r)) { /* no keyspace yet (no server started on it), or no owner table */
        snprintf(ks->absent_why, sizeof ks->absent_why, "%s",
                 r->error.message ? r->error.message : "");
        cql_response_free(r);
        return BDB_OK;
    }
    if (rc != BDB_OK) {
        query_error(err, errlen, q, rc, r);
        cql_response_free(r);
        return rc;
    }
    ks->exists = 1;
    cell_str(r, "id", ks->id, sizeof ks->id);
    cell_i64(r, "since", &ks->since_ms);
    cql_response_free(r);
    return read_generation(c, u, ks, err, errlen);
}

static int read_writer(cql_conn *c, const cass_uri *u, st_writer *w, char *err, size_t errlen)
{
    char q[320];
    snprintf(q, sizeof q,
             "SELECT node, host, pid, since, backlog_bytes, last_flush, listen, version, "
             "TTL(node) FROM %s.owner WHERE k = 'writer'",
             u->ks);
    cql_response *r;
    int rc = query(c, q, u->read_cl, &r);
    w->has_report = rc == BDB_OK;
    if (invalid(rc, r)) { /* an owner table older than the report's columns */
        cql_response_free(r);
        snprintf(q, sizeof q,
                 "SELECT node, host, pid, since, TTL(node) FROM %s.owner WHERE k = 'writer'",
                 u->ks);
        rc = query(c, q, u->read_cl, &r);
    }
    if (rc != BDB_OK) {
        query_error(err, errlen, q, rc, r);
        cql_response_free(r);
        return rc;
    }
    cell_str(r, "node", w->node, sizeof w->node);
    w->present = r->result.nrows > 0 && w->node[0];
    if (w->present) {
        int64_t pid = 0;
        cell_str(r, "host", w->host, sizeof w->host);
        cell_i64(r, "pid", &pid);
        w->pid = (int32_t)pid;
        cell_i64(r, "since", &w->since_ms);
        /* TTL(node)'s column is named after the call; the last one in both forms */
        int ti = r->result.meta.ncols - 1;
        const cql_bytes *t = &r->result.cells[ti];
        int32_t ttl = 0;
        w->has_ttl = t->len >= 0 && cql_dec_int(*t, &ttl) == BDB_OK;
        w->ttl_s = ttl;
        if (w->has_report) {
            w->has_backlog = cell_i64(r, "backlog_bytes", &w->backlog);
            w->has_flush = cell_i64(r, "last_flush", &w->last_flush);
            cell_str(r, "listen", w->listen, sizeof w->listen);
            cell_str(r, "version", w->version, sizeof w->version);
        }
    }
    cql_response_free(r);
    return BDB_OK;
}

/* ---------------------------------------------------------------- output */

static void iso_ms(char out[32], int64_t ms)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    size_t n = strftime(out, 32, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, 32 - n, ".%03dZ", (int)(ms % 1000));
}

static void json_str(bdb_buf *b, const char *s)
{
    bdb_buf_putc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            bdb_buf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            bdb_buf_printf(b, "\\u%04x", *p);
        else
            bdb_buf_putc(b, *p);
    }
    bdb_buf_putc(b, '"');
}

static void json_opt_str(bdb_buf *b, const char *s)
{
    if (s[0])
        json_str(b, s);
    else
        bdb_buf_puts(b, "null");
}

static void json_opt_i64(bdb_buf *b, int has, int64_t v)
{
    if (has)
        bdb_buf_printf(b, "%" PRId64, v);
    else
        bdb_buf_puts(b, "null");
}

static void print_json(const cass_uri *u, const cql_topology *t, const st_node *nodes, size_t nn,
                       const st_ks *ks, const st_writer *w)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_puts(&b, "{\"cluster\":");
    json_str(&b, t->cluster);
    bdb_buf_puts(&b, ",\"nodes\":[");
    for (size_t i = 0; i < nn; i++) {
        const cql_node *n = nodes[i].n;
        bdb_buf_puts(&b, i ? ",{\"address\":" : "{\"address\":");
        json_str(&b, n->addr);
        bdb_buf_puts(&b, ",\"data_center\":");
        json_str(&b, n->dc);
        bdb_buf_puts(&b, ",\"rack\":");
        json_str(&b, n->rack);
        bdb_buf_puts(&b, ",\"release\":");
        json_str(&b, n->release);
        bdb_buf_printf(&b, ",\"state\":\"%s\"}", nodes[i].up ? "up" : "unknown");
    }
    bdb_buf_puts(&b, "],\"keyspace\":{\"name\":");
    json_str(&b, u->ks);
    bdb_buf_printf(&b, ",\"exists\":%s,\"id\":", ks->exists ? "true" : "false");
    json_opt_str(&b, ks->id);
    bdb_buf_puts(&b, ",\"since_ms\":");
    json_opt_i64(&b, ks->id[0] != 0, ks->since_ms);
    bdb_buf_puts(&b, ",\"generation\":");
    if (ks->has_gen) {
        bdb_buf_printf(&b, "{\"n\":%" PRId64 ",\"node\":", ks->gen);
        json_opt_str(&b, ks->gen_node);
        bdb_buf_printf(&b, ",\"since_ms\":%" PRId64 "}", ks->gen_since_ms);
    } else {
        bdb_buf_puts(&b, "null");
    }
    bdb_buf_puts(&b, "},\"writer\":");
    if (!w->present) {
        bdb_buf_puts(&b, "null");
    } else {
        bdb_buf_puts(&b, "{\"node\":");
        json_str(&b, w->node);
        bdb_buf_puts(&b, ",\"host\":");
        json_str(&b, w->host);
        bdb_buf_printf(&b, ",\"pid\":%d,\"since_ms\":%" PRId64 ",\"ttl_s\":", (int)w->pid,
                       w->since_ms);
        json_opt_i64(&b, w->has_ttl, w->ttl_s);
        bdb_buf_puts(&b, ",\"backlog_bytes\":");
        json_opt_i64(&b, w->has_backlog, w->backlog);
        bdb_buf_puts(&b, ",\"last_flush_ms\":");
        json_opt_i64(&b, w->has_flush, w->last_flush);
        bdb_buf_puts(&b, ",\"listen\":");
        json_opt_str(&b, w->listen);
        bdb_buf_puts(&b, ",\"version\":");
        json_opt_str(&b, w->version);
        bdb_buf_putc(&b, '}');
    }
    bdb_buf_puts(&b, "}\n");
    fwrite(b.data, 1, b.len, stdout);
    bdb_buf_free(&b);
}

static int width(int w, const char *s)
{
    int n = (int)strlen(s);
    return n > w ? n : w;
}

static void print_table(const cass_uri *u, const cql_topology *t, const st_node *nodes, size_t nn,
                        const st_ks *ks, const st_writer *w)
{
    int wa = 7, wd = 11, wr = 4, wv = 7;
    for (size_t i = 0; i < nn; i++) {
        wa = width(wa, nodes[i].n->addr);
        wd = width(wd, nodes[i].n->dc);
        wr = width(wr, nodes[i].n->rack);
        wv = width(wv, nodes[i].n->release);
    }
    printf("Cluster %s: %zu node(s)\n", t->cluster, nn);
    printf("  %-*s  %-*s  %-*s  %-*s  %s\n", wa, "ADDRESS", wd, "DATA CENTER", wr, "RACK", wv,
           "RELEASE", "STATE");
    for (size_t i = 0; i < nn; i++)
        printf("  %-*s  %-*s  %-*s  %-*s  %s\n", wa, nodes[i].n->addr, wd, nodes[i].n->dc, wr,
               nodes[i].n->rack, wv, nodes[i].n->release, nodes[i].up ? "up" : "unknown");
    char ts[32];
    printf("\nKeyspace %s\n", u->ks);
    if (!ks->exists) {
        printf("  not found (%s): no server has started on it\n", ks->absent_why);
    } else if (!ks->id[0]) {
        printf("  identity    none (no server of this version has claimed it)\n");
    } else {
        iso_ms(ts, ks->since_ms);
        printf("  identity    %s (made %s)\n", ks->id, ts);
    }
    if (ks->has_gen) {
        iso_ms(ts, ks->gen_since_ms);
        printf("  generation  %" PRId64 " (flush of node %s at %s)\n", ks->gen,
               ks->gen_node[0] ? ks->gen_node : "unknown", ts);
    } else if (ks->exists) {
        printf("  generation  none (no counted flush yet)\n");
    }
    printf("\nWriter lease\n");
    if (!w->present) {
        printf("  no writer\n");
        return;
    }
    printf("  node        %s\n  host        %s\n  pid         %d\n", w->node, w->host, (int)w->pid);
    iso_ms(ts, w->since_ms);
    printf("  renewed     %s\n", ts);
    if (w->has_ttl)
        printf("  expires in  %" PRId64 " s (unless renewed)\n", w->ttl_s);
    if (!w->has_report) {
        printf("  (the owner table has no backlog, last flush, listen or version columns: "
               "start a server of this version with schema=create to add them)\n");
        return;
    }
    if (w->has_backlog)
        printf("  backlog     %" PRId64 " bytes\n", w->backlog);
    else
        printf("  backlog     unknown (not reported yet)\n");
    if (w->has_flush) {
        iso_ms(ts, w->last_flush);
        printf("  last flush  %s\n", ts);
    } else {
        printf("  last flush  none since the server started\n");
    }
    printf("  listen      %s\n  version     %s\n", w->listen[0] ? w->listen : "unknown",
           w->version[0] ? w->version : "unknown");
}

/* ---------------------------------------------------------------- connecting */

typedef struct target {
    cql_tls *tls;
    const cass_uri *u;
    int timeout_ms;
} target;

static int open_conn(const target *tg, const char *host, int port, int connect_ms, cql_conn **c,
                     char *err, size_t errlen)
{
    cql_conn_opts co = {.host = host,
                        .port = port,
                        .tls = tg->tls,
                        .user = tg->u->user[0] ? tg->u->user : NULL,
                        .password = tg->u->user[0] ? tg->u->password : NULL,
                        .connect_timeout_ms = connect_ms,
                        .request_timeout_ms = tg->timeout_ms};
    return cql_conn_open(&co, c, err, errlen);
}

/* The first contact point of the URI that answers: its connection, address and port. */
static int connect_first(const target *tg, cql_conn **c, char host[64], int *port, char *err,
                         size_t errlen)
{
    char list[sizeof tg->u->hosts];
    snprintf(list, sizeof list, "%s", tg->u->hosts);
    int rc = BDB_ERR_IO;
    char *save = NULL;
    for (char *h = strtok_r(list, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
        snprintf(host, 64, "%s", h);
        *port = 9042;
        char *colon = strrchr(host, ':');
        if (colon) {
            *colon = 0;
            *port = atoi(colon + 1);
        }
        rc = open_conn(tg, host, *port, tg->timeout_ms, c, err, errlen);
        if (rc == BDB_OK || rc == BDB_ERR_INVALID) /* credentials: the same on every node */
            return rc;
    }
    return rc;
}

static int parse_ms(const char *v, int *out)
{
    char *e;
    long x = strtol(v, &e, 10);
    if (!*v || *e || x < 100 || x > 600000) {
        fprintf(stderr, "bucketdb cluster: --timeout must be an integer in [100, 600000] "
                        "(milliseconds)\n");
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int status(int argc, char **argv)
{
    const char *uri = NULL;
    int json = 0, timeout_ms = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help(stdout);
            return BDB_EXIT_OK;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--storage") || !strcmp(a, "--timeout")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "bucketdb cluster: %s needs a value\n", a);
                return BDB_EXIT_USAGE;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--storage"))
                uri = v;
            else if (parse_ms(v, &timeout_ms))
                return BDB_EXIT_USAGE;
        } else {
            fprintf(stderr, "bucketdb cluster status: unknown option %s (--help)\n", a);
            return BDB_EXIT_USAGE;
        }
    }
    if (!uri) {
        fprintf(stderr, "bucketdb cluster status: --storage cassandra://... is required\n");
        return BDB_EXIT_USAGE;
    }
    if (strncmp(uri, "cassandra://", 12) != 0) {
        fprintf(stderr, "bucketdb cluster status: --storage must be a cassandra:// URI (the "
                        "embedded engine has no cluster)\n");
        return BDB_EXIT_USAGE;
    }
    static cass_uri u; /* large: off the stack */
    char err[600] = "";
    if (cass_uri_parse(uri, &u, err, sizeof err) != BDB_OK) {
        fprintf(stderr, "bucketdb cluster status: --storage: %s\n", err);
        return BDB_EXIT_USAGE;
    }
    target tg = {.u = &u, .timeout_ms = timeout_ms ? timeout_ms : u.timeout_ms};
    if (u.tls) {
        signal(SIGPIPE, SIG_IGN); /* OpenSSL writes with write(2) */
        cql_tls_opts to = {.enabled = 1,
                           .ca_file = u.ca[0] ? u.ca : NULL,
                           .cert_file = u.cert[0] ? u.cert : NULL,
                           .key_file = u.key[0] ? u.key : NULL,
                           .insecure = !u.tls_verify};
        if (cql_tls_new(&to, &tg.tls, err, sizeof err) != BDB_OK) {
            fprintf(stderr, "bucketdb cluster status: %s\n", err);
            return BDB_EXIT_USAGE;
        }
    }
    cql_conn *c = NULL;
    char host[64];
    int port;
    int rc = connect_first(&tg, &c, host, &port, err, sizeof err);
    if (rc != BDB_OK) {
        fprintf(stderr, "bucketdb cluster status: no contact point of %s answered: %s\n", u.hosts,
                err);
        cql_tls_free(tg.tls);
        return BDB_EXIT_FAIL;
    }
    int exit_code = BDB_EXIT_FAIL;
    cql_topology *t = NULL;
    st_node *nodes = NULL;
    st_ks ks = {0};
    st_writer w = {0};
    if ((rc = cql_topology_discover(c, host, &t, err, sizeof err)) != BDB_OK) {
        fprintf(stderr, "bucketdb cluster status: reading system.local and system.peers: %s\n",
                err);
        goto out;
    }
    if ((rc = read_keyspace(c, &u, &ks, err, sizeof err)) != BDB_OK ||
        (ks.exists && (rc = read_writer(c, &u, &w, err, sizeof err)) != BDB_OK)) {
        fprintf(stderr, "bucketdb cluster status: %s\n", err);
        goto out;
    }
    nodes = calloc(t->nnodes + 1, sizeof *nodes);
    if (!nodes)
        goto out;
    size_t nn = 0;
    int probe_ms = tg.timeout_ms < PROBE_TIMEOUT_MS ? tg.timeout_ms : PROBE_TIMEOUT_MS;
    /* Bounded: one connect of at most probe_ms per node of the cluster. */
    for (size_t i = 0; i < t->nnodes; i++) {
        const cql_node *n = &t->nodes[i];
        if (n->removed)
            continue;
        nodes[nn].n = n;
        if (n->is_local || !strcmp(n->addr, host)) {
            nodes[nn].up = 1;
        } else {
            cql_conn *pc = NULL;
            char perr[256];
            nodes[nn].up =
                open_conn(&tg, n->addr, port, probe_ms, &pc, perr, sizeof perr) == BDB_OK;
            cql_conn_close(pc);
        }
        nn++;
    }
    if (json)
        print_json(&u, t, nodes, nn, &ks, &w);
    else
        print_table(&u, t, nodes, nn, &ks, &w);
    fflush(stdout);
    exit_code = ferror(stdout) ? BDB_EXIT_FAIL : BDB_EXIT_OK;
out:
    free(nodes);
    cql_topology_free(t);
    cql_conn_close(c);
    cql_tls_free(tg.tls);
    return exit_code;
}

int cmd_cluster(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "status"))
        return status(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        help(stdout);
        return BDB_EXIT_OK;
    }
    fprintf(stderr,
            argc >= 2 ? "bucketdb cluster: unknown subcommand '%s'\n"
                      : "bucketdb cluster: a subcommand is required%s\n",
            argc >= 2 ? argv[1] : "");
    help(stderr);
    return BDB_EXIT_USAGE;
}
