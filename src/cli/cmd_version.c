#include "cli/cli.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>

int cmd_version(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: bucketdb version\n\nPrints the version and exits.\n");
        return BDB_EXIT_OK;
    }
    printf("bucketdb %s\n", BDB_VERSION);
    return BDB_EXIT_OK;
}
