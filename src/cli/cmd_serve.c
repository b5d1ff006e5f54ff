/* serve: load the configuration, start the server, wait for a signal, stop cleanly.
 * SIGTERM and SIGINT: stop accepting, finish requests, flush the head to blocks,
 * fsync, close, exit 0. SIGHUP is logged and ignored (no live reload yet). */
#include "cli/cli.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "server/config.h"
#include "server/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void help(void)
{
    printf("usage: bucketdb serve [--config FILE] [--data DIR] [--listen HOST:PORT] [options]\n\n"
           "Runs the server on the embedded storage engine.\n\n"
           "  --config FILE     read settings from FILE (key = value lines); flags win\n"
           "  --print-config    print the effective configuration and exit\n"
           "  --check-config    validate the configuration and exit (0 = valid)\n"
           "  --allow-insecure-listen  allow a non-loopback listen with auth off (risky)\n"
           "  --help            this text\n\n"
           "Every setting is also a flag (--max-body-bytes 1MiB = max_body_bytes):\n");
    for (const char *const *k = bdb_config_keys(); *k; k++) {
        char flag[64];
        snprintf(flag, sizeof flag, "%s", *k);
        for (char *p = flag; *p; p++)
            if (*p == '_')
                *p = '-';
        printf("  --%-22s %s\n", flag, bdb_config_help(*k));
    }
    printf("\nExit codes: 0 clean stop, 1 runtime failure, 2 usage or configuration error.\n");
}

int cmd_serve(int argc, char **argv)
{
    bdb_config cfg;
    bdb_config_default(&cfg);
    char err[512];
    int print = 0, check = 0;
    /* The config file is read first so that flags override it wherever they appear. */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc) {
            if (bdb_config_load(&cfg, argv[i + 1], err, sizeof err)) {
                fprintf(stderr, "bucketdb serve: %s\n", err);
                return BDB_EXIT_USAGE;
            }
        } else if (!strncmp(argv[i], "--config=", 9)) {
            if (bdb_config_load(&cfg, argv[i] + 9, err, sizeof err)) {
                fprintf(stderr, "bucketdb serve: %s\n", err);
                return BDB_EXIT_USAGE;
            }
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            help();
            return BDB_EXIT_OK;
        }
        if (!strcmp(a, "--print-config")) {
            print = 1;
            continue;
        }
        if (!strcmp(a, "--check-config")) {
            check = 1;
            continue;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9))
            continue;
        if (!strcmp(a, "--allow-insecure-listen") &&
            (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2))) {
            cfg.allow_insecure_listen = 1; /* a bare switch; =true/false also works */
            continue;
        }
        if (strncmp(a, "--", 2) != 0) {
            fprintf(stderr, "bucketdb serve: unexpected argument '%s' (see --help)\n", a);
            return BDB_EXIT_USAGE;
        }
        char key[128];
        const char *val;
        const char *eq = strchr(a, '=');
        if (eq) {
            snprintf(key, sizeof key, "%.*s", (int)(eq - a - 2), a + 2);
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a + 2);
            if (i + 1 >= argc) {
                fprintf(stderr, "bucketdb serve: %s needs a value\n", a);
                return BDB_EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (bdb_config_set(&cfg, key, val, err, sizeof err)) {
            fprintf(stderr, "bucketdb serve: %s (see --help)\n", err);
            return BDB_EXIT_USAGE;
        }
    }
    if (bdb_config_check(&cfg, err, sizeof err)) {
        fprintf(stderr, "bucketdb serve: invalid configuration: %s\n", err);
        return BDB_EXIT_USAGE;
    }
    if (print) {
        bdb_config_print(&cfg, stdout);
        return BDB_EXIT_OK;
    }
    /* Before anything is opened or bound: a non-loopback address without auth. */
    if (bdb_server_check_listen(&cfg, err, sizeof err) != BDB_OK) {
        fprintf(stderr, "bucketdb serve: %s\n", err);
        return BDB_EXIT_USAGE;
    }
    if (check) {
        printf("configuration ok\n");
        return BDB_EXIT_OK;
    }
    bdb_log_set_level((enum bdb_log_level)bdb_log_parse_level(cfg.log_level));

    /* Block the stop signals in every thread; this thread collects them with sigwait. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    BDB_INFO("bucketdb %s starting: data=%s listen=%s sync=%s", BDB_VERSION, cfg.data, cfg.listen,
             cfg.sync);
    bdb_server *srv;
    int rc = bdb_server_start(&cfg, &srv);
    if (rc != BDB_OK) {
        if (rc == BDB_ERR_EXISTS)
            fprintf(stderr,
                    "bucketdb serve: cannot start: data directory %s is in use by "
                    "another bucketdb process\n",
                    cfg.data);
        else
            fprintf(stderr, "bucketdb serve: cannot start: %s\n", bdb_strerror(rc));
        return rc == BDB_ERR_INVALID ? BDB_EXIT_USAGE : BDB_EXIT_FAIL;
    }
    char host[256];
    snprintf(host, sizeof host, "%s", cfg.listen);
    char *colon = strrchr(host, ':');
    if (colon)
        *colon = '\0';
    /* a directory that does not hold the keyspace's admin token cannot print it */
    const char *tok = bdb_server_token(srv);
    printf("bucketdb %s ready\n  listening on http://%s:%d\n  data directory %s\n  token %s\n"
           "  auth %s\n  WAL sync %s\n",
           BDB_VERSION, host, bdb_server_port(srv), cfg.data,
           tok[0] ? tok : "(not in this directory: the keyspace's admin token is in force)",
           bdb_server_auth_required(srv) ? "required" : "optional (loopback)", cfg.sync);
    fflush(stdout);
    BDB_INFO("listening on %s:%d", host, bdb_server_port(srv));
    for (;;) {
        int sig;
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            BDB_WARN("SIGHUP received: live reload is not supported; restart to apply changes");
            continue;
        }
        BDB_INFO("received %s, shutting down: finishing requests, flushing, syncing",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT");
        break;
    }
    rc = bdb_server_stop(srv);
    if (rc != BDB_OK) {
        BDB_ERROR("shutdown: final flush failed: %s (the WAL still holds every acknowledged "
                  "write)",
                  bdb_strerror(rc));
        return BDB_EXIT_FAIL;
    }
    BDB_INFO("stopped cleanly");
    return BDB_EXIT_OK;
}
