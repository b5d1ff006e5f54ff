/* cql_response: decoding what a Cassandra node answers (see cql_proto.h): column
 * types, result metadata, RESULT bodies (rows, prepared, schema changes), ERROR bodies
 * with their extra fields, SUPPORTED and EVENT. Like the primitives in cql_proto.c,
 * a decoder never allocates more than the remaining input can justify, and a body it
 * cannot read whole is BDB_ERR_CORRUPT, never a partial result. */
#include "storage/cassandra/cql/wire/cql_proto.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>

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
            c->ks = strdup(gks);
            c->table = strdup(gtable);
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
