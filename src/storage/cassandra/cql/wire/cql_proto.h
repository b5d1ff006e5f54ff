/* cql_proto: the CQL native protocol (v3 and v4) frame codec.
 *
 * Written from the protocol specifications (native_protocol_v3.spec and
 * native_protocol_v4.spec of apache/cassandra). Everything on the wire is big-endian.
 *
 * Encoding: requests are built into a bdb_buf by the cql_msg_* functions; each one
 * writes the 9-byte header (stream 0, patched by the connection before sending) and
 * the body, and fixes up the length.
 *
 * Decoding: responses are decoded by cql_response_decode from a header and a body
 * the caller has already framed (cql_header_decode checks the version, the direction
 * and the length against a maximum frame size). The body decoder is a sticky-error
 * reader over a byte range: a read past the end sets `err` and every later read
 * returns zero, so a malformed or truncated body is reported once, never read
 * out of bounds. Every count read from the wire is checked against the bytes that
 * are left before anything is allocated. */
#ifndef BDB_CQL_PROTO_H
#define BDB_CQL_PROTO_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

#define CQL_HEADER_LEN 9
#define CQL_VERSION_MIN 3
#define CQL_VERSION_MAX 4
#define CQL_RESPONSE_BIT 0x80
/* The spec limits a frame to 256 MB; connections use a smaller default. */
#define CQL_FRAME_LIMIT (256u * 1024 * 1024)
#define CQL_FRAME_DEFAULT_MAX (64u * 1024 * 1024)
/* Deepest nesting of collection / tuple / UDT types the decoder follows. */
#define CQL_TYPE_MAX_DEPTH 16

/* Frame flags. */
#define CQL_FLAG_COMPRESSION 0x01
#define CQL_FLAG_TRACING 0x02
#define CQL_FLAG_CUSTOM_PAYLOAD 0x04 /* v4 */
#define CQL_FLAG_WARNING 0x08        /* v4 */

enum cql_opcode {
    CQL_OP_ERROR = 0x00,
    CQL_OP_STARTUP = 0x01,
    CQL_OP_READY = 0x02,
    CQL_OP_AUTHENTICATE = 0x03,
    CQL_OP_OPTIONS = 0x05,
    CQL_OP_SUPPORTED = 0x06,
    CQL_OP_QUERY = 0x07,
    CQL_OP_RESULT = 0x08,
    CQL_OP_PREPARE = 0x09,
    CQL_OP_EXECUTE = 0x0A,
    CQL_OP_REGISTER = 0x0B,
    CQL_OP_EVENT = 0x0C,
    CQL_OP_BATCH = 0x0D,
    CQL_OP_AUTH_CHALLENGE = 0x0E,
    CQL_OP_AUTH_RESPONSE = 0x0F,
    CQL_OP_AUTH_SUCCESS = 0x10,
};

enum cql_consistency {
    CQL_ANY = 0x0000,
    CQL_ONE = 0x0001,
    CQL_TWO = 0x0002,
    CQL_THREE = 0x0003,
    CQL_QUORUM = 0x0004,
    CQL_ALL = 0x0005,
    CQL_LOCAL_QUORUM = 0x0006,
    CQL_EACH_QUORUM = 0x0007,
    CQL_SERIAL = 0x0008,
    CQL_LOCAL_SERIAL = 0x0009,
    CQL_LOCAL_ONE = 0x000A,
};

enum cql_error_code {
    CQL_ERR_SERVER = 0x0000,
    CQL_ERR_PROTOCOL = 0x000A,
    CQL_ERR_BAD_CREDENTIALS = 0x0100,
    CQL_ERR_UNAVAILABLE = 0x1000,
    CQL_ERR_OVERLOADED = 0x1001,
    CQL_ERR_IS_BOOTSTRAPPING = 0x1002,
    CQL_ERR_TRUNCATE = 0x1003,
    CQL_ERR_WRITE_TIMEOUT = 0x1100,
    CQL_ERR_READ_TIMEOUT = 0x1200,
    CQL_ERR_READ_FAILURE = 0x1300,     /* v4 */
    CQL_ERR_FUNCTION_FAILURE = 0x1400, /* v4 */
    CQL_ERR_WRITE_FAILURE = 0x1500,    /* v4 */
    CQL_ERR_SYNTAX = 0x2000,
    CQL_ERR_UNAUTHORIZED = 0x2100,
    CQL_ERR_INVALID = 0x2200,
    CQL_ERR_CONFIG = 0x2300,
    CQL_ERR_ALREADY_EXISTS = 0x2400,
    CQL_ERR_UNPREPARED = 0x2500,
    /* Failures seen on the client side, never on the wire (cql_conn synthesizes an
     * ERROR response with these so callers handle one shape). */
    CQL_ERR_CLIENT_TIMEOUT = -1, /* no answer within the request timeout */
    CQL_ERR_CLIENT_IO = -2,      /* connection lost before the answer */
    CQL_ERR_CLIENT_CLOSED = -3,  /* connection closed by this side */
};

enum cql_result_kind {
    CQL_RESULT_VOID = 0x0001,
    CQL_RESULT_ROWS = 0x0002,
    CQL_RESULT_SET_KEYSPACE = 0x0003,
    CQL_RESULT_PREPARED = 0x0004,
    CQL_RESULT_SCHEMA_CHANGE = 0x0005,
};

/* Type option ids (section 4.2.5.2). */
enum cql_type_id {
    CQL_TYPE_CUSTOM = 0x0000,
    CQL_TYPE_ASCII = 0x0001,
    CQL_TYPE_BIGINT = 0x0002,
    CQL_TYPE_BLOB = 0x0003,
    CQL_TYPE_BOOLEAN = 0x0004,
    CQL_TYPE_COUNTER = 0x0005,
    CQL_TYPE_DECIMAL = 0x0006,
    CQL_TYPE_DOUBLE = 0x0007,
    CQL_TYPE_FLOAT = 0x0008,
    CQL_TYPE_INT = 0x0009,
    CQL_TYPE_TIMESTAMP = 0x000B,
    CQL_TYPE_UUID = 0x000C,
    CQL_TYPE_VARCHAR = 0x000D,
    CQL_TYPE_VARINT = 0x000E,
    CQL_TYPE_TIMEUUID = 0x000F,
    CQL_TYPE_INET = 0x0010,
    CQL_TYPE_DATE = 0x0011,     /* v4 */
    CQL_TYPE_TIME = 0x0012,     /* v4 */
    CQL_TYPE_SMALLINT = 0x0013, /* v4 */
    CQL_TYPE_TINYINT = 0x0014,  /* v4 */
    CQL_TYPE_LIST = 0x0020,
    CQL_TYPE_MAP = 0x0021,
    CQL_TYPE_SET = 0x0022,
    CQL_TYPE_UDT = 0x0030,
    CQL_TYPE_TUPLE = 0x0031,
};

/* Rows metadata flags. */
#define CQL_META_GLOBAL_TABLES_SPEC 0x0001
#define CQL_META_HAS_MORE_PAGES 0x0002
#define CQL_META_NO_METADATA 0x0004

/* QUERY / EXECUTE / BATCH parameter flags. */
#define CQL_QF_VALUES 0x01
#define CQL_QF_SKIP_METADATA 0x02
#define CQL_QF_PAGE_SIZE 0x04
#define CQL_QF_PAGING_STATE 0x08
#define CQL_QF_SERIAL_CONSISTENCY 0x10
#define CQL_QF_DEFAULT_TIMESTAMP 0x20
#define CQL_QF_NAMES 0x40

enum cql_batch_type { CQL_BATCH_LOGGED = 0, CQL_BATCH_UNLOGGED = 1, CQL_BATCH_COUNTER = 2 };

/* A [bytes] / [value]: len >= 0 is a value (p may be NULL when len == 0),
 * CQL_NULL is null and CQL_UNSET (v4 only) leaves the column unchanged. */
#define CQL_NULL (-1)
#define CQL_UNSET (-2)
typedef struct cql_bytes {
    const uint8_t *p;
    int32_t len;
} cql_bytes;

/* ---------------------------------------------------------------- encoding */

void cql_put_u8(bdb_buf *b, uint8_t v);
void cql_put_short(bdb_buf *b, uint16_t v);
void cql_put_int(bdb_buf *b, int32_t v);
void cql_put_long(bdb_buf *b, int64_t v);
/* [string]: n must be <= 65535 (longer strings are cut: callers check first). */
void cql_put_string(bdb_buf *b, const char *s, size_t n);
void cql_put_long_string(bdb_buf *b, const char *s, size_t n);
void cql_put_uuid(bdb_buf *b, const uint8_t uuid[16]);
void cql_put_string_list(bdb_buf *b, const char *const *items, uint16_t n);
/* [bytes] / [value]: len < 0 writes null (or unset with CQL_UNSET). */
void cql_put_bytes(bdb_buf *b, const void *p, int32_t len);
void cql_put_short_bytes(bdb_buf *b, const void *p, uint16_t len);
void cql_put_string_map(bdb_buf *b, const char *const *keys, const char *const *vals, uint16_t n);
/* string multimap: n keys, key i has counts[i] values, all values flattened. */
void cql_put_string_multimap(bdb_buf *b, const char *const *keys, const uint16_t *counts,
                             const char *const *vals, uint16_t n);
/* [inet]: addr is 4 or 16 bytes. */
void cql_put_inet(bdb_buf *b, const uint8_t *addr, uint8_t addr_len, int32_t port);

static inline void cql_be16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}
static inline void cql_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}
static inline void cql_be64(uint8_t *p, uint64_t v)
{
    cql_be32(p, (uint32_t)(v >> 32));
    cql_be32(p + 4, (uint32_t)v);
}
static inline uint16_t cql_get_be16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}
static inline uint32_t cql_get_be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t cql_get_be64(const uint8_t *p)
{
    return (uint64_t)cql_get_be32(p) << 32 | cql_get_be32(p + 4);
}

/* ---------------------------------------------------------------- decoding */

/* Sticky-error reads over a bdb_dec (see common/buf.h). Pointers returned point into
 * the decoded range. */
uint8_t cql_get_u8(bdb_dec *d);
uint16_t cql_get_short(bdb_dec *d);
int32_t cql_get_int(bdb_dec *d);
int64_t cql_get_long(bdb_dec *d);
const char *cql_get_string(bdb_dec *d, size_t *n);
const char *cql_get_long_string(bdb_dec *d, size_t *n);
const uint8_t *cql_get_uuid(bdb_dec *d);
/* [bytes] / [value]: returns the value; v->len < 0 for null / unset. A length below
 * -2 is an error. */
cql_bytes cql_get_bytes(bdb_dec *d);
const uint8_t *cql_get_short_bytes(bdb_dec *d, uint16_t *n);
/* [inet] into addr (16 bytes room); returns the address length (4 or 16) or 0. */
uint8_t cql_get_inet(bdb_dec *d, uint8_t addr[16], int32_t *port);
/* A malloc'ed NUL-terminated copy of a [string] (NULL on error; sets d->err on OOM). */
char *cql_get_string_dup(bdb_dec *d);
/* [string list] as a malloc'ed array of malloc'ed strings. */
char **cql_get_string_list(bdb_dec *d, uint16_t *n);
void cql_free_string_list(char **l, size_t n);

/* ---------------------------------------------------------------- frames */

typedef struct cql_header {
    uint8_t version; /* without the direction bit */
    uint8_t response;
    uint8_t flags;
    int16_t stream;
    uint8_t opcode;
    uint32_t length;
} cql_header;

/* Decodes a 9-byte header. Returns BDB_OK, BDB_ERR_CORRUPT for a version this codec
 * does not speak (not 3 or 4) or BDB_ERR_LIMIT for a body longer than max_body. */
int cql_header_decode(const uint8_t p[CQL_HEADER_LEN], cql_header *h, uint32_t max_body);
void cql_header_encode(uint8_t p[CQL_HEADER_LEN], const cql_header *h);
static inline void cql_frame_set_stream(uint8_t *frame, int16_t stream)
{
    cql_be16(frame + 2, (uint16_t)stream);
}

/* ---------------------------------------------------------------- requests */

typedef struct cql_query_params {
    uint16_t consistency;
    const cql_bytes *values;
    uint16_t nvalues;
    const char *const *names;    /* with values, optional: named bind markers (QUERY only) */
    int32_t page_size;           /* > 0 to page */
    cql_bytes paging_state;      /* len > 0 to continue */
    uint16_t serial_consistency; /* 0 for none (SERIAL is the server default) */
    int64_t timestamp_us;        /* 0 for none */
    int skip_metadata;
} cql_query_params;

typedef struct cql_batch_stmt {
    const char *query; /* a query string, or NULL with an id for a prepared one */
    size_t query_len;
    const uint8_t *id;
    uint16_t id_len;
    const cql_bytes *values;
    uint16_t nvalues;
} cql_batch_stmt;

void cql_msg_startup(bdb_buf *b, uint8_t version, const char *compression);
void cql_msg_options(bdb_buf *b, uint8_t version);
void cql_msg_query(bdb_buf *b, uint8_t version, const char *query, size_t qlen,
                   const cql_query_params *p);
void cql_msg_prepare(bdb_buf *b, uint8_t version, const char *query, size_t qlen);
void cql_msg_execute(bdb_buf *b, uint8_t version, const uint8_t *id, uint16_t id_len,
                     const cql_query_params *p);
void cql_msg_batch(bdb_buf *b, uint8_t version, uint8_t type, const cql_batch_stmt *stmts,
                   uint16_t n, uint16_t consistency, uint16_t serial_consistency,
                   int64_t timestamp_us);
void cql_msg_auth_response(bdb_buf *b, uint8_t version, const void *token, int32_t len);
void cql_msg_register(bdb_buf *b, uint8_t version, const char *const *events, uint16_t n);
/* SASL PLAIN token for PasswordAuthenticator: "\0user\0password". */
void cql_sasl_plain(bdb_buf *token, const char *user, const char *password);

/* ---------------------------------------------------------------- responses */

typedef struct cql_type {
    uint16_t id;
    char *custom;          /* CUSTOM: class name */
    char *ks, *udt_name;   /* UDT */
    uint16_t n;            /* LIST/SET: 1, MAP: 2, UDT/TUPLE: fields */
    struct cql_type **sub; /* element, key/value or field types */
    char **field_names;    /* UDT */
} cql_type;

typedef struct cql_column {
    char *ks, *table, *name;
    cql_type *type;
} cql_column;

typedef struct cql_meta {
    int32_t flags;
    int32_t ncols;
    cql_column *cols; /* NULL with NO_METADATA */
    int32_t npk;      /* prepared bind metadata, v4 */
    uint16_t *pk;
    cql_bytes paging_state; /* points into the frame body */
} cql_meta;

typedef struct cql_error {
    int32_t code;
    char *message;
    uint16_t consistency;
    int32_t required, alive;    /* UNAVAILABLE */
    int32_t received, blockfor; /* timeouts and failures */
    int32_t numfailures;        /* v4 failures */
    uint8_t data_present;       /* READ_TIMEOUT / READ_FAILURE */
    char *write_type;           /* WRITE_TIMEOUT / WRITE_FAILURE */
    char *ks, *table;           /* ALREADY_EXISTS; FUNCTION_FAILURE: ks, function */
    cql_bytes unprepared_id;    /* UNPREPARED, points into the frame body */
} cql_error;

typedef struct cql_result {
    int32_t kind;
    cql_meta meta;        /* ROWS: result metadata; PREPARED: bind metadata */
    cql_meta result_meta; /* PREPARED: metadata of the rows EXECUTE will return */
    int32_t nrows;
    cql_bytes *cells; /* nrows * meta.ncols, row-major, pointing into the body */
    cql_bytes prepared_id;
    char *keyspace;    /* SET_KEYSPACE; SCHEMA_CHANGE: the keyspace */
    char *change_type; /* SCHEMA_CHANGE: CREATED / UPDATED / DROPPED */
    char *target;      /* KEYSPACE / TABLE / TYPE / FUNCTION / AGGREGATE */
    char *name;        /* table, type, function or aggregate name (or NULL) */
    char **arg_types;  /* FUNCTION / AGGREGATE (v4) */
    uint16_t narg_types;
} cql_result;

typedef struct cql_event {
    char *type;   /* TOPOLOGY_CHANGE / STATUS_CHANGE / SCHEMA_CHANGE */
    char *change; /* NEW_NODE, UP, CREATED... */
    uint8_t addr[16];
    uint8_t addr_len;
    int32_t port;
    cql_result schema; /* SCHEMA_CHANGE: change_type, target, keyspace, name */
} cql_event;

typedef struct cql_response {
    cql_header h;
    uint8_t *body; /* owned */
    size_t body_len;
    int has_tracing;
    uint8_t tracing_id[16];
    char **warnings; /* v4 */
    uint16_t nwarnings;
    cql_error error;     /* ERROR */
    char *authenticator; /* AUTHENTICATE */
    cql_bytes token;     /* AUTH_CHALLENGE / AUTH_SUCCESS */
    char **sup_keys;     /* SUPPORTED: keys and, per key, a list of values */
    char ***sup_vals;
    uint16_t *sup_nvals;
    uint16_t nsup;
    cql_result result; /* RESULT */
    cql_event event;   /* EVENT */
} cql_response;

/* Decodes a response frame. Takes ownership of body (malloc'ed, may be NULL when
 * len == 0) whatever the outcome: on error it is freed with the partial response.
 * Returns BDB_OK or BDB_ERR_CORRUPT (malformed or truncated body), BDB_ERR_INVALID
 * (compressed frame: this client never asks for compression). */
int cql_response_decode(const cql_header *h, uint8_t *body, size_t len, cql_response **out);
void cql_response_free(cql_response *r);

/* The RESULT body parser on its own (the fuzz harness and tests use it); cells and
 * paging state point into [p, p + n). */
int cql_result_decode(bdb_dec *d, uint8_t version, cql_result *r);
void cql_result_clear(cql_result *r);
int cql_error_decode(bdb_dec *d, cql_error *e);
void cql_error_clear(cql_error *e);
void cql_type_free(cql_type *t);
/* Appends the CQL name of a type ("map<text, text>"). */
void cql_type_name(bdb_buf *out, const cql_type *t);

/* ---------------------------------------------------------------- names */

const char *cql_opcode_name(int op);
const char *cql_consistency_name(int cl);
/* Parses "ONE", "local_quorum"...; returns -1 if unknown. */
int cql_consistency_parse(const char *s);
const char *cql_error_name(int32_t code);
/* The bdb status an error code maps to: BDB_ERR_AGAIN for the ones a retry can cure
 * (unavailable, overloaded, bootstrapping, timeouts), BDB_ERR_INVALID for bad
 * statements, credentials and permissions, BDB_ERR_EXISTS, BDB_ERR_NOTFOUND for
 * UNPREPARED, BDB_ERR_IO for server and protocol errors. */
int cql_error_status(int32_t code);
/* Whether a retry of the same request may succeed (on this or another node):
 * unavailable, overloaded, bootstrapping, server-side timeouts, truncate errors and
 * the client-side timeout and lost connection. The caller still decides about
 * idempotence: a write that timed out may have been applied. */
int cql_error_retryable(int32_t code);

#endif
