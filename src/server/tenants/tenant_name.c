/* tenant_name: the tenant naming rule (which names a request may use, which may be
 * registered), apart from the registry so that the configuration and the fuzzers
 * check names without linking it. Declared in tenants.h; docs/TENANCY.md#tenant-names. */
#include "server/tenants/tenants.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

int bdb_tenant_name_valid(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n > BDB_TENANT_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = t[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return 0;
    }
    return 1;
}

int bdb_tenant_name_registrable(const char *name, const char *default_tenant, char *why,
                                size_t whylen)
{
    static const char *const reserved[] = {"admin", "api", "default"};
    char dummy[1];
    if (!why)
        why = dummy, whylen = sizeof dummy;
    if (!name || !bdb_tenant_name_valid(name)) {
        snprintf(why, whylen,
                 "invalid tenant name: use 1..128 characters of A-Z a-z 0-9 _ - ., starting "
                 "with a letter or a digit");
        return -1;
    }
    char c0 = name[0];
    if (!((c0 >= 'a' && c0 <= 'z') || (c0 >= 'A' && c0 <= 'Z') || (c0 >= '0' && c0 <= '9'))) {
        snprintf(why, whylen,
                 "invalid tenant name '%.128s': it must start with a letter or a digit", name);
        return -1;
    }
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++)
        if (!strcasecmp(name, reserved[i])) {
            snprintf(why, whylen,
                     "invalid tenant name '%.128s': reserved (admin, api and default, in any "
                     "case, and the server's default_tenant cannot be registered)",
                     name);
            return -1;
        }
    if (default_tenant && !strcasecmp(name, default_tenant)) {
        snprintf(why, whylen,
                 "invalid tenant name '%.128s': it is the server's default_tenant, which "
                 "requests without a tenant act on; it cannot be registered",
                 name);
        return -1;
    }
    return 0;
}
