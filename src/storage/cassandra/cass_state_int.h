/* cass_state_int: what cass_state.c and cass_state_read.c share (private to them):
 * the sink's session context, bind values built in one buffer, and paged reads copied
 * row by row. */
#ifndef BDB_CASS_STATE_INT_H
#define BDB_CASS_STATE_INT_H

#include "common/buf.h"
#include "storage/cassandra/cql/wire/cql_proto.h"
#include "storage/cassandra/cql/cluster/cql_session.h"
#include "storage/sink.h"

#include <stddef.h>
#include <stdint.h>

typedef struct cass_state_ctx {
    cql_session *sess;
    const char *ks;
    int write_cl, read_cl;
} cass_state_ctx;

/* The sink's session (BDB_ERR_IO while it is not connected). */
int cs_ctx(bdb_sink *s, cass_state_ctx *c);

/* Bind values built in one buffer; pointers are taken once it stops growing. */
typedef struct vb {
    bdb_buf b;
    size_t *off;
    int32_t *len;
    int n, cap;
} vb;

void vb_mark(vb *v, size_t start); /* the bytes appended to v->b since start are one value */
void vb_free(vb *v);
void vb_raw(vb *v, const void *p, size_t n);
void vb_text(vb *v, const char *s);
void vb_long(vb *v, int64_t x); /* bigint, timestamp */
void vb_int(vb *v, int32_t x);
void vb_double(vb *v, double x);
cql_bytes *vb_out(const vb *v); /* the values; the caller frees the array */

/* Routing key of (tenant) or (tenant, second component). */
void cs_rkey(bdb_buf *out, const char *tn, const void *p2, size_t n2);

/* Every cell of every row, copied (a retried read restarts from the first page). */
typedef struct rowset {
    bdb_buf arena;
    size_t *off;
    int32_t *len;
    size_t ncells, cap, nrows;
    int32_t ncols;
    int bad;
} rowset;

void rs_reset(void *ud);
int rs_page(void *ud, const cql_response *page);
cql_bytes rs_cell(const rowset *r, size_t row, int32_t col);
void rs_free(rowset *r);
/* Runs a read with v's values (consumed) at the read consistency, every page into
 * out. */
int cs_query(const cass_state_ctx *c, const char *q, vb *v, const bdb_buf *rk, rowset *out);
char *cs_cell_str(cql_bytes b); /* NULL for null; the caller frees */
int64_t cs_cell_ms(cql_bytes b, int64_t dflt);

#endif
