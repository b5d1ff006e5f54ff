/* cql_value: see cql_value.h. */
#include "storage/cassandra/cql/wire/cql_value.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ================================================================ encode / decode */

void cql_enc_int(bdb_buf *b, int32_t v)
{
    cql_put_int(b, v);
}

void cql_enc_bigint(bdb_buf *b, int64_t v)
{
    cql_put_long(b, v);
}

void cql_enc_double(bdb_buf *b, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    cql_put_long(b, (int64_t)bits);
}

void cql_enc_boolean(bdb_buf *b, int v)
{
    cql_put_u8(b, v ? 1 : 0);
}

void cql_enc_uuid(bdb_buf *b, const uint8_t u[16])
{
    bdb_buf_append(b, u, 16);
}

void cql_enc_text_list(bdb_buf *b, const char *const *items, int32_t n)
{
    cql_put_int(b, n);
    for (int32_t i = 0; i < n; i++)
        cql_put_bytes(b, items[i], (int32_t)strlen(items[i]));
}

void cql_enc_text_map(bdb_buf *b, const char *const *keys, const char *const *vals, int32_t n)
{
    cql_put_int(b, n);
    for (int32_t i = 0; i < n; i++) {
        cql_put_bytes(b, keys[i], (int32_t)strlen(keys[i]));
        cql_put_bytes(b, vals[i], (int32_t)strlen(vals[i]));
    }
}

static int fixed(cql_bytes v, int32_t n)
{
    if (v.len < 0)
        return BDB_ERR_NOTFOUND;
    return v.len == n ? BDB_OK : BDB_ERR_CORRUPT;
}

int cql_dec_int(cql_bytes v, int32_t *out)
{
    int rc = fixed(v, 4);
    if (rc == BDB_OK)
        *out = (int32_t)cql_get_be32(v.p);
    return rc;
}

int cql_dec_bigint(cql_bytes v, int64_t *out)
{
    int rc = fixed(v, 8);
    if (rc == BDB_OK)
        *out = (int64_t)cql_get_be64(v.p);
    return rc;
}

int cql_dec_double(cql_bytes v, double *out)
{
    int rc = fixed(v, 8);
    if (rc == BDB_OK) {
        uint64_t bits = cql_get_be64(v.p);
        memcpy(out, &bits, 8);
    }
    return rc;
}

int cql_dec_boolean(cql_bytes v, int *out)
{
    int rc = fixed(v, 1);
    if (rc == BDB_OK)
        *out = v.p[0] != 0;
    return rc;
}

int cql_dec_uuid(cql_bytes v, uint8_t out[16])
{
    int rc = fixed(v, 16);
    if (rc == BDB_OK)
        memcpy(out, v.p, 16);
    return rc;
}

int cql_coll_begin(cql_coll_iter *it, cql_bytes v, int is_map)
{
    if (v.len < 0)
        return BDB_ERR_NOTFOUND;
    bdb_dec_init(&it->d, v.p ? v.p : (const uint8_t *)"", v.p ? (size_t)v.len : 0);
    int32_t n = cql_get_int(&it->d);
    int64_t items = (int64_t)n * (is_map ? 2 : 1);
    /* Every item is at least its 4-byte length. */
    if (it->d.err || n < 0 || items > (int64_t)(bdb_dec_left(&it->d) / 4))
        return BDB_ERR_CORRUPT;
    it->left = items;
    return n;
}

int cql_coll_next(cql_coll_iter *it, cql_bytes *elem)
{
    if (it->left <= 0) /* trailing bytes after the last item: malformed */
        return bdb_dec_left(&it->d) == 0 ? 0 : BDB_ERR_CORRUPT;
    *elem = cql_get_bytes(&it->d);
    if (it->d.err)
        return BDB_ERR_CORRUPT;
    it->left--;
    return 1;
}

/* ================================================================ uuid */

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int cql_uuid_parse(const char *s, uint8_t out[16])
{
    int j = 0;
    for (int i = 0; i < 36; i++) {
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (s[i] != '-')
                return BDB_ERR_INVALID;
            continue;
        }
        int h = hexval((unsigned char)s[i]);
        if (h < 0)
            return BDB_ERR_INVALID;
        if (j % 2 == 0)
            out[j / 2] = (uint8_t)(h << 4);
        else
            out[j / 2] |= (uint8_t)h;
        j++;
    }
    return s[36] == '\0' ? BDB_OK : BDB_ERR_INVALID;
}

void cql_uuid_format(const uint8_t u[16], char out[37])
{
    static const char hx[] = "0123456789abcdef";
    int o = 0;
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[o++] = '-';
        out[o++] = hx[u[i] >> 4];
        out[o++] = hx[u[i] & 15];
    }
    out[o] = '\0';
}

/* ================================================================ format */

static void put_quoted(bdb_buf *out, const uint8_t *p, int32_t n)
{
    bdb_buf_putc(out, '\'');
    for (int32_t i = 0; i < n; i++) {
        if (p[i] == '\'')
            bdb_buf_putc(out, '\'');
        bdb_buf_putc(out, p[i]);
    }
    bdb_buf_putc(out, '\'');
}

static void put_double(bdb_buf *out, double d)
{
    if (isnan(d))
        bdb_buf_puts(out, "NaN");
    else if (isinf(d))
        bdb_buf_puts(out, d > 0 ? "Infinity" : "-Infinity");
    else
        bdb_buf_double(out, d);
}

/* Two's complement big-endian integer of 1..8 bytes. */
static int64_t be_signed(const uint8_t *p, int32_t n)
{
    uint64_t v = (p[0] & 0x80) ? UINT64_MAX : 0;
    for (int32_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return (int64_t)v;
}

static void put_hex(bdb_buf *out, const uint8_t *p, int32_t n)
{
    static const char hx[] = "0123456789abcdef";
    bdb_buf_puts(out, "0x");
    for (int32_t i = 0; i < n; i++) {
        bdb_buf_putc(out, (uint8_t)hx[p[i] >> 4]);
        bdb_buf_putc(out, (uint8_t)hx[p[i] & 15]);
    }
}

static int format_rec(bdb_buf *out, const cql_type *t, cql_bytes v, int nested, int depth)
{
    if (v.len < 0) {
        bdb_buf_puts(out, "null");
        return BDB_OK;
    }
    if (!t || depth > CQL_TYPE_MAX_DEPTH)
        return BDB_ERR_CORRUPT;
    const uint8_t *p = v.p;
    int32_t n = v.len;
    /* Most non-string types allow an "empty" value, distinct from null. */
    if (n == 0 && t->id != CQL_TYPE_ASCII && t->id != CQL_TYPE_VARCHAR && t->id != CQL_TYPE_BLOB &&
        t->id != CQL_TYPE_CUSTOM) {
        if (nested)
            bdb_buf_puts(out, "''");
        return BDB_OK;
    }
    switch (t->id) {
    case CQL_TYPE_ASCII:
    case CQL_TYPE_VARCHAR:
        if (nested)
            put_quoted(out, p, n);
        else
            bdb_buf_append(out, p, (size_t)n);
        return BDB_OK;
    case CQL_TYPE_BLOB:
    case CQL_TYPE_CUSTOM:
        put_hex(out, p, n);
        return BDB_OK;
    case CQL_TYPE_BOOLEAN:
        if (n != 1)
            return BDB_ERR_CORRUPT;
        bdb_buf_puts(out, p[0] ? "true" : "false");
        return BDB_OK;
    case CQL_TYPE_TINYINT:
    case CQL_TYPE_SMALLINT:
    case CQL_TYPE_INT:
    case CQL_TYPE_BIGINT:
    case CQL_TYPE_COUNTER: {
        int32_t want = t->id == CQL_TYPE_TINYINT    ? 1
                       : t->id == CQL_TYPE_SMALLINT ? 2
                       : t->id == CQL_TYPE_INT      ? 4
                                                    : 8;
        if (n != want)
            return BDB_ERR_CORRUPT;
        bdb_buf_printf(out, "%lld", (long long)be_signed(p, n));
        return BDB_OK;
    }
    case CQL_TYPE_VARINT:
        if (n > 8) {
            put_hex(out, p, n);
            return BDB_OK;
        }
        bdb_buf_printf(out, "%lld", (long long)be_signed(p, n));
        return BDB_OK;
    case CQL_TYPE_DECIMAL: {
        if (n < 5)
            return BDB_ERR_CORRUPT;
        int32_t scale = (int32_t)cql_get_be32(p);
        if (n - 4 > 8) {
            put_hex(out, p + 4, n - 4);
            bdb_buf_printf(out, "E%lld", -(long long)scale); /* INT32_MIN has no int negation */
            return BDB_OK;
        }
        long long unscaled = (long long)be_signed(p + 4, n - 4);
        bdb_buf_printf(out, "%lldE%lld", unscaled, -(long long)scale);
        return BDB_OK;
    }
    case CQL_TYPE_DOUBLE: {
        double d;
        if (cql_dec_double(v, &d) != BDB_OK)
            return BDB_ERR_CORRUPT;
        put_double(out, d);
        return BDB_OK;
    }
    case CQL_TYPE_FLOAT: {
        if (n != 4)
            return BDB_ERR_CORRUPT;
        uint32_t bits = cql_get_be32(p);
        float f;
        memcpy(&f, &bits, 4);
        put_double(out, (double)f);
        return BDB_OK;
    }
    case CQL_TYPE_TIMESTAMP: {
        int64_t ms;
        if (cql_dec_bigint(v, &ms) != BDB_OK)
            return BDB_ERR_CORRUPT;
        char tmp[48];
        bdb_format_time_ms(ms, tmp, sizeof tmp);
        if (nested)
            bdb_buf_printf(out, "'%s'", tmp);
        else
            bdb_buf_puts(out, tmp);
        return BDB_OK;
    }
    case CQL_TYPE_UUID:
    case CQL_TYPE_TIMEUUID: {
        if (n != 16)
            return BDB_ERR_CORRUPT;
        char tmp[37];
        cql_uuid_format(p, tmp);
        bdb_buf_puts(out, tmp);
        return BDB_OK;
    }
    case CQL_TYPE_INET: {
        char tmp[INET6_ADDRSTRLEN];
        if ((n != 4 && n != 16) || !inet_ntop(n == 4 ? AF_INET : AF_INET6, p, tmp, sizeof tmp))
            return BDB_ERR_CORRUPT;
        bdb_buf_puts(out, tmp);
        return BDB_OK;
    }
    case CQL_TYPE_DATE: {
        if (n != 4)
            return BDB_ERR_CORRUPT;
        int64_t days = (int64_t)cql_get_be32(p) - ((int64_t)1 << 31);
        char tmp[48];
        bdb_format_time_ms(days * 86400000LL, tmp, sizeof tmp);
        tmp[strcspn(tmp, "T")] = '\0';
        bdb_buf_puts(out, tmp);
        return BDB_OK;
    }
    case CQL_TYPE_TIME: {
        int64_t ns;
        if (cql_dec_bigint(v, &ns) != BDB_OK || ns < 0)
            return BDB_ERR_CORRUPT;
        bdb_buf_printf(out, "%02lld:%02lld:%02lld.%09lld", (long long)(ns / 3600000000000LL),
                       (long long)(ns / 60000000000LL % 60), (long long)(ns / 1000000000LL % 60),
                       (long long)(ns % 1000000000LL));
        return BDB_OK;
    }
    case CQL_TYPE_LIST:
    case CQL_TYPE_SET:
    case CQL_TYPE_MAP: {
        int is_map = t->id == CQL_TYPE_MAP;
        if (t->n != (is_map ? 2 : 1))
            return BDB_ERR_CORRUPT;
        cql_coll_iter it;
        int cnt = cql_coll_begin(&it, v, is_map);
        if (cnt < 0)
            return BDB_ERR_CORRUPT;
        bdb_buf_putc(out, t->id == CQL_TYPE_LIST ? '[' : '{');
        cql_bytes e;
        int rc, i = 0;
        while ((rc = cql_coll_next(&it, &e)) == 1) {
            if (i > 0)
                bdb_buf_puts(out, is_map && (i % 2) ? ": " : ", ");
            int sub = is_map ? (i % 2) : 0;
            if (format_rec(out, t->sub[sub], e, 1, depth + 1) != BDB_OK)
                return BDB_ERR_CORRUPT;
            i++;
        }
        if (rc < 0)
            return BDB_ERR_CORRUPT;
        bdb_buf_putc(out, t->id == CQL_TYPE_LIST ? ']' : '}');
        return BDB_OK;
    }
    case CQL_TYPE_TUPLE:
    case CQL_TYPE_UDT: {
        bdb_dec d;
        bdb_dec_init(&d, p ? p : (const uint8_t *)"", p ? (size_t)n : 0);
        int udt = t->id == CQL_TYPE_UDT;
        bdb_buf_putc(out, udt ? '{' : '(');
        for (uint16_t i = 0; i < t->n && bdb_dec_left(&d) > 0; i++) {
            cql_bytes e = cql_get_bytes(&d);
            if (d.err)
                return BDB_ERR_CORRUPT;
            if (i)
                bdb_buf_puts(out, ", ");
            if (udt)
                bdb_buf_printf(out, "%s: ", t->field_names[i] ? t->field_names[i] : "");
            if (format_rec(out, t->sub[i], e, 1, depth + 1) != BDB_OK)
                return BDB_ERR_CORRUPT;
        }
        bdb_buf_putc(out, udt ? '}' : ')');
        return BDB_OK;
    }
    default:
        put_hex(out, p, n);
        return BDB_OK;
    }
}

int cql_value_format(bdb_buf *out, const cql_type *t, cql_bytes v)
{
    return format_rec(out, t, v, 0, 0);
}

/* ================================================================ parse */

typedef struct pcur {
    const char *s, *end;
    char *err;
    size_t errlen;
} pcur;

static int perr(pcur *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(pcur *c, const char *fmt, ...)
{
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return BDB_ERR_INVALID;
}

static void skip_ws(pcur *c)
{
    while (c->s < c->end && isspace((unsigned char)*c->s))
        c->s++;
}

/* A NUL-terminated copy of [p, p + n) in tmp (grown as needed). */
static const char *cstr(bdb_buf *tmp, const char *p, size_t n)
{
    bdb_buf_reset(tmp);
    bdb_buf_append(tmp, p, n);
    bdb_buf_putc(tmp, 0);
    return (const char *)tmp->data;
}

static int parse_int(pcur *c, const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *e;
    errno = 0;
    long long v = strtoll(s, &e, 10);
    if (e == s || *e || errno == ERANGE || v < lo || v > hi)
        return perr(c, "'%s' is not an integer in [%lld, %lld]", s, (long long)lo, (long long)hi);
    *out = v;
    return BDB_OK;
}

static int parse_scalar(bdb_buf *out, const cql_type *t, const char *s, size_t n, pcur *c)
{
    bdb_buf tmp;
    bdb_buf_init(&tmp);
    int rc = BDB_OK;
    const char *z = cstr(&tmp, s, n);
    switch (t->id) {
    case CQL_TYPE_ASCII:
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] > 127) {
                rc = perr(c, "ascii value has a byte above 127");
                break;
            }
        if (rc == BDB_OK)
            bdb_buf_append(out, s, n);
        break;
    case CQL_TYPE_VARCHAR:
        bdb_buf_append(out, s, n);
        break;
    case CQL_TYPE_TINYINT:
    case CQL_TYPE_SMALLINT:
    case CQL_TYPE_INT: {
        int64_t v;
        int64_t lim = t->id == CQL_TYPE_TINYINT    ? INT8_MAX
                      : t->id == CQL_TYPE_SMALLINT ? INT16_MAX
                                                   : INT32_MAX;
        rc = parse_int(c, z, -lim - 1, lim, &v);
        if (rc == BDB_OK) {
            if (t->id == CQL_TYPE_TINYINT)
                cql_put_u8(out, (uint8_t)v);
            else if (t->id == CQL_TYPE_SMALLINT)
                cql_put_short(out, (uint16_t)v);
            else
                cql_enc_int(out, (int32_t)v);
        }
        break;
    }
    case CQL_TYPE_BIGINT:
    case CQL_TYPE_COUNTER:
    case CQL_TYPE_VARINT: {
        int64_t v;
        rc = parse_int(c, z, INT64_MIN, INT64_MAX, &v);
        if (rc == BDB_OK && t->id != CQL_TYPE_VARINT) {
            cql_enc_bigint(out, v);
        } else if (rc == BDB_OK) { /* shortest two's complement */
            uint8_t be[8];
            cql_be64(be, (uint64_t)v);
            int i = 0;
            while (i < 7 &&
                   ((be[i] == 0 && !(be[i + 1] & 0x80)) || (be[i] == 0xFF && (be[i + 1] & 0x80))))
                i++;
            bdb_buf_append(out, be + i, (size_t)(8 - i));
        }
        break;
    }
    case CQL_TYPE_TIMESTAMP: {
        int64_t ms;
        char zoned[64];
        /* A date and time without a zone is taken as UTC. */
        snprintf(zoned, sizeof zoned, "%sZ", z);
        if (bdb_parse_time_ms(z, &ms) != BDB_OK &&
            (n + 2 > sizeof zoned || bdb_parse_time_ms(zoned, &ms) != BDB_OK))
            rc = perr(c, "'%s' is not a timestamp (Unix ms or RFC 3339)", z);
        else
            cql_enc_bigint(out, ms);
        break;
    }
    case CQL_TYPE_DOUBLE:
    case CQL_TYPE_FLOAT: {
        double d;
        char *e;
        if (!strcmp(z, "NaN"))
            d = NAN;
        else if (!strcmp(z, "Infinity"))
            d = INFINITY;
        else if (!strcmp(z, "-Infinity"))
            d = -INFINITY;
        else {
            errno = 0;
            d = strtod(z, &e);
            if (e == z || *e || errno == ERANGE) {
                rc = perr(c, "'%s' is not a number", z);
                break;
            }
        }
        if (t->id == CQL_TYPE_DOUBLE) {
            cql_enc_double(out, d);
        } else {
            float f = (float)d;
            uint32_t bits;
            memcpy(&bits, &f, 4);
            cql_put_int(out, (int32_t)bits);
        }
        break;
    }
    case CQL_TYPE_BOOLEAN:
        if (!strcasecmp(z, "true") || !strcmp(z, "1"))
            cql_enc_boolean(out, 1);
        else if (!strcasecmp(z, "false") || !strcmp(z, "0"))
            cql_enc_boolean(out, 0);
        else
            rc = perr(c, "'%s' is not a boolean (true or false)", z);
        break;
    case CQL_TYPE_BLOB:
    case CQL_TYPE_CUSTOM:
        if (n < 2 || z[0] != '0' || (z[1] != 'x' && z[1] != 'X') || n % 2) {
            rc = perr(c, "blob must be written 0x followed by an even number of hex digits");
            break;
        }
        for (size_t i = 2; i < n; i += 2) {
            int h = hexval((unsigned char)z[i]), l = hexval((unsigned char)z[i + 1]);
            if (h < 0 || l < 0) {
                rc = perr(c, "blob has a non-hex digit");
                break;
            }
            bdb_buf_putc(out, (uint8_t)(h << 4 | l));
        }
        break;
    case CQL_TYPE_UUID:
    case CQL_TYPE_TIMEUUID: {
        uint8_t u[16];
        if (cql_uuid_parse(z, u) != BDB_OK)
            rc = perr(c, "'%s' is not a uuid", z);
        else if (t->id == CQL_TYPE_TIMEUUID && (u[6] >> 4) != 1)
            rc = perr(c, "'%s' is not a version 1 (time) uuid", z);
        else
            cql_enc_uuid(out, u);
        break;
    }
    case CQL_TYPE_INET: {
        uint8_t a[16];
        if (inet_pton(AF_INET, z, a) == 1)
            bdb_buf_append(out, a, 4);
        else if (inet_pton(AF_INET6, z, a) == 1)
            bdb_buf_append(out, a, 16);
        else
            rc = perr(c, "'%s' is not an IP address", z);
        break;
    }
    default: {
        bdb_buf name;
        bdb_buf_init(&name);
        cql_type_name(&name, t);
        bdb_buf_putc(&name, 0);
        rc = perr(c, "cannot parse a value of type %s", (const char *)name.data);
        bdb_buf_free(&name);
        break;
    }
    }
    bdb_buf_free(&tmp);
    return rc;
}

static int parse_rec(bdb_buf *out, const cql_type *t, pcur *c, int depth);

/* One element inside a collection literal: a quoted string ('' escapes a quote), a
 * nested collection, or a bare token up to the next delimiter. */
static int parse_elem(bdb_buf *out, const cql_type *t, pcur *c, int depth)
{
    skip_ws(c);
    if (!t)
        return perr(c, "unknown element type");
    if (t->id == CQL_TYPE_LIST || t->id == CQL_TYPE_SET || t->id == CQL_TYPE_MAP)
        return parse_rec(out, t, c, depth + 1);
    bdb_buf tok;
    bdb_buf_init(&tok);
    int rc = BDB_OK;
    if (c->s < c->end && *c->s == '\'') {
        c->s++;
        for (;;) {
            if (c->s >= c->end) {
                rc = perr(c, "unterminated quoted string");
                break;
            }
            if (*c->s == '\'') {
                if (c->s + 1 < c->end && c->s[1] == '\'') {
                    bdb_buf_putc(&tok, '\'');
                    c->s += 2;
                    continue;
                }
                c->s++;
                break;
            }
            bdb_buf_putc(&tok, (uint8_t)*c->s++);
        }
    } else {
        const char *b = c->s;
        while (c->s < c->end && !strchr(",:]})", *c->s))
            c->s++;
        const char *e = c->s;
        while (e > b && isspace((unsigned char)e[-1]))
            e--;
        bdb_buf_append(&tok, b, (size_t)(e - b));
    }
    if (rc == BDB_OK)
        rc = parse_scalar(out, t, tok.data ? (const char *)tok.data : "", tok.len, c);
    bdb_buf_free(&tok);
    return rc;
}

/* A collection literal: [a, b] for a list, {a, b} for a set, {k: v} for a map. The
 * element count is patched in once known. */
static int parse_rec(bdb_buf *out, const cql_type *t, pcur *c, int depth)
{
    if (depth > CQL_TYPE_MAX_DEPTH)
        return perr(c, "collection nested too deeply");
    int is_map = t->id == CQL_TYPE_MAP;
    char open = t->id == CQL_TYPE_LIST ? '[' : '{', close = t->id == CQL_TYPE_LIST ? ']' : '}';
    if (t->n != (is_map ? 2 : 1))
        return perr(c, "malformed collection type");
    skip_ws(c);
    if (c->s >= c->end || *c->s != open)
        return perr(c, "expected '%c' to start a %s", open,
                    is_map                   ? "map"
                    : t->id == CQL_TYPE_LIST ? "list"
                                             : "set");
    c->s++;
    size_t count_at = out->len;
    cql_put_int(out, 0);
    int32_t count = 0;
    bdb_buf elem;
    bdb_buf_init(&elem);
    int rc = BDB_OK;
    skip_ws(c);
    if (c->s < c->end && *c->s == close) {
        c->s++;
        goto done;
    }
    for (;;) {
        for (int k = 0; k < (is_map ? 2 : 1); k++) {
            bdb_buf_reset(&elem);
            rc = parse_elem(&elem, t->sub[k], c, depth);
            if (rc != BDB_OK)
                goto done;
            cql_put_bytes(out, elem.data, (int32_t)elem.len);
            skip_ws(c);
            if (is_map && k == 0) {
                if (c->s >= c->end || *c->s != ':') {
                    rc = perr(c, "expected ':' between a map key and its value");
                    goto done;
                }
                c->s++;
            }
        }
        count++;
        if (c->s < c->end && *c->s == ',') {
            c->s++;
            continue;
        }
        if (c->s < c->end && *c->s == close) {
            c->s++;
            break;
        }
        rc = perr(c, "expected ',' or '%c' in a collection", close);
        goto done;
    }
done:
    bdb_buf_free(&elem);
    if (rc == BDB_OK)
        cql_be32(out->data + count_at, (uint32_t)count);
    return rc;
}

int cql_value_parse(bdb_buf *out, const cql_type *t, const char *s, size_t n, char *err,
                    size_t errlen)
{
    pcur c = {s, s + n, err, errlen};
    if (!t)
        return perr(&c, "no type");
    if (t->id == CQL_TYPE_LIST || t->id == CQL_TYPE_SET || t->id == CQL_TYPE_MAP) {
        size_t at = out->len;
        int rc = parse_rec(out, t, &c, 0);
        skip_ws(&c);
        if (rc == BDB_OK && c.s != c.end)
            rc = perr(&c, "unexpected text after the collection");
        if (rc != BDB_OK)
            out->len = at;
        return rc;
    }
    if (t->id != CQL_TYPE_VARCHAR && t->id != CQL_TYPE_ASCII && t->id != CQL_TYPE_BLOB) {
        /* Numbers, times and ids may be padded or quoted; strings are taken as is. */
        while (n && isspace((unsigned char)*s))
            s++, n--;
        while (n && isspace((unsigned char)s[n - 1]))
            n--;
        if (n >= 2 && s[0] == '\'' && s[n - 1] == '\'')
            s++, n -= 2;
    }
    size_t at = out->len;
    int rc = parse_scalar(out, t, s, n, &c);
    if (rc != BDB_OK)
        out->len = at;
    return rc;
}
