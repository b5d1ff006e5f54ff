/* Helpers shared by the unit tests (tests/unit is on the include path). */
#ifndef BDB_TESTUTIL_H
#define BDB_TESTUTIL_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Removes a file or a directory tree (test temp dirs only). */
static inline void tu_rm_rf(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char sub[4096];
        int n = snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        if (n > 0 && (size_t)n < sizeof sub)
            tu_rm_rf(sub);
    }
    closedir(d);
    rmdir(path);
}

#endif
