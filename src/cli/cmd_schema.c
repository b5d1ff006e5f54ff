/* schema: prints the CQL DDL of bucketdb's Cassandra keyspace (tables of the
 * seeds, adapted to the server version, which --probe reads from a node). */
#include "cli/cli.h"

#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "storage/cassandra/cql/wire/cql_conn.h"
#include "storage/cassandra/cql/cluster/cql_topology.h"
#include "storage/cassandra/schema.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf("usage: bucketdb schema [options]\n\n"
           "Prints the CQL DDL (CREATE ... IF NOT EXISTS) of bucketdb's keyspace on Cassandra;\n"
           "apply it with `bucketdb cql -f FILE`. Warnings go to stderr.\n\n"
           "  --keyspace NAME          keyspace (default bucketdb)\n"
           "  --replication R          simple:RF (SimpleStrategy) or DC:RF[,DC:RF...]\n"
           "                           (NetworkTopologyStrategy); default simple:3, or\n"
           "                           with --probe min(3, nodes) in each data center found\n"
           "  --ttl DUR                default TTL of raw samples (default 30d; 0 = none)\n"
           "  --bucket DUR             telemetry bucket size, also the compaction window\n"
           "                           (default 1h)\n"
           "  --no-sub-bucket          no sub_bucket column in the telemetry partition key\n"
           "  --server-version V       target release: 2.1.0, 3.11, 4.1... (default 4.1)\n"
           "  --probe HOST[:PORT]      read release_version from that node instead\n"
           "  --user U, --password P   credentials for --probe (default: $CQL_PASSWORD)\n"
           "  --repair-interval DUR    how often repair runs (default 7d)\n"
           "  --gc-grace DUR           gc_grace_seconds, must exceed the repair interval\n"
           "                           (default 10d)\n"
           "  --state-model M          current state: partitioned (default), hash, index, mv\n"
           "  --hash-buckets N         buckets of the hash model (default 16)\n\n"
           "Durations: N[s|m|h|d|w|y]. Exit codes: 0 success, 1 probe failed, 2 usage or\n"
           "a refused configuration (e.g. gc_grace not above the repair interval).\n");
}

static int probe(const char *hostport, const char *user, const char *password, int ver[3],
                 sch_opts *repl)
{
    char host[256];
    int port = 9042;
    snprintf(host, sizeof host, "%s", hostport);
    char *colon = strrchr(host, ':');
    if (colon && !strchr(colon + 1, ']')) {
        char *end;
        long p = strtol(colon + 1, &end, 10);
        if (*end || p <= 0 || p > 65535) {
            fprintf(stderr, "bucketdb schema: --probe %s: bad port\n", hostport);
            return BDB_EXIT_USAGE;
        }
        port = (int)p;
        *colon = 0;
    }
    cql_conn_opts co = {.host = host, .port = port, .user = user, .password = password};
    cql_conn *c = NULL;
    char err[256] = "";
    int rc = cql_conn_open(&co, &c, err, sizeof err);
    if (rc != BDB_OK) {
        fprintf(stderr, "bucketdb schema: --probe %s: %s\n", hostport,
                err[0] ? err : bdb_strerror(rc));
        return BDB_EXIT_FAIL;
    }
    cql_query_params qp = {.consistency = CQL_ONE};
    cql_response *r = NULL;
    rc = cql_query(c, "SELECT release_version FROM system.local", &qp, &r);
    int out = BDB_EXIT_FAIL;
    if (rc == BDB_OK && r && r->h.opcode == CQL_OP_RESULT && r->result.kind == CQL_RESULT_ROWS &&
        r->result.nrows >= 1 && r->result.meta.ncols >= 1 && r->result.cells[0].len > 0 &&
        r->result.cells[0].len < 64) {
        char v[64];
        memcpy(v, r->result.cells[0].p, (size_t)r->result.cells[0].len);
        v[r->result.cells[0].len] = 0;
        if (sch_parse_version(v, ver) == BDB_OK) {
            fprintf(stderr, "bucketdb schema: %s runs Cassandra %s (protocol v%d)\n", hostport, v,
                    cql_conn_version(c));
            out = BDB_EXIT_OK;
        } else {
            fprintf(stderr, "bucketdb schema: --probe %s: unreadable release_version '%s'\n",
                    hostport, v);
        }
    } else if (r && r->h.opcode == CQL_OP_ERROR) {
        fprintf(stderr, "bucketdb schema: --probe %s: %s\n", hostport,
                r->error.message ? r->error.message : "error");
    } else {
        fprintf(stderr, "bucketdb schema: --probe %s: no release_version (%s)\n", hostport,
                bdb_strerror(rc));
    }
    cql_response_free(r);
    if (out == BDB_EXIT_OK && repl) {
        /* no --replication: NetworkTopologyStrategy over the data centers found */
        cql_topology *t = NULL;
        const char **dcs = NULL;
        rc = cql_topology_discover(c, host, &t, err, sizeof err);
        if (rc == BDB_OK && t->nnodes > 0 && (dcs = calloc(t->nnodes, sizeof *dcs))) {
            for (size_t i = 0; i < t->nnodes; i++)
                dcs[i] = t->nodes[i].dc;
            rc = sch_replication_from_nodes(repl, dcs, t->nnodes);
        } else if (rc == BDB_OK) {
            rc = BDB_ERR_INVALID;
        }
        if (rc == BDB_OK) {
            fprintf(stderr, "bucketdb schema: %zu node(s); replication", t->nnodes);
            for (int i = 0; i < repl->ndcs; i++)
                fprintf(stderr, " %s:%d", repl->dcs[i].name, repl->dcs[i].rf);
            fprintf(stderr, " (NetworkTopologyStrategy, min(3, nodes) per data center)\n");
        } else {
            fprintf(stderr,
                    "bucketdb schema: --probe %s: cannot read the data centers (%s): give "
                    "--replication\n",
                    hostport, err[0] ? err : bdb_strerror(rc));
            out = BDB_EXIT_FAIL;
        }
        free(dcs);
        cql_topology_free(t);
    }
    cql_conn_close(c);
    return out;
}

static int duration_arg(const char *name, const char *v, int64_t *out)
{
    if (sch_parse_duration(v, out) != BDB_OK) {
        fprintf(stderr, "bucketdb schema: %s '%s': expected N[s|m|h|d|w|y]\n", name, v);
        return 0;
    }
    return 1;
}

int cmd_schema(int argc, char **argv)
{
    sch_opts o;
    sch_opts_default(&o);
    const char *probe_addr = NULL, *version = NULL, *user = NULL;
    int repl_given = 0;
    const char *password = getenv("CQL_PASSWORD");
    char err[512];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        }
        if (!strcmp(a, "--no-sub-bucket")) {
            o.sub_bucket = 0;
            continue;
        }
        static const char *const with_value[] = {
            "--keyspace",        "--replication", "--ttl",         "--bucket",
            "--server-version",  "--probe",       "--user",        "--password",
            "--repair-interval", "--gc-grace",    "--state-model", "--hash-buckets"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            fprintf(stderr, "bucketdb schema: unknown option %s (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bucketdb schema: %s needs a value\n", a);
            return BDB_EXIT_USAGE;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--keyspace")) {
            if (strlen(v) >= sizeof o.keyspace) {
                fprintf(stderr, "bucketdb schema: keyspace '%s': at most 48 characters\n", v);
                return BDB_EXIT_USAGE;
            }
            strcpy(o.keyspace, v);
        } else if (!strcmp(a, "--replication")) {
            repl_given = 1;
            if (sch_parse_replication(v, &o, err, sizeof err) != BDB_OK) {
                fprintf(stderr, "bucketdb schema: %s\n", err);
                return BDB_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--ttl")) {
            if (!duration_arg(a, v, &o.ttl_s))
                return BDB_EXIT_USAGE;
        } else if (!strcmp(a, "--bucket")) {
            if (!duration_arg(a, v, &o.bucket_s))
                return BDB_EXIT_USAGE;
        } else if (!strcmp(a, "--repair-interval")) {
            if (!duration_arg(a, v, &o.repair_s))
                return BDB_EXIT_USAGE;
        } else if (!strcmp(a, "--gc-grace")) {
            if (!duration_arg(a, v, &o.gc_grace_s))
                return BDB_EXIT_USAGE;
        } else if (!strcmp(a, "--server-version")) {
            version = v;
        } else if (!strcmp(a, "--probe")) {
            probe_addr = v;
        } else if (!strcmp(a, "--user")) {
            user = v;
        } else if (!strcmp(a, "--password")) {
            password = v;
        } else if (!strcmp(a, "--state-model")) {
            if (sch_parse_state_model(v, &o.state_model) != BDB_OK) {
                fprintf(stderr,
                        "bucketdb schema: --state-model '%s': partitioned, hash, index or mv\n", v);
                return BDB_EXIT_USAGE;
            }
        } else if (!strcmp(a, "--hash-buckets")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 4096) {
                fprintf(stderr, "bucketdb schema: --hash-buckets '%s': 1..4096\n", v);
                return BDB_EXIT_USAGE;
            }
            o.hash_buckets = (int)n;
        } else {
            fprintf(stderr, "bucketdb schema: unknown option %s (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
    }
    if (version && probe_addr) {
        fprintf(stderr, "bucketdb schema: --server-version and --probe exclude each other\n");
        return BDB_EXIT_USAGE;
    }
    if (version && sch_parse_version(version, o.ver) != BDB_OK) {
        fprintf(stderr, "bucketdb schema: --server-version '%s': expected e.g. 2.1.0, 3.11, 4.1\n",
                version);
        return BDB_EXIT_USAGE;
    }
    if (probe_addr) {
        int rc = probe(probe_addr, user, password, o.ver, repl_given ? NULL : &o);
        if (rc != BDB_EXIT_OK)
            return rc;
    }
    bdb_buf out, warn;
    bdb_buf_init(&out);
    bdb_buf_init(&warn);
    int rc = sch_generate(&o, &out, &warn, err, sizeof err);
    if (rc != BDB_OK) {
        fprintf(stderr, "bucketdb schema: %s\n", err);
        bdb_buf_free(&out);
        bdb_buf_free(&warn);
        return BDB_EXIT_USAGE;
    }
    /* every warning line on stderr, prefixed */
    size_t start = 0;
    for (size_t i = 0; i < warn.len; i++)
        if (warn.data[i] == '\n') {
            fprintf(stderr, "bucketdb schema: warning: %.*s\n", (int)(i - start),
                    (const char *)warn.data + start);
            start = i + 1;
        }
    fwrite(out.data, 1, out.len, stdout);
    int bad = fflush(stdout) != 0 || ferror(stdout);
    bdb_buf_free(&out);
    bdb_buf_free(&warn);
    return bad ? BDB_EXIT_FAIL : BDB_EXIT_OK;
}
