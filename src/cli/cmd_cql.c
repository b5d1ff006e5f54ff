/* cql: a small cqlsh-like client over bucketdb's own CQL native-protocol client.
 * Prints result rows as TSV with a header line, schema changes as one line, and on a
 * server error the error name, code and message, with exit status 1. It makes the
 * Cassandra client testable from scripts and is a handy operator tool. */
#include "cli/cli.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STMTS 256
#define MAX_BINDS 256

static void help(void)
{
    printf("usage: bucketdb cql [options] -e CQL [-e CQL ...]\n"
           "       bucketdb cql [options] -f FILE\n\n"
           "Runs CQL statements on a Cassandra node over the native protocol and prints\n"
           "rows as tab-separated values with a header line (null as \\N; tab, newline,\n"
           "carriage return and backslash escaped as \\t \\n \\r \\\\).\n\n"
           "  --host HOST          node address (default 127.0.0.1)\n"
           "  --port N             native transport port (default 9042)\n"
           "  --user U             user for PasswordAuthenticator\n"
           "  --password P         its password (default: $CQL_PASSWORD)\n"
           "  --consistency CL     ONE, QUORUM, LOCAL_QUORUM, ALL... (default ONE)\n"
           "  --protocol N         highest protocol version to try (3 or 4, default 4)\n"
           "  --page-size N        rows per page; every page is printed (default 5000)\n"
           "  --timeout MS         request timeout (default 12000)\n"
           "  --tls                TLS to the node (its client_encryption_options); the\n"
           "                       node's certificate is verified against --ca (default:\n"
           "                       the system's CAs) and must name --host\n"
           "  --ca FILE            PEM CA certificate(s) the node's certificate must chain to\n"
           "  --cert FILE          PEM client certificate, for a node that requires one\n"
           "  --key FILE           its PEM private key (default: in --cert)\n"
           "  --tls-insecure       TLS without verifying the node's certificate: encrypted,\n"
           "                       but anyone on the path can pose as the node\n"
           "  -e CQL               a statement (repeatable, run in order on one connection)\n"
           "  -f FILE              statements from a file, separated by ';'\n"
           "  --bind VALUE         prepare the statement and bind VALUE to the next marker\n"
           "                       (repeatable; \\N for null; collections as CQL literals)\n"
           "  --tsv FILE           prepare the statement and execute it for each line of\n"
           "                       FILE ('-' for stdin), one tab-separated value per marker\n"
           "  --batch N            with --tsv: send N rows per UNLOGGED batch\n"
           "  --no-header          do not print the header line\n"
           "  --nodes              list the cluster's nodes (system.local and system.peers):\n"
           "                       address, data center, rack, host id, release, tokens\n"
           "  -v, --verbose        print the connection (protocol version) on stderr\n\n"
           "Exit codes: 0 success, 1 server or connection error, 2 usage error.\n");
}

typedef struct opts {
    const char *host, *user, *password, *tsv;
    cql_tls_opts tls;
    int port, consistency, protocol, page_size, timeout_ms, batch, header, verbose, nodes;
    const char *stmts[MAX_STMTS];
    int nstmts;
    const char *binds[MAX_BINDS];
    int nbinds;
    char *file_text;
} opts;

/* ---------------------------------------------------------------- output */

static void tsv_escape(bdb_buf *out, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (p[i]) {
        case '\t':
            bdb_buf_puts(out, "\\t");
            break;
        case '\n':
            bdb_buf_puts(out, "\\n");
            break;
        case '\r':
            bdb_buf_puts(out, "\\r");
            break;
        case '\\':
            bdb_buf_puts(out, "\\\\");
            break;
        default:
            bdb_buf_putc(out, p[i]);
        }
    }
}

typedef struct printer {
    const opts *o;
    int header_done;
    long rows;
    int bad;
} printer;

static int print_page(void *ud, const cql_response *r)
{
    printer *pr = ud;
    if (r->h.opcode != CQL_OP_RESULT)
        return 1;
    for (uint16_t i = 0; i < r->nwarnings; i++)
        fprintf(stderr, "warning: %s\n", r->warnings[i]);
    const cql_result *res = &r->result;
    switch (res->kind) {
    case CQL_RESULT_ROWS:
        break;
    case CQL_RESULT_SCHEMA_CHANGE:
        printf("%s %s %s%s%s\n", res->change_type, res->target, res->keyspace ? res->keyspace : "",
               res->name ? "." : "", res->name ? res->name : "");
        return 0;
    case CQL_RESULT_SET_KEYSPACE:
        printf("USE %s\n", res->keyspace);
        return 0;
    default:
        return 0;
    }
    const cql_meta *m = &res->meta;
    bdb_buf line, cell;
    bdb_buf_init(&line);
    bdb_buf_init(&cell);
    if (!pr->header_done && pr->o->header && m->cols) {
        for (int32_t c = 0; c < m->ncols; c++) {
            if (c)
                bdb_buf_putc(&line, '\t');
            tsv_escape(&line, (const uint8_t *)m->cols[c].name, strlen(m->cols[c].name));
        }
        bdb_buf_putc(&line, '\n');
    }
    pr->header_done = 1;
    for (int32_t row = 0; row < res->nrows; row++) {
        for (int32_t c = 0; c < m->ncols; c++) {
            if (c)
                bdb_buf_putc(&line, '\t');
            cql_bytes v = res->cells[(size_t)row * (size_t)m->ncols + (size_t)c];
            if (v.len < 0) {
                bdb_buf_puts(&line, "\\N");
                continue;
            }
            bdb_buf_reset(&cell);
            if (!m->cols || cql_value_format(&cell, m->cols[c].type, v) != BDB_OK) {
                bdb_buf_reset(&cell); /* undecodable for its type: show the bytes */
                bdb_buf_puts(&cell, "0x");
                for (int32_t i = 0; i < v.len; i++)
                    bdb_buf_printf(&cell, "%02x", v.p[i]);
                pr->bad++;
            }
            tsv_escape(&line, cell.data, cell.len);
        }
        bdb_buf_putc(&line, '\n');
        pr->rows++;
    }
    fwrite(line.data, 1, line.len, stdout);
    bdb_buf_free(&line);
    bdb_buf_free(&cell);
    return ferror(stdout) ? 1 : 0;
}

static void print_error(const char *what, int rc, const cql_response *r)
{
    if (r && r->h.opcode == CQL_OP_ERROR) {
        const cql_error *e = &r->error;
        if (e->code >= 0)
            fprintf(stderr, "bucketdb cql: %s: %s (0x%04x): %s\n", what, cql_error_name(e->code),
                    (unsigned)e->code, e->message ? e->message : "");
        else
            fprintf(stderr, "bucketdb cql: %s: %s: %s\n", what, cql_error_name(e->code),
                    e->message ? e->message : "");
    } else {
        fprintf(stderr, "bucketdb cql: %s: %s\n", what, bdb_strerror(rc));
    }
}

/* ---------------------------------------------------------------- binding */

/* Unescapes a TSV field in place (\t \n \r \\); "\N" alone means null (returns 1). */
static int tsv_unescape(char *s, size_t *n)
{
    if (*n == 2 && s[0] == '\\' && s[1] == 'N')
        return 1;
    size_t o = 0;
    for (size_t i = 0; i < *n; i++) {
        if (s[i] == '\\' && i + 1 < *n) {
            char c = s[++i];
            s[o++] = c == 't' ? '\t' : c == 'n' ? '\n' : c == 'r' ? '\r' : c;
        } else {
            s[o++] = s[i];
        }
    }
    *n = o;
    return 0;
}

/* Encodes one row of text fields for the markers of p into vals (pointing into
 * store, which must not be reused until the values are sent). */
static int bind_row(const cql_prepared *p, char **fields, size_t *lens, int nfields, bdb_buf *store,
                    cql_bytes *vals, long lineno)
{
    const cql_meta *m = cql_prepared_binds(p);
    if (nfields != m->ncols) {
        fprintf(stderr, "bucketdb cql: %s%ld: %d values for %d bind markers\n",
                lineno ? "line " : "values", lineno, nfields, m->ncols);
        return BDB_ERR_INVALID;
    }
    size_t *offs = calloc((size_t)nfields + 1, sizeof *offs);
    if (!offs)
        return BDB_ERR_NOMEM;
    for (int i = 0; i < nfields; i++) {
        size_t n = lens[i];
        if (tsv_unescape(fields[i], &n)) {
            offs[i] = SIZE_MAX;
            continue;
        }
        char err[256];
        offs[i] = store->len;
        if (cql_value_parse(store, m->cols[i].type, fields[i], n, err, sizeof err) != BDB_OK) {
            fprintf(stderr, "bucketdb cql: %s%ld: marker %d (%s): %s\n", lineno ? "line " : "value",
                    lineno ? lineno : (long)i + 1, i + 1, m->cols[i].name, err);
            free(offs);
            return BDB_ERR_INVALID;
        }
        vals[i].len = (int32_t)(store->len - offs[i]);
    }
    /* The store may have moved while growing: resolve pointers at the end. */
    for (int i = 0; i < nfields; i++) {
        if (offs[i] == SIZE_MAX)
            vals[i] = (cql_bytes){NULL, CQL_NULL};
        else
            vals[i].p = store->data ? store->data + offs[i] : (const uint8_t *)"";
    }
    free(offs);
    return BDB_OK;
}

static int run_binds(cql_conn *c, const opts *o, const char *stmt, printer *pr)
{
    cql_prepared *p;
    cql_response *r = NULL;
    int rc = cql_prepare(c, stmt, &p, &r);
    if (rc != BDB_OK) {
        print_error("prepare", rc, r);
        cql_response_free(r);
        return BDB_EXIT_FAIL;
    }
    char *fields[MAX_BINDS];
    size_t lens[MAX_BINDS];
    for (int i = 0; i < o->nbinds; i++) {
        fields[i] = strdup(o->binds[i]);
        lens[i] = strlen(o->binds[i]);
    }
    bdb_buf store;
    bdb_buf_init(&store);
    cql_bytes vals[MAX_BINDS];
    int exit_code = BDB_EXIT_FAIL;
    if (bind_row(p, fields, lens, o->nbinds, &store, vals, 0) == BDB_OK) {
        cql_query_params qp = {.consistency = (uint16_t)o->consistency,
                               .values = vals,
                               .nvalues = (uint16_t)o->nbinds,
                               .page_size = o->page_size};
        rc = cql_query_paged(c, NULL, p, &qp, print_page, pr, &r);
        if (rc != BDB_OK)
            print_error("execute", rc, r);
        else
            exit_code = BDB_EXIT_OK;
        cql_response_free(r);
    }
    for (int i = 0; i < o->nbinds; i++)
        free(fields[i]);
    bdb_buf_free(&store);
    return exit_code;
}

/* Flushes the rows gathered for one request: an EXECUTE for one row, else a BATCH. */
static int flush_rows(cql_conn *c, const opts *o, cql_prepared *p, cql_bytes *vals, int nrows,
                      int nmarkers, long *requests)
{
    if (nrows == 0)
        return BDB_OK;
    cql_response *r = NULL;
    int rc;
    if (o->batch <= 1) {
        cql_query_params qp = {
            .consistency = (uint16_t)o->consistency, .values = vals, .nvalues = (uint16_t)nmarkers};
        rc = cql_execute(c, p, &qp, &r);
    } else {
        cql_batch_item items[1024]; /* --batch is at most 1024 */
        for (int i = 0; i < nrows; i++)
            items[i] = (cql_batch_item){.stmt = p,
                                        .values = vals + (size_t)i * (size_t)nmarkers,
                                        .nvalues = (uint16_t)nmarkers};
        rc = cql_batch(c, CQL_BATCH_UNLOGGED, items, (uint16_t)nrows, (uint16_t)o->consistency, &r);
    }
    (*requests)++;
    if (rc != BDB_OK)
        print_error(o->batch > 1 ? "batch" : "execute", rc, r);
    cql_response_free(r);
    return rc;
}

static int run_tsv(cql_conn *c, const opts *o, const char *stmt)
{
    cql_prepared *p;
    cql_response *r = NULL;
    int rc = cql_prepare(c, stmt, &p, &r);
    if (rc != BDB_OK) {
        print_error("prepare", rc, r);
        cql_response_free(r);
        return BDB_EXIT_FAIL;
    }
    FILE *f = strcmp(o->tsv, "-") ? fopen(o->tsv, "r") : stdin;
    if (!f) {
        fprintf(stderr, "bucketdb cql: cannot open %s: %s\n", o->tsv, strerror(errno));
        return BDB_EXIT_FAIL;
    }
    int nm = cql_prepared_binds(p)->ncols;
    int per = o->batch > 1 ? o->batch : 1;
    cql_bytes *vals = calloc((size_t)per * (size_t)(nm ? nm : 1), sizeof *vals);
    bdb_buf *stores = calloc((size_t)per, sizeof *stores);
    char **fields = calloc((size_t)nm + 1, sizeof *fields);
    size_t *lens = calloc((size_t)nm + 1, sizeof *lens);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0, rows = 0, requests = 0;
    int nrows = 0;
    rc = vals && stores && fields && lens ? BDB_OK : BDB_ERR_NOMEM;
    ssize_t len;
    while (rc == BDB_OK && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        int nf = 0;
        char *s = line;
        for (;;) {
            char *tab = strchr(s, '\t');
            if (nf <= nm) {
                fields[nf] = s;
                lens[nf] = tab ? (size_t)(tab - s) : strlen(s);
            }
            nf++;
            if (!tab)
                break;
            s = tab + 1;
        }
        if (nf > nm)
            nf = nm + 1; /* reported by bind_row */
        bdb_buf_reset(&stores[nrows]);
        rc = bind_row(p, fields, lens, nf, &stores[nrows], vals + (size_t)nrows * (size_t)nm,
                      lineno);
        if (rc != BDB_OK)
            break;
        nrows++;
        rows++;
        if (nrows == per) {
            rc = flush_rows(c, o, p, vals, nrows, nm, &requests);
            nrows = 0;
        }
    }
    if (rc == BDB_OK)
        rc = flush_rows(c, o, p, vals, nrows, nm, &requests);
    if (f != stdin)
        fclose(f);
    free(line);
    for (int i = 0; stores && i < per; i++)
        bdb_buf_free(&stores[i]);
    free(stores);
    free(vals);
    free(fields);
    free(lens);
    if (rc == BDB_OK && o->verbose)
        fprintf(stderr, "cql: %ld rows in %ld requests\n", rows, requests);
    return rc == BDB_OK ? BDB_EXIT_OK : BDB_EXIT_FAIL;
}

/* ---------------------------------------------------------------- statements */

/* Splits text at ';' outside quotes and comments; NUL-terminates in place. */
static int split_statements(char *text, opts *o)
{
    char *start = text, *p = text;
    char quote = 0;
    for (;; p++) {
        if (quote) {
            if (*p == '\0')
                break;
            if (*p == quote)
                quote = 0;
            continue;
        }
        if (*p == '\'' || *p == '"') {
            quote = *p;
            continue;
        }
        if ((p[0] == '-' && p[1] == '-') || (p[0] == '/' && p[1] == '/')) {
            while (*p && *p != '\n')
                *p++ = ' ';
            if (!*p)
                p--;
            continue;
        }
        if (*p == ';' || *p == '\0') {
            int end = *p == '\0';
            *p = '\0';
            char *s = start;
            while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r')
                s++;
            if (*s) {
                if (o->nstmts >= MAX_STMTS) {
                    fprintf(stderr, "bucketdb cql: more than %d statements\n", MAX_STMTS);
                    return BDB_ERR_LIMIT;
                }
                o->stmts[o->nstmts++] = s;
            }
            if (end)
                break;
            start = p + 1;
        }
    }
    return BDB_OK;
}

static int read_file(const char *path, opts *o)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bucketdb cql: cannot open %s: %s\n", path, strerror(errno));
        return BDB_ERR_IO;
    }
    bdb_buf b;
    bdb_buf_init(&b);
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        bdb_buf_append(&b, tmp, n);
    fclose(f);
    bdb_buf_putc(&b, 0);
    o->file_text = (char *)b.data;
    return split_statements(o->file_text, o);
}

static int parse_int_arg(const char *name, const char *v, int lo, int hi, int *out)
{
    char *e;
    long x = strtol(v, &e, 10);
    if (!*v || *e || x < lo || x > hi) {
        fprintf(stderr, "bucketdb cql: %s must be an integer in [%d, %d]\n", name, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int cmd_cql(int argc, char **argv)
{
    opts o = {.host = "127.0.0.1",
              .port = 9042,
              .consistency = CQL_ONE,
              .protocol = CQL_VERSION_MAX,
              .page_size = 5000,
              .timeout_ms = 12000,
              .header = 1,
              .password = getenv("CQL_PASSWORD")};
    int rc = BDB_EXIT_USAGE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            free(o.file_text);
            return BDB_EXIT_OK;
        } else if (!strcmp(a, "--no-header")) {
            o.header = 0;
        } else if (!strcmp(a, "--nodes")) {
            o.nodes = 1;
        } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
            o.verbose = 1;
        } else if (!strcmp(a, "--tls")) {
            o.tls.enabled = 1;
        } else if (!strcmp(a, "--tls-insecure")) {
            o.tls.enabled = 1;
            o.tls.insecure = 1;
        } else if (!v) {
            fprintf(stderr, "bucketdb cql: unknown option or missing value: %s\n", a);
            goto out;
        } else {
            i++;
            if (!strcmp(a, "--host")) {
                o.host = v;
            } else if (!strcmp(a, "--port")) {
                if (parse_int_arg("--port", v, 1, 65535, &o.port))
                    goto out;
            } else if (!strcmp(a, "--user")) {
                o.user = v;
            } else if (!strcmp(a, "--password")) {
                o.password = v;
            } else if (!strcmp(a, "--consistency")) {
                o.consistency = cql_consistency_parse(v);
                if (o.consistency < 0) {
                    fprintf(stderr, "bucketdb cql: unknown consistency level %s\n", v);
                    goto out;
                }
            } else if (!strcmp(a, "--protocol")) {
                if (parse_int_arg("--protocol", v, CQL_VERSION_MIN, CQL_VERSION_MAX, &o.protocol))
                    goto out;
            } else if (!strcmp(a, "--page-size")) {
                if (parse_int_arg("--page-size", v, 1, 1000000, &o.page_size))
                    goto out;
            } else if (!strcmp(a, "--timeout")) {
                if (parse_int_arg("--timeout", v, 1, 3600000, &o.timeout_ms))
                    goto out;
            } else if (!strcmp(a, "--batch")) {
                if (parse_int_arg("--batch", v, 1, 1024, &o.batch))
                    goto out;
            } else if (!strcmp(a, "-e")) {
                if (o.nstmts >= MAX_STMTS) {
                    fprintf(stderr, "bucketdb cql: more than %d statements\n", MAX_STMTS);
                    goto out;
                }
                o.stmts[o.nstmts++] = v;
            } else if (!strcmp(a, "-f")) {
                if (o.file_text) {
                    fprintf(stderr, "bucketdb cql: one -f at most\n");
                    goto out;
                }
                if (read_file(v, &o) != BDB_OK)
                    goto out;
            } else if (!strcmp(a, "--bind")) {
                if (o.nbinds >= MAX_BINDS) {
                    fprintf(stderr, "bucketdb cql: more than %d --bind values\n", MAX_BINDS);
                    goto out;
                }
                o.binds[o.nbinds++] = v;
            } else if (!strcmp(a, "--tsv")) {
                o.tsv = v;
            } else if (!strcmp(a, "--ca")) {
                o.tls.ca_file = v;
            } else if (!strcmp(a, "--cert")) {
                o.tls.cert_file = v;
            } else if (!strcmp(a, "--key")) {
                o.tls.key_file = v;
            } else {
                fprintf(stderr, "bucketdb cql: unknown option %s\n", a);
                goto out;
            }
        }
    }
    if (o.nstmts == 0 && !o.nodes) {
        fprintf(stderr, "bucketdb cql: no statement: give -e CQL or -f FILE (--help)\n");
        goto out;
    }
    if ((o.nbinds || o.tsv) && o.nstmts != 1) {
        fprintf(stderr, "bucketdb cql: --bind and --tsv take exactly one statement\n");
        goto out;
    }
    if (o.nbinds && o.tsv) {
        fprintf(stderr, "bucketdb cql: --bind and --tsv exclude each other\n");
        goto out;
    }
    if (o.batch && !o.tsv) {
        fprintf(stderr, "bucketdb cql: --batch needs --tsv\n");
        goto out;
    }
    if (!o.tls.enabled && (o.tls.ca_file || o.tls.cert_file || o.tls.key_file)) {
        fprintf(stderr, "bucketdb cql: --ca, --cert and --key need --tls\n");
        goto out;
    }
    if (o.tls.key_file && !o.tls.cert_file) {
        fprintf(stderr, "bucketdb cql: --key needs --cert\n");
        goto out;
    }
    char err[512] = "";
    cql_tls *tls = NULL;
    if (o.tls.enabled) {
        /* OpenSSL writes with write(2): a node that hangs up must not kill us. */
        signal(SIGPIPE, SIG_IGN);
        if (cql_tls_new(&o.tls, &tls, err, sizeof err) != BDB_OK) {
            fprintf(stderr, "bucketdb cql: %s\n", err);
            rc = BDB_EXIT_FAIL;
            goto out;
        }
    }

    cql_conn_opts co = {.host = o.host,
                        .port = o.port,
                        .user = o.user,
                        .password = o.password,
                        .request_timeout_ms = o.timeout_ms,
                        .max_version = o.protocol,
                        .tls = tls};
    cql_conn *c;
    if (cql_conn_open(&co, &c, err, sizeof err) != BDB_OK) {
        fprintf(stderr, "bucketdb cql: %s\n", err);
        cql_tls_free(tls);
        rc = BDB_EXIT_FAIL;
        goto out;
    }
    if (o.verbose)
        fprintf(stderr, "cql: connected to %s:%d%s, protocol v%d, CQL %s%s%s\n", o.host, o.port,
                !tls             ? ""
                : o.tls.insecure ? " over TLS (not verified)"
                                 : " over TLS",
                cql_conn_version(c), cql_conn_cql_version(c),
                *cql_conn_authenticator(c) ? ", authenticated with " : "",
                cql_conn_authenticator(c));
    rc = BDB_EXIT_OK;
    printer pr = {.o = &o};
    if (o.nodes) {
        cql_topology *t = NULL;
        err[0] = '\0';
        if (cql_topology_discover(c, o.host, &t, err, sizeof err) != BDB_OK) {
            fprintf(stderr, "bucketdb cql: %s\n", err);
            rc = BDB_EXIT_FAIL;
        } else {
            if (o.header)
                printf("address\tdata_center\track\thost_id\trelease\ttokens\tlocal\n");
            for (size_t i = 0; i < t->nnodes; i++) {
                const cql_node *n = &t->nodes[i];
                printf("%s\t%s\t%s\t%s\t%s\t%zu\t%s\n", n->addr, n->dc, n->rack, n->host_id,
                       n->release, n->ntokens, n->is_local ? "true" : "false");
            }
            if (o.verbose)
                fprintf(stderr, "cql: cluster %s, partitioner %s, %zu tokens on the ring\n",
                        t->cluster, t->partitioner, t->nring);
            cql_topology_free(t);
        }
    } else if (o.nbinds) {
        rc = run_binds(c, &o, o.stmts[0], &pr);
    } else if (o.tsv) {
        rc = run_tsv(c, &o, o.stmts[0]);
    } else {
        for (int i = 0; i < o.nstmts && rc == BDB_EXIT_OK; i++) {
            cql_query_params qp = {.consistency = (uint16_t)o.consistency,
                                   .page_size = o.page_size};
            cql_response *r = NULL;
            pr.header_done = 0;
            int s = cql_query_paged(c, o.stmts[i], NULL, &qp, print_page, &pr, &r);
            if (s != BDB_OK) {
                print_error(o.nstmts > 1 ? "statement failed" : "query failed", s, r);
                if (o.nstmts > 1)
                    fprintf(stderr, "  statement %d: %.200s\n", i + 1, o.stmts[i]);
                rc = BDB_EXIT_FAIL;
            }
            cql_response_free(r);
        }
    }
    if (o.verbose && pr.rows)
        fprintf(stderr, "cql: %ld rows\n", pr.rows);
    if (pr.bad)
        fprintf(stderr, "bucketdb cql: %d values did not decode as their type (shown as hex)\n",
                pr.bad);
    fflush(stdout);
    cql_conn_close(c);
    cql_tls_free(tls);
out:
    free(o.file_text);
    return rc;
}
