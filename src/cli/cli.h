/* cli: the `bucketdb` command. Each subcommand is one cmd_*.c file.
 * Exit codes (docs/CLI.md): 0 success, 1 runtime failure (cannot open data,
 * cannot bind, server error), 2 usage or configuration error. */
#ifndef BDB_CLI_H
#define BDB_CLI_H

#define BDB_EXIT_OK 0
#define BDB_EXIT_FAIL 1
#define BDB_EXIT_USAGE 2

int cmd_serve(int argc, char **argv);
int cmd_query(int argc, char **argv);
int cmd_version(int argc, char **argv);
int cmd_cql(int argc, char **argv);
int cmd_schema(int argc, char **argv);
int cmd_cluster(int argc, char **argv); /* Cassandra cluster status */
int cmd_tenant(int argc, char **argv);
int cmd_plan(int argc, char **argv); /* operator tools: docs/OPERATIONS.md */
int cmd_load(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif
