/* cql_names: names and classes of protocol constants (see cql_proto.h): column types
 * as CQL writes them, opcodes, consistency levels (both ways) and error codes, with
 * the status and retry decision each error code maps to. */
#include "storage/cassandra/cql/wire/cql_proto.h"

#include "bucketdb/bdb.h"

#include <string.h>
#include <strings.h>

void cql_type_name(bdb_buf *out, const cql_type *t)
{
    static const char *const names[] = {
        [CQL_TYPE_ASCII] = "ascii",     [CQL_TYPE_BIGINT] = "bigint",
        [CQL_TYPE_BLOB] = "blob",       [CQL_TYPE_BOOLEAN] = "boolean",
        [CQL_TYPE_COUNTER] = "counter", [CQL_TYPE_DECIMAL] = "decimal",
        [CQL_TYPE_DOUBLE] = "double",   [CQL_TYPE_FLOAT] = "float",
        [CQL_TYPE_INT] = "int",         [CQL_TYPE_TIMESTAMP] = "timestamp",
        [CQL_TYPE_UUID] = "uuid",       [CQL_TYPE_VARCHAR] = "text",
        [CQL_TYPE_VARINT] = "varint",   [CQL_TYPE_TIMEUUID] = "timeuuid",
        [CQL_TYPE_INET] = "inet",       [CQL_TYPE_DATE] = "date",
        [CQL_TYPE_TIME] = "time",       [CQL_TYPE_SMALLINT] = "smallint",
        [CQL_TYPE_TINYINT] = "tinyint",
    };
    if (!t) {
        bdb_buf_puts(out, "?");
        return;
    }
    switch (t->id) {
    case CQL_TYPE_CUSTOM:
        bdb_buf_printf(out, "'%s'", t->custom ? t->custom : "");
        return;
    case CQL_TYPE_LIST:
    case CQL_TYPE_SET:
    case CQL_TYPE_MAP:
    case CQL_TYPE_TUPLE:
        bdb_buf_puts(out, t->id == CQL_TYPE_LIST  ? "list<"
                          : t->id == CQL_TYPE_SET ? "set<"
                          : t->id == CQL_TYPE_MAP ? "map<"
                                                  : "tuple<");
        for (uint16_t i = 0; i < t->n; i++) {
            if (i)
                bdb_buf_puts(out, ", ");
            cql_type_name(out, t->sub[i]);
        }
        bdb_buf_putc(out, '>');
        return;
    case CQL_TYPE_UDT:
        bdb_buf_printf(out, "%s.%s", t->ks ? t->ks : "", t->udt_name ? t->udt_name : "");
        return;
    default:
        if (t->id < sizeof names / sizeof names[0] && names[t->id])
            bdb_buf_puts(out, names[t->id]);
        else
            bdb_buf_printf(out, "type 0x%04x", t->id);
    }
}

/* ================================================================ names */

const char *cql_opcode_name(int op)
{
    switch (op) {
    case CQL_OP_ERROR:
        return "ERROR";
    case CQL_OP_STARTUP:
        return "STARTUP";
    case CQL_OP_READY:
        return "READY";
    case CQL_OP_AUTHENTICATE:
        return "AUTHENTICATE";
    case CQL_OP_OPTIONS:
        return "OPTIONS";
    case CQL_OP_SUPPORTED:
        return "SUPPORTED";
    case CQL_OP_QUERY:
        return "QUERY";
    case CQL_OP_RESULT:
        return "RESULT";
    case CQL_OP_PREPARE:
        return "PREPARE";
    case CQL_OP_EXECUTE:
        return "EXECUTE";
    case CQL_OP_REGISTER:
        return "REGISTER";
    case CQL_OP_EVENT:
        return "EVENT";
    case CQL_OP_BATCH:
        return "BATCH";
    case CQL_OP_AUTH_CHALLENGE:
        return "AUTH_CHALLENGE";
    case CQL_OP_AUTH_RESPONSE:
        return "AUTH_RESPONSE";
    case CQL_OP_AUTH_SUCCESS:
        return "AUTH_SUCCESS";
    default:
        return "UNKNOWN";
    }
}

static const char *const cl_names[] = {"ANY",    "ONE",          "TWO",          "THREE",
                                       "QUORUM", "ALL",          "LOCAL_QUORUM", "EACH_QUORUM",
                                       "SERIAL", "LOCAL_SERIAL", "LOCAL_ONE"};

const char *cql_consistency_name(int cl)
{
    if (cl < 0 || cl >= (int)(sizeof cl_names / sizeof cl_names[0]))
        return "UNKNOWN";
    return cl_names[cl];
}

int cql_consistency_parse(const char *s)
{
    for (int i = 0; i < (int)(sizeof cl_names / sizeof cl_names[0]); i++)
        if (!strcasecmp(s, cl_names[i]))
            return i;
    return -1;
}

const char *cql_error_name(int32_t code)
{
    switch (code) {
    case CQL_ERR_SERVER:
        return "server error";
    case CQL_ERR_PROTOCOL:
        return "protocol error";
    case CQL_ERR_BAD_CREDENTIALS:
        return "bad credentials";
    case CQL_ERR_UNAVAILABLE:
        return "unavailable";
    case CQL_ERR_OVERLOADED:
        return "overloaded";
    case CQL_ERR_IS_BOOTSTRAPPING:
        return "is bootstrapping";
    case CQL_ERR_TRUNCATE:
        return "truncate error";
    case CQL_ERR_WRITE_TIMEOUT:
        return "write timeout";
    case CQL_ERR_READ_TIMEOUT:
        return "read timeout";
    case CQL_ERR_READ_FAILURE:
        return "read failure";
    case CQL_ERR_FUNCTION_FAILURE:
        return "function failure";
    case CQL_ERR_WRITE_FAILURE:
        return "write failure";
    case CQL_ERR_SYNTAX:
        return "syntax error";
    case CQL_ERR_UNAUTHORIZED:
        return "unauthorized";
    case CQL_ERR_INVALID:
        return "invalid query";
    case CQL_ERR_CONFIG:
        return "configuration error";
    case CQL_ERR_ALREADY_EXISTS:
        return "already exists";
    case CQL_ERR_UNPREPARED:
        return "unprepared";
    case CQL_ERR_CLIENT_TIMEOUT:
        return "client timeout";
    case CQL_ERR_CLIENT_IO:
        return "connection lost";
    case CQL_ERR_CLIENT_CLOSED:
        return "connection closed";
    default:
        return "unknown error";
    }
}

int cql_error_status(int32_t code)
{
    switch (code) {
    case CQL_ERR_UNAVAILABLE:
    case CQL_ERR_OVERLOADED:
    case CQL_ERR_IS_BOOTSTRAPPING:
    case CQL_ERR_WRITE_TIMEOUT:
    case CQL_ERR_READ_TIMEOUT:
    case CQL_ERR_READ_FAILURE:
    case CQL_ERR_WRITE_FAILURE:
    case CQL_ERR_TRUNCATE:
        return BDB_ERR_AGAIN;
    case CQL_ERR_SYNTAX:
    case CQL_ERR_INVALID:
    case CQL_ERR_CONFIG:
    case CQL_ERR_UNAUTHORIZED:
    case CQL_ERR_BAD_CREDENTIALS:
    case CQL_ERR_FUNCTION_FAILURE:
        return BDB_ERR_INVALID;
    case CQL_ERR_ALREADY_EXISTS:
        return BDB_ERR_EXISTS;
    case CQL_ERR_UNPREPARED:
        return BDB_ERR_NOTFOUND;
    case CQL_ERR_CLIENT_TIMEOUT:
        return BDB_ERR_AGAIN;
    case CQL_ERR_CLIENT_CLOSED:
        return BDB_ERR_SHUTDOWN;
    default:
        return BDB_ERR_IO;
    }
}

int cql_error_retryable(int32_t code)
{
    switch (code) {
    case CQL_ERR_UNAVAILABLE:
    case CQL_ERR_OVERLOADED:
    case CQL_ERR_IS_BOOTSTRAPPING:
    case CQL_ERR_WRITE_TIMEOUT:
    case CQL_ERR_READ_TIMEOUT:
    case CQL_ERR_TRUNCATE:
    case CQL_ERR_CLIENT_TIMEOUT:
    case CQL_ERR_CLIENT_IO:
        return 1;
    default:
        return 0;
    }
}
