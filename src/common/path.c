#include "common/path.h"

#include "common/alloc.h"

#include <stdio.h>
#include <string.h>

char *bdb_path_join(const char *dir, const char *name, const char *suffix)
{
    if (!dir || !name)
        return NULL;
    if (!suffix)
        suffix = "";
    size_t n = strlen(dir) + strlen(name) + strlen(suffix) + 2;
    char *p = bdb_malloc(n);
    if (p)
        snprintf(p, n, "%s/%s%s", dir, name, suffix);
    return p;
}
