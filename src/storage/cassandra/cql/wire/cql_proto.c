/* cql_proto: see cql_proto.h. Encoders append to a bdb_buf; decoders read through a
 * sticky-error bdb_dec and never allocate more than the remaining input can justify. */
#include "storage/cassandra/cql/wire/cql_proto.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ encoding */

void cql_put_u8(bdb_buf *b, uint8_t v)
{
    bdb_buf_putc(b, v);
}

void cql_put_short(bdb_buf *b, uint16_t v)
{
    bdb_buf_reserve(b, 2);
    cql_be16(b->data + b->len, v);
    b->len += 2;
}

void cql_put_int(bdb_buf *b, int32_t v)
{
    bdb_buf_reserve(b, 4);
    cql_be32(b->data + b->len, (uint32_t)v);
    b->len += 4;
}

void cql_put_long(bdb_buf *b, int64_t v)
{
    bdb_buf_reserve(b, 8);
    cql_be64(b->data + b->len, (uint64_t)v);
    b->len += 8;
}

void cql_put_string(bdb_buf *b, const char *s, size_t n)
{
    if (n > 0xFFFF)
        n = 0xFFFF;
    cql_put_short(b, (uint16_t)n);
    bdb_buf_append(b, s, n);
}

void cql_put_long_string(bdb_buf *b, const char *s, size_t n)
{
    if (n > INT32_MAX)
        n = INT32_MAX;
    cql_put_int(b, (int32_t)n);
    bdb_buf_append(b, s, n);
}

void cql_put_uuid(bdb_buf *b, const uint8_t uuid[16])
{
    bdb_buf_append(b, uuid, 16);
}

void cql_put_string_list(bdb_buf *b, const char *const *items, uint16_t n)
{
    cql_put_short(b, n);
    for (uint16_t i = 0; i < n; i++)
        cql_put_string(b, items[i], strlen(items[i]));
}

void cql_put_bytes(bdb_buf *b, const void *p, int32_t len)
{
    if (len < 0) {
        cql_put_int(b, len == CQL_UNSET ? CQL_UNSET : CQL_NULL);
        return;
    }
    cql_put_int(b, len);
    bdb_buf_append(b, p, (size_t)len);
}

void cql_put_short_bytes(bdb_buf *b, const void *p, uint16_t len)
{
    cql_put_short(b, len);
    bdb_buf_append(b, p, len);
}

void cql_put_string_map(bdb_buf *b, const char *const *keys, const char *const *vals, uint16_t n)
{
    cql_put_short(b, n);
    for (uint16_t i = 0; i < n; i++) {
        cql_put_string(b, keys[i], strlen(keys[i]));
        cql_put_string(b, vals[i], strlen(vals[i]));
    }
}

void cql_put_string_multimap(bdb_buf *b, const char *const *keys, const uint16_t *counts,
                             const char *const *vals, uint16_t n)
{
    cql_put_short(b, n);
    size_t v = 0;
    for (uint16_t i = 0; i < n; i++) {
        cql_put_string(b, keys[i], strlen(keys[i]));
        cql_put_string_list(b, vals + v, counts[i]);
        v += counts[i];
    }
}

void cql_put_inet(bdb_buf *b, const uint8_t *addr, uint8_t addr_len, int32_t port)
{
    cql_put_u8(b, addr_len);
    bdb_buf_append(b, addr, addr_len);
    cql_put_int(b, port);
}

/* ================================================================ decoding */

static const uint8_t *take(bdb_dec *d, size_t n)
{
    if (d->err || (size_t)(d->end - d->p) < n) {
        d->err = 1;
        d->p = d->end;
        return NULL;
    }
    const uint8_t *p = d->p;
    d->p += n;
    return p;
}

uint8_t cql_get_u8(bdb_dec *d)
{
    const uint8_t *p = take(d, 1);
    return p ? p[0] : 0;
}

uint16_t cql_get_short(bdb_dec *d)
{
    const uint8_t *p = take(d, 2);
    return p ? cql_get_be16(p) : 0;
}

int32_t cql_get_int(bdb_dec *d)
{
    const uint8_t *p = take(d, 4);
    return p ? (int32_t)cql_get_be32(p) : 0;
}

int64_t cql_get_long(bdb_dec *d)
{
    const uint8_t *p = take(d, 8);
    return p ? (int64_t)cql_get_be64(p) : 0;
}

const char *cql_get_string(bdb_dec *d, size_t *n)
{
    uint16_t len = cql_get_short(d);
    const uint8_t *p = take(d, len);
    *n = p ? len : 0;
    return p ? (const char *)p : "";
}

const char *cql_get_long_string(bdb_dec *d, size_t *n)
{
    int32_t len = cql_get_int(d);
    if (len < 0) {
        d->err = 1;
        *n = 0;
        return "";
    }
    const uint8_t *p = take(d, (size_t)len);
    *n = p ? (size_t)len : 0;
    return p ? (const char *)p : "";
}

const uint8_t *cql_get_uuid(bdb_dec *d)
{
    return take(d, 16);
}

cql_bytes cql_get_bytes(bdb_dec *d)
{
    cql_bytes v = {NULL, CQL_NULL};
    int32_t len = cql_get_int(d);
    if (d->err)
        return v;
    if (len < 0) {
        if (len < CQL_UNSET)
            d->err = 1;
        v.len = len < CQL_UNSET ? CQL_NULL : len;
        return v;
    }
    v.p = take(d, (size_t)len);
    v.len = v.p ? len : CQL_NULL;
    return v;
}

const uint8_t *cql_get_short_bytes(bdb_dec *d, uint16_t *n)
{
    uint16_t len = cql_get_short(d);
    const uint8_t *p = take(d, len);
    *n = p ? len : 0;
    return p;
}

uint8_t cql_get_inet(bdb_dec *d, uint8_t addr[16], int32_t *port)
{
    uint8_t n = cql_get_u8(d);
    if (n != 4 && n != 16) {
        d->err = 1;
        return 0;
    }
    const uint8_t *p = take(d, n);
    *port = cql_get_int(d);
    if (!p || d->err)
        return 0;
    memcpy(addr, p, n);
    return n;
}

static char *dup_n(const char *s, size_t n)
{
    char *r = malloc(n + 1);
    if (!r)
        return NULL;
    memcpy(r, s, n);
    r[n] = '\0';
    return r;
}

char *cql_get_string_dup(bdb_dec *d)
{
    size_t n;
    const char *s = cql_get_string(d, &n);
    if (d->err)
        return NULL;
    char *r = dup_n(s, n);
    if (!r)
        d->err = 1;
    return r;
}

char **cql_get_string_list(bdb_dec *d, uint16_t *n)
{
    uint16_t cnt = cql_get_short(d);
    *n = 0;
    if (d->err || (size_t)cnt * 2 > bdb_dec_left(d)) { /* each [string] is >= 2 bytes */
        d->err = 1;
        return NULL;
    }
    char **l = calloc(cnt ? cnt : 1, sizeof *l);
    if (!l) {
        d->err = 1;
        return NULL;
    }
    for (uint16_t i = 0; i < cnt; i++) {
        l[i] = cql_get_string_dup(d);
        if (d->err) {
            cql_free_string_list(l, i);
            return NULL;
        }
    }
    *n = cnt;
    return l;
}

void cql_free_string_list(char **l, size_t n)
{
    if (!l)
        return;
    for (size_t i = 0; i < n; i++)
        free(l[i]);
    free(l);
}

/* ================================================================ frames */

int cql_header_decode(const uint8_t p[CQL_HEADER_LEN], cql_header *h, uint32_t max_body)
{
    h->response = (p[0] & CQL_RESPONSE_BIT) != 0;
    h->version = p[0] & 0x7F;
    h->flags = p[1];
    h->stream = (int16_t)cql_get_be16(p + 2);
    h->opcode = p[4];
    h->length = cql_get_be32(p + 5);
    if (h->version < CQL_VERSION_MIN || h->version > CQL_VERSION_MAX)
        return BDB_ERR_CORRUPT;
    if (h->length > max_body || h->length > CQL_FRAME_LIMIT)
        return BDB_ERR_LIMIT;
    return BDB_OK;
}

void cql_header_encode(uint8_t p[CQL_HEADER_LEN], const cql_header *h)
{
    p[0] = (uint8_t)(h->version | (h->response ? CQL_RESPONSE_BIT : 0));
    p[1] = h->flags;
    cql_be16(p + 2, (uint16_t)h->stream);
    p[4] = h->opcode;
    cql_be32(p + 5, h->length);
}

/* ================================================================ requests */

static size_t frame_begin(bdb_buf *b, uint8_t version, uint8_t opcode)
{
    size_t at = b->len;
    cql_header h = {.version = version, .opcode = opcode};
    bdb_buf_reserve(b, CQL_HEADER_LEN);
    cql_header_encode(b->data + b->len, &h);
    b->len += CQL_HEADER_LEN;
    return at;
}

static void frame_end(bdb_buf *b, size_t at)
{
    cql_be32(b->data + at + 5, (uint32_t)(b->len - at - CQL_HEADER_LEN));
}

void cql_msg_startup(bdb_buf *b, uint8_t version, const char *compression)
{
    size_t at = frame_begin(b, version, CQL_OP_STARTUP);
    const char *keys[2] = {"CQL_VERSION", "COMPRESSION"};
    const char *vals[2] = {"3.0.0", compression};
    cql_put_string_map(b, keys, vals, compression ? 2 : 1);
    frame_end(b, at);
}

void cql_msg_options(bdb_buf *b, uint8_t version)
{
    size_t at = frame_begin(b, version, CQL_OP_OPTIONS);
    frame_end(b, at);
}

static void put_params(bdb_buf *b, const cql_query_params *p, int allow_names)
{
    uint8_t flags = 0;
    if (p->nvalues)
        flags |= CQL_QF_VALUES;
    if (p->nvalues && p->names && allow_names)
        flags |= CQL_QF_NAMES;
    if (p->skip_metadata)
        flags |= CQL_QF_SKIP_METADATA;
    if (p->page_size > 0)
        flags |= CQL_QF_PAGE_SIZE;
    if (p->paging_state.len > 0)
        flags |= CQL_QF_PAGING_STATE;
    if (p->serial_consistency)
        flags |= CQL_QF_SERIAL_CONSISTENCY;
    if (p->timestamp_us)
        flags |= CQL_QF_DEFAULT_TIMESTAMP;
    cql_put_short(b, p->consistency);
    cql_put_u8(b, flags);
    if (flags & CQL_QF_VALUES) {
        cql_put_short(b, p->nvalues);
        for (uint16_t i = 0; i < p->nvalues; i++) {
            if (flags & CQL_QF_NAMES)
                cql_put_string(b, p->names[i], strlen(p->names[i]));
            cql_put_bytes(b, p->values[i].p, p->values[i].len);
        }
    }
    if (flags & CQL_QF_PAGE_SIZE)
        cql_put_int(b, p->page_size);
    if (flags & CQL_QF_PAGING_STATE)
        cql_put_bytes(b, p->paging_state.p, p->paging_state.len);
    if (flags & CQL_QF_SERIAL_CONSISTENCY)
        cql_put_short(b, p->serial_consistency);
    if (flags & CQL_QF_DEFAULT_TIMESTAMP)
        cql_put_long(b, p->timestamp_us);
}

void cql_msg_query(bdb_buf *b, uint8_t version, const char *query, size_t qlen,
                   const cql_query_params *p)
{
    size_t at = frame_begin(b, version, CQL_OP_QUERY);
    cql_put_long_string(b, query, qlen);
    put_params(b, p, 1);
    frame_end(b, at);
}

void cql_msg_prepare(bdb_buf *b, uint8_t version, const char *query, size_t qlen)
{
    size_t at = frame_begin(b, version, CQL_OP_PREPARE);
    cql_put_long_string(b, query, qlen);
    frame_end(b, at);
}

void cql_msg_execute(bdb_buf *b, uint8_t version, const uint8_t *id, uint16_t id_len,
                     const cql_query_params *p)
{
    size_t at = frame_begin(b, version, CQL_OP_EXECUTE);
    cql_put_short_bytes(b, id, id_len);
    put_params(b, p, 0);
    frame_end(b, at);
}

void cql_msg_batch(bdb_buf *b, uint8_t version, uint8_t type, const cql_batch_stmt *stmts,
                   uint16_t n, uint16_t consistency, uint16_t serial_consistency,
                   int64_t timestamp_us)
{
    size_t at = frame_begin(b, version, CQL_OP_BATCH);
    cql_put_u8(b, type);
    cql_put_short(b, n);
    for (uint16_t i = 0; i < n; i++) {
        const cql_batch_stmt *s = &stmts[i];
        if (s->query) {
            cql_put_u8(b, 0);
            cql_put_long_string(b, s->query, s->query_len);
        } else {
            cql_put_u8(b, 1);
            cql_put_short_bytes(b, s->id, s->id_len);
        }
        cql_put_short(b, s->nvalues);
        for (uint16_t j = 0; j < s->nvalues; j++)
            cql_put_bytes(b, s->values[j].p, s->values[j].len);
    }
    cql_put_short(b, consistency);
    uint8_t flags = 0;
    if (serial_consistency)
        flags |= CQL_QF_SERIAL_CONSISTENCY;
    if (timestamp_us)
        flags |= CQL_QF_DEFAULT_TIMESTAMP;
    cql_put_u8(b, flags);
    if (serial_consistency)
        cql_put_short(b, serial_consistency);
    if (timestamp_us)
        cql_put_long(b, timestamp_us);
    frame_end(b, at);
}

void cql_msg_auth_response(bdb_buf *b, uint8_t version, const void *token, int32_t len)
{
    size_t at = frame_begin(b, version, CQL_OP_AUTH_RESPONSE);
    cql_put_bytes(b, token, len);
    frame_end(b, at);
}

void cql_msg_register(bdb_buf *b, uint8_t version, const char *const *events, uint16_t n)
{
    size_t at = frame_begin(b, version, CQL_OP_REGISTER);
    cql_put_string_list(b, events, n);
    frame_end(b, at);
}

void cql_sasl_plain(bdb_buf *token, const char *user, const char *password)
{
    bdb_buf_putc(token, 0);
    bdb_buf_puts(token, user);
    bdb_buf_putc(token, 0);
    bdb_buf_puts(token, password);
}
