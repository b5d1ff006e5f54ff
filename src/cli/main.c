#include "cli/cli.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: bucketdb <command> [options]\n\n"
               "commands:\n"
               "  serve     run the server (embedded storage in a data directory)\n"
               "  query     read samples or devices from a running server\n"
               "  tenant    manage tenants, tokens and quotas of a running server\n"
               "  cql       run CQL statements on a Cassandra node\n"
               "  schema    print the CQL schema (DDL) for a Cassandra keyspace\n"
               "  cluster   status of a Cassandra cluster: nodes, keyspace, writer lease\n"
               "  plan      capacity plan and bucket advice for a fleet\n"
               "  load      simulate a device fleet writing to a running server\n"
               "  export    stream samples out of a running server (line protocol, CSV)\n"
               "  import    write line protocol or CSV files into a running server\n"
               "  version   print the version\n\n"
               "`bucketdb <command> --help` describes each command. Docs: docs/CLI.md\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return BDB_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "serve"))
        return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(cmd, "query"))
        return cmd_query(argc - 1, argv + 1);
    if (!strcmp(cmd, "tenant"))
        return cmd_tenant(argc - 1, argv + 1);
    if (!strcmp(cmd, "cql"))
        return cmd_cql(argc - 1, argv + 1);
    if (!strcmp(cmd, "schema"))
        return cmd_schema(argc - 1, argv + 1);
    if (!strcmp(cmd, "cluster"))
        return cmd_cluster(argc - 1, argv + 1);
    if (!strcmp(cmd, "plan"))
        return cmd_plan(argc - 1, argv + 1);
    if (!strcmp(cmd, "load"))
        return cmd_load(argc - 1, argv + 1);
    if (!strcmp(cmd, "export"))
        return cmd_export(argc - 1, argv + 1);
    if (!strcmp(cmd, "import"))
        return cmd_import(argc - 1, argv + 1);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return cmd_version(argc - 1, argv + 1);
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return BDB_EXIT_OK;
    }
    fprintf(stderr, "bucketdb: unknown command '%s'\n", cmd);
    usage(stderr);
    return BDB_EXIT_USAGE;
}
