/* Fuzzes the CQL response decoders: the input is read as a stream of response
 * frames (header + body, as the connection's reader thread sees them), and also as a
 * bare RESULT body in protocol v3 and v4 and as a bare ERROR body. Every decoded row
 * is formatted cell by cell through the value decoders of its column types. Nothing
 * may crash, leak or read out of bounds. */
#include "bucketdb/bdb.h"
#include "storage/cassandra/cql/wire/cql_proto.h"
#include "storage/cassandra/cql/wire/cql_value.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void format_rows(const cql_result *r)
{
    if (r->kind != CQL_RESULT_ROWS || !r->meta.cols)
        return;
    bdb_buf out;
    bdb_buf_init(&out);
    for (int32_t row = 0; row < r->nrows; row++)
        for (int32_t c = 0; c < r->meta.ncols; c++) {
            bdb_buf_reset(&out);
            cql_value_format(&out, r->meta.cols[c].type,
                             r->cells[(size_t)row * (size_t)r->meta.ncols + (size_t)c]);
        }
    bdb_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* 1. A stream of frames. */
    size_t off = 0;
    while (size - off >= CQL_HEADER_LEN) {
        cql_header h;
        if (cql_header_decode(data + off, &h, 1 << 20) != BDB_OK)
            break;
        if (size - off - CQL_HEADER_LEN < h.length)
            break;
        uint8_t *body = NULL;
        if (h.length) {
            body = malloc(h.length); /* exact size: ASan sees any overread */
            memcpy(body, data + off + CQL_HEADER_LEN, h.length);
        }
        off += CQL_HEADER_LEN + h.length;
        cql_response *r = NULL;
        if (cql_response_decode(&h, body, h.length, &r) == BDB_OK) {
            if (r->h.opcode == CQL_OP_RESULT)
                format_rows(&r->result);
            cql_response_free(r);
        }
    }
    /* 2. A bare RESULT body in both versions, and a bare ERROR body. */
    uint8_t *copy = malloc(size ? size : 1);
    memcpy(copy, data, size);
    for (uint8_t v = 3; v <= 4; v++) {
        bdb_dec d;
        bdb_dec_init(&d, copy, size);
        cql_result r;
        if (cql_result_decode(&d, v, &r) == BDB_OK) {
            format_rows(&r);
            cql_result_clear(&r);
        }
    }
    bdb_dec d;
    bdb_dec_init(&d, copy, size);
    cql_error e;
    if (cql_error_decode(&d, &e) == BDB_OK)
        cql_error_clear(&e);
    free(copy);
    return 0;
}
