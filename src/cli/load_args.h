/* load_args: the flags of `bucketdb load` (cmd_load.c), parsed and checked. */
#ifndef BDB_CLI_LOAD_ARGS_H
#define BDB_CLI_LOAD_ARGS_H

#include <stdint.h>

#define LOAD_MAX_TENANTS 1000

struct load_opts {
    const char *server, *token, *admin_token, *tenant, *prefix, *states;
    const char *mqtt, *mqtt_user, *mqtt_pass; /* mqtt: broker, NULL = HTTP */
    long tenants, devices, metrics, hot, batch, conns;
    double hot_factor, late, ooo, state_change;
    int64_t interval_ms, duration_ms, max_ms, end_ms;
    long long samples, seed;
    int live, json;
};

/* Fills o from argv (defaults first). Returns 0 to run, 1 when --help was printed,
 * -1 after printing what is wrong with a flag. */
int load_parse_args(int argc, char **argv, struct load_opts *o);

#endif
