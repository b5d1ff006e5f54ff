#include "bucketdb/bdb.h"

const char *bdb_strerror(int status)
{
    switch (status) {
#define BDB_X_CASE(name, value, msg)                                                               \
    case name:                                                                                     \
        return msg;
        BDB_STATUS_LIST(BDB_X_CASE)
#undef BDB_X_CASE
    }
    return "unknown status";
}
