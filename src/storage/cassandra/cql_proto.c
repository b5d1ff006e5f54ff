/* cql_proto: see cql_proto.h. Encoders append to a bdb_buf; decoders read through a
 * sticky-error bdb_dec and never allocate more than the remaining input can justify. */
#include "storage/cassandra/cql_proto.h"

#include "bucketdb/bdb.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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

/* ================================================================ responses */

void cql_type_free(cql_type *t)
{
    if (!t)
        return;
    for (uint16_t i = 0; i < t->n; i++) {
        if (t->sub)
            cql_type_free(t->sub[i]);
        if (t->field_names)
            free(t->field_names[i]);
    }
    free(t->sub);
    free(t->field_names);
    free(t->custom);
    free(t->ks);
    free(t->udt_name);
    free(t);
}

static cql_type *type_decode(bdb_dec *d, int depth)
{
    if (depth > CQL_TYPE_MAX_DEPTH) {
        d->err = 1;
        return NULL;
    }
    uint16_t id = cql_get_short(d);
    if (d->err)
        return NULL;
    cql_type *t = calloc(1, sizeof *t);
    if (!t) {
        d->err = 1;
        return NULL;
    }
    t->id = id;
    uint16_t n = 0;
    int named = 0;
    switch (id) {
    case CQL_TYPE_CUSTOM:
        t->custom = cql_get_string_dup(d);
        break;
    case CQL_TYPE_LIST:
    case CQL_TYPE_SET:
        n = 1;
        break;
    case CQL_TYPE_MAP:
        n = 2;
        break;
    case CQL_TYPE_UDT:
        t->ks = cql_get_string_dup(d);
        t->udt_name = cql_get_string_dup(d);
        n = cql_get_short(d);
        named = 1;
        break;
    case CQL_TYPE_TUPLE:
        n = cql_get_short(d);
        break;
    default:
        if (id > CQL_TYPE_TINYINT || id == 0x000A) /* 0x000A was text in v1, unused since */
            d->err = 1;
        break;
    }
    /* Each field needs at least a 2-byte type id (and a 2-byte name for a UDT). */
    if (!d->err && (size_t)n * (named ? 4 : 2) > bdb_dec_left(d))
        d->err = 1;
    if (!d->err && n) {
        t->sub = calloc(n, sizeof *t->sub);
        if (named)
            t->field_names = calloc(n, sizeof *t->field_names);
        if (!t->sub || (named && !t->field_names))
            d->err = 1;
        else
            t->n = n;
        for (uint16_t i = 0; i < t->n && !d->err; i++) {
            if (named)
                t->field_names[i] = cql_get_string_dup(d);
            t->sub[i] = type_decode(d, depth + 1);
        }
    }
    if (d->err) {
        cql_type_free(t);
        return NULL;
    }
    return t;
}

static void meta_clear(cql_meta *m)
{
    if (m->cols) {
        for (int32_t i = 0; i < m->ncols; i++) {
            free(m->cols[i].ks);
            free(m->cols[i].table);
            free(m->cols[i].name);
            cql_type_free(m->cols[i].type);
        }
        free(m->cols);
    }
    free(m->pk);
    memset(m, 0, sizeof *m);
}

/* Rows metadata, or (prepared != 0) the bind metadata of a PREPARED result, which in
 * v4 carries partition key indexes and never a paging state. */
static int meta_decode(bdb_dec *d, uint8_t version, int prepared, cql_meta *m)
{
    memset(m, 0, sizeof *m);
    m->flags = cql_get_int(d);
    m->ncols = cql_get_int(d);
    if (d->err || m->ncols < 0)
        goto bad;
    if (prepared && version >= 4) {
        m->npk = cql_get_int(d);
        if (d->err || m->npk < 0 || (size_t)m->npk * 2 > bdb_dec_left(d))
            goto bad;
        if (m->npk) {
            m->pk = calloc((size_t)m->npk, sizeof *m->pk);
            if (!m->pk)
                goto bad;
            for (int32_t i = 0; i < m->npk; i++)
                m->pk[i] = cql_get_short(d);
        }
    }
    if ((!prepared || version < 4) && (m->flags & CQL_META_HAS_MORE_PAGES))
        m->paging_state = cql_get_bytes(d);
    if (d->err)
        goto bad;
    if (m->flags & CQL_META_NO_METADATA)
        return BDB_OK;
    char *gks = NULL, *gtable = NULL;
    int global = (m->flags & CQL_META_GLOBAL_TABLES_SPEC) != 0;
    if (global) {
        gks = cql_get_string_dup(d);
        gtable = cql_get_string_dup(d);
    }
    /* A column spec is at least a name (2) and a type id (2), plus ks and table (4). */
    if (d->err || (size_t)m->ncols * (global ? 4 : 8) > bdb_dec_left(d)) {
        free(gks);
        free(gtable);
        goto bad;
    }
    if (m->ncols) {
        m->cols = calloc((size_t)m->ncols, sizeof *m->cols);
        if (!m->cols) {
            free(gks);
            free(gtable);
            goto bad;
        }
    }
    for (int32_t i = 0; i < m->ncols && !d->err; i++) {
        cql_column *c = &m->cols[i];
        if (global) {
            c->ks = dup_n(gks, strlen(gks));
            c->table = dup_n(gtable, strlen(gtable));
            if (!c->ks || !c->table)
                d->err = 1;
        } else {
            c->ks = cql_get_string_dup(d);
            c->table = cql_get_string_dup(d);
        }
        c->name = cql_get_string_dup(d);
        c->type = type_decode(d, 0);
    }
    free(gks);
    free(gtable);
    if (d->err)
        goto bad;
    return BDB_OK;
bad:
    d->err = 1;
    meta_clear(m);
    return BDB_ERR_CORRUPT;
}

void cql_result_clear(cql_result *r)
{
    meta_clear(&r->meta);
    meta_clear(&r->result_meta);
    free(r->cells);
    free(r->keyspace);
    free(r->change_type);
    free(r->target);
    free(r->name);
    cql_free_string_list(r->arg_types, r->narg_types);
    memset(r, 0, sizeof *r);
}

/* <change_type><target><options> of a schema change, shared by RESULT and EVENT. */
static void schema_change_decode(bdb_dec *d, cql_result *r)
{
    r->change_type = cql_get_string_dup(d);
    r->target = cql_get_string_dup(d);
    if (d->err)
        return;
    r->keyspace = cql_get_string_dup(d);
    if (!strcmp(r->target, "KEYSPACE"))
        return;
    r->name = cql_get_string_dup(d);
    if (!strcmp(r->target, "FUNCTION") || !strcmp(r->target, "AGGREGATE"))
        r->arg_types = cql_get_string_list(d, &r->narg_types);
}

int cql_result_decode(bdb_dec *d, uint8_t version, cql_result *r)
{
    memset(r, 0, sizeof *r);
    r->kind = cql_get_int(d);
    if (d->err)
        return BDB_ERR_CORRUPT;
    switch (r->kind) {
    case CQL_RESULT_VOID:
        break;
    case CQL_RESULT_ROWS: {
        if (meta_decode(d, version, 0, &r->meta) != BDB_OK)
            break;
        r->nrows = cql_get_int(d);
        if (d->err || r->nrows < 0) {
            d->err = 1;
            break;
        }
        /* Every cell is at least its 4-byte length. */
        uint64_t ncells = (uint64_t)r->nrows * (uint64_t)r->meta.ncols;
        if (ncells > bdb_dec_left(d) / 4) {
            d->err = 1;
            break;
        }
        if (ncells) {
            r->cells = malloc((size_t)ncells * sizeof *r->cells);
            if (!r->cells) {
                d->err = 1;
                break;
            }
            for (uint64_t i = 0; i < ncells && !d->err; i++)
                r->cells[i] = cql_get_bytes(d);
        }
        break;
    }
    case CQL_RESULT_SET_KEYSPACE:
        r->keyspace = cql_get_string_dup(d);
        break;
    case CQL_RESULT_PREPARED: {
        uint16_t n;
        const uint8_t *id = cql_get_short_bytes(d, &n);
        r->prepared_id.p = id;
        r->prepared_id.len = n;
        if (d->err || meta_decode(d, version, 1, &r->meta) != BDB_OK)
            break;
        /* The result metadata may be absent from very old servers: tolerate nothing
         * left, but a present one must be well-formed. */
        if (bdb_dec_left(d) > 0)
            meta_decode(d, version, 0, &r->result_meta);
        break;
    }
    case CQL_RESULT_SCHEMA_CHANGE:
        schema_change_decode(d, r);
        break;
    default:
        d->err = 1;
        break;
    }
    if (d->err) {
        cql_result_clear(r);
        return BDB_ERR_CORRUPT;
    }
    return BDB_OK;
}

void cql_error_clear(cql_error *e)
{
    free(e->message);
    free(e->write_type);
    free(e->ks);
    free(e->table);
    memset(e, 0, sizeof *e);
}

int cql_error_decode(bdb_dec *d, cql_error *e)
{
    memset(e, 0, sizeof *e);
    e->code = cql_get_int(d);
    e->message = cql_get_string_dup(d);
    if (d->err)
        goto bad;
    switch (e->code) {
    case CQL_ERR_UNAVAILABLE:
        e->consistency = cql_get_short(d);
        e->required = cql_get_int(d);
        e->alive = cql_get_int(d);
        break;
    case CQL_ERR_WRITE_TIMEOUT:
        e->consistency = cql_get_short(d);
        e->received = cql_get_int(d);
        e->blockfor = cql_get_int(d);
        e->write_type = cql_get_string_dup(d);
        break;
    case CQL_ERR_READ_TIMEOUT:
        e->consistency = cql_get_short(d);
        e->received = cql_get_int(d);
        e->blockfor = cql_get_int(d);
        e->data_present = cql_get_u8(d);
        break;
    case CQL_ERR_READ_FAILURE:
        e->consistency = cql_get_short(d);
        e->received = cql_get_int(d);
        e->blockfor = cql_get_int(d);
        e->numfailures = cql_get_int(d);
        e->data_present = cql_get_u8(d);
        break;
    case CQL_ERR_WRITE_FAILURE:
        e->consistency = cql_get_short(d);
        e->received = cql_get_int(d);
        e->blockfor = cql_get_int(d);
        e->numfailures = cql_get_int(d);
        e->write_type = cql_get_string_dup(d);
        break;
    case CQL_ERR_FUNCTION_FAILURE:
        e->ks = cql_get_string_dup(d);
        e->table = cql_get_string_dup(d);
        {
            uint16_t n;
            char **args = cql_get_string_list(d, &n);
            cql_free_string_list(args, n);
        }
        break;
    case CQL_ERR_ALREADY_EXISTS:
        e->ks = cql_get_string_dup(d);
        e->table = cql_get_string_dup(d);
        break;
    case CQL_ERR_UNPREPARED: {
        uint16_t n;
        const uint8_t *id = cql_get_short_bytes(d, &n);
        e->unprepared_id.p = id;
        e->unprepared_id.len = id ? n : 0;
        break;
    }
    default:
        break;
    }
    if (d->err)
        goto bad;
    return BDB_OK;
bad:
    cql_error_clear(e);
    d->err = 1;
    return BDB_ERR_CORRUPT;
}

void cql_response_free(cql_response *r)
{
    if (!r)
        return;
    cql_free_string_list(r->warnings, r->nwarnings);
    cql_error_clear(&r->error);
    free(r->authenticator);
    for (uint16_t i = 0; i < r->nsup; i++) {
        free(r->sup_keys ? r->sup_keys[i] : NULL);
        if (r->sup_vals)
            cql_free_string_list(r->sup_vals[i], r->sup_nvals[i]);
    }
    free(r->sup_keys);
    free(r->sup_vals);
    free(r->sup_nvals);
    cql_result_clear(&r->result);
    free(r->event.type);
    free(r->event.change);
    cql_result_clear(&r->event.schema);
    free(r->body);
    free(r);
}

static void supported_decode(bdb_dec *d, cql_response *r)
{
    uint16_t n = cql_get_short(d);
    if (d->err || (size_t)n * 4 > bdb_dec_left(d)) {
        d->err = 1;
        return;
    }
    if (!n)
        return;
    r->sup_keys = calloc(n, sizeof *r->sup_keys);
    r->sup_vals = calloc(n, sizeof *r->sup_vals);
    r->sup_nvals = calloc(n, sizeof *r->sup_nvals);
    if (!r->sup_keys || !r->sup_vals || !r->sup_nvals) {
        d->err = 1;
        return;
    }
    r->nsup = n;
    for (uint16_t i = 0; i < n && !d->err; i++) {
        r->sup_keys[i] = cql_get_string_dup(d);
        r->sup_vals[i] = cql_get_string_list(d, &r->sup_nvals[i]);
    }
}

static void event_decode(bdb_dec *d, cql_event *e)
{
    e->type = cql_get_string_dup(d);
    if (d->err)
        return;
    if (!strcmp(e->type, "TOPOLOGY_CHANGE") || !strcmp(e->type, "STATUS_CHANGE")) {
        e->change = cql_get_string_dup(d);
        e->addr_len = cql_get_inet(d, e->addr, &e->port);
    } else if (!strcmp(e->type, "SCHEMA_CHANGE")) {
        schema_change_decode(d, &e->schema);
    }
}

int cql_response_decode(const cql_header *h, uint8_t *body, size_t len, cql_response **out)
{
    *out = NULL;
    cql_response *r = calloc(1, sizeof *r);
    if (!r) {
        free(body);
        return BDB_ERR_NOMEM;
    }
    r->h = *h;
    r->body = body;
    r->body_len = len;
    if (h->flags & CQL_FLAG_COMPRESSION) {
        cql_response_free(r);
        return BDB_ERR_INVALID;
    }
    bdb_dec d;
    bdb_dec_init(&d, body ? body : (const uint8_t *)"", body ? len : 0); /* never NULL + 0 */
    if (h->flags & CQL_FLAG_TRACING) {
        const uint8_t *id = cql_get_uuid(&d);
        if (id) {
            memcpy(r->tracing_id, id, 16);
            r->has_tracing = 1;
        }
    }
    if (h->version >= 4 && (h->flags & CQL_FLAG_WARNING))
        r->warnings = cql_get_string_list(&d, &r->nwarnings);
    if (h->version >= 4 && (h->flags & CQL_FLAG_CUSTOM_PAYLOAD)) {
        /* [bytes map]: skipped, this client has no custom query handler. */
        uint16_t n = cql_get_short(&d);
        for (uint16_t i = 0; i < n && !d.err; i++) {
            size_t kl;
            cql_get_string(&d, &kl);
            cql_get_bytes(&d);
        }
    }
    if (d.err) {
        cql_response_free(r);
        return BDB_ERR_CORRUPT;
    }
    switch (h->opcode) {
    case CQL_OP_ERROR:
        cql_error_decode(&d, &r->error);
        break;
    case CQL_OP_READY:
        break;
    case CQL_OP_AUTHENTICATE:
        r->authenticator = cql_get_string_dup(&d);
        break;
    case CQL_OP_SUPPORTED:
        supported_decode(&d, r);
        break;
    case CQL_OP_RESULT:
        cql_result_decode(&d, h->version, &r->result);
        break;
    case CQL_OP_EVENT:
        event_decode(&d, &r->event);
        break;
    case CQL_OP_AUTH_CHALLENGE:
    case CQL_OP_AUTH_SUCCESS:
        r->token = cql_get_bytes(&d);
        break;
    default:
        d.err = 1; /* a request opcode or an unknown one is not a response */
        break;
    }
    if (d.err) {
        cql_response_free(r);
        return BDB_ERR_CORRUPT;
    }
    *out = r;
    return BDB_OK;
}

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
