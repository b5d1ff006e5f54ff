/* libFuzzer harness for the line protocol parser.
 *
 * Splits the input into lines and parses each with every precision, alternating a
 * parser with default limits and one with tiny limits. Beyond "no crash" it checks
 * the contract's invariants and a round trip: every parsed point, written back out
 * with escapes, must parse to exactly the same point. Then the body once more with
 * bdb_lp_next_point, whose lines may span newlines inside quoted strings: they must
 * tile the body in order, and a newline in a parsed line must be inside a string. */
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "ingest/lineproto.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static bdb_lp_limits small_limits = {
    .max_line_len = 200,
    .max_tags = 3,
    .max_fields = 4,
    .max_key_len = 8,
    .max_tag_value_len = 8,
    .max_string_len = 16,
};

static void put_escaped(bdb_buf *b, bdb_lp_str s, const char *special)
{
    for (size_t i = 0; i < s.n; i++) {
        if (strchr(special, s.p[i]) && s.p[i] != '\0')
            bdb_buf_putc(b, '\\');
        bdb_buf_putc(b, (uint8_t)s.p[i]);
    }
}

/* Writes pt as line protocol with ms timestamps; returns 0 if a value cannot be
 * written back in its own type (an integer that rounded to 2^63 as a double). */
static int serialize(const bdb_lp_point *pt, bdb_buf *b)
{
    bdb_buf_reset(b);
    put_escaped(b, pt->measurement, ", ");
    for (size_t i = 0; i < pt->ntags; i++) {
        bdb_buf_putc(b, ',');
        put_escaped(b, pt->tags[i].key, ",= ");
        bdb_buf_putc(b, '=');
        put_escaped(b, pt->tags[i].val, ",= ");
    }
    bdb_buf_putc(b, ' ');
    for (size_t i = 0; i < pt->nfields; i++) {
        const bdb_lp_field *f = &pt->fields[i];
        if (i)
            bdb_buf_putc(b, ',');
        put_escaped(b, f->key, ",= ");
        bdb_buf_putc(b, '=');
        switch (f->type) {
        case BDB_LP_FLOAT:
            bdb_buf_printf(b, "%.17g", f->num);
            break;
        case BDB_LP_INT:
            if (f->num >= 9223372036854775808.0)
                return 0;
            bdb_buf_printf(b, "%.0fi", f->num);
            break;
        case BDB_LP_UINT:
            if (f->num >= 18446744073709551616.0)
                return 0;
            bdb_buf_printf(b, "%.0fu", f->num);
            break;
        case BDB_LP_BOOL:
            bdb_buf_puts(b, f->num != 0 ? "true" : "false");
            break;
        case BDB_LP_STRING:
            bdb_buf_putc(b, '"');
            put_escaped(b, f->str, "\"\\");
            bdb_buf_putc(b, '"');
            break;
        }
    }
    if (pt->has_time)
        bdb_buf_printf(b, " %lld", (long long)pt->time_ms);
    return 1;
}

static int same(bdb_lp_str a, bdb_lp_str b)
{
    return a.n == b.n && (a.n == 0 || memcmp(a.p, b.p, a.n) == 0);
}

static void check_point(const bdb_lp_point *pt, const bdb_lp_limits *l)
{
    CHECK(pt->measurement.n > 0 && pt->measurement.n <= l->max_key_len);
    CHECK(pt->measurement.p[0] != '#');
    CHECK(pt->ntags <= l->max_tags);
    CHECK(pt->nfields >= 1 && pt->nfields <= l->max_fields);
    for (size_t i = 0; i < pt->ntags; i++) {
        CHECK(pt->tags[i].key.n > 0 && pt->tags[i].key.n <= l->max_key_len);
        CHECK(pt->tags[i].val.n > 0 && pt->tags[i].val.n <= l->max_tag_value_len);
        for (size_t j = 0; j < i; j++)
            CHECK(!same(pt->tags[i].key, pt->tags[j].key));
    }
    for (size_t i = 0; i < pt->nfields; i++) {
        const bdb_lp_field *f = &pt->fields[i];
        CHECK(f->key.n > 0 && f->key.n <= l->max_key_len);
        CHECK(f->type <= BDB_LP_STRING);
        CHECK(isfinite(f->num));
        if (f->type == BDB_LP_STRING) {
            CHECK(f->str.n <= l->max_string_len);
            CHECK(!f->str.n || !memchr(f->str.p, '\0', f->str.n));
        }
        CHECK(!(f->key.n == 4 && !memcmp(f->key.p, "time", 4)));
        if (f->type == BDB_LP_BOOL)
            CHECK(f->num == 0 || f->num == 1);
        for (size_t j = 0; j < i; j++)
            CHECK(!same(f->key, pt->fields[j].key));
    }
}

static void check_round_trip(const bdb_lp_point *pt, bdb_lp_parser *rp, bdb_buf *b)
{
    if (!serialize(pt, b))
        return;
    bdb_lp_point q;
    char err[256];
    int rc = bdb_lp_parse_line(rp, (const char *)b->data, b->len, BDB_LP_MS, &q, err, sizeof err);
    if (rc != 1) {
        fprintf(stderr, "round trip failed (%d: %s): %.*s\n", rc, err, (int)b->len, b->data);
        abort();
    }
    CHECK(same(q.measurement, pt->measurement));
    CHECK(q.ntags == pt->ntags && q.nfields == pt->nfields);
    for (size_t i = 0; i < q.ntags; i++)
        CHECK(same(q.tags[i].key, pt->tags[i].key) && same(q.tags[i].val, pt->tags[i].val));
    for (size_t i = 0; i < q.nfields; i++) {
        CHECK(same(q.fields[i].key, pt->fields[i].key));
        CHECK(q.fields[i].type == pt->fields[i].type);
        CHECK(memcmp(&q.fields[i].num, &pt->fields[i].num, sizeof(double)) == 0);
        CHECK(same(q.fields[i].str, pt->fields[i].str));
    }
    CHECK(q.has_time == pt->has_time && q.time_ms == pt->time_ms);
}

/* Newlines in the parsed point's strings: the measurement, tags and keys hold none (a
 * newline ends a line there), so all of the line's newlines were in strings, and all
 * of them are in the point's unless a repeated field key replaced a string holding
 * some (the last value wins, as in InfluxDB): the point holds at most the line's. */
static size_t newlines_in_strings(const bdb_lp_point *pt)
{
    size_t k = 0;
    for (size_t i = 0; i < pt->nfields; i++)
        for (size_t j = 0; pt->fields[i].type == BDB_LP_STRING && j < pt->fields[i].str.n; j++)
            k += pt->fields[i].str.p[j] == '\n';
    return k;
}

static void check_next_point(const char *body, size_t size, bdb_lp_parser *p,
                             const bdb_lp_limits *l, bdb_lp_parser *rp, bdb_buf *b)
{
    size_t pos = 0, lineno = 0, prev_no = 0, n;
    const char *line, *prev_end = body;
    int rc;
    bdb_lp_point pt;
    char err[256];
    while (bdb_lp_next_point(p, body, size, &pos, BDB_LP_MS, &pt, &line, &n, &lineno, &rc, err,
                             sizeof err)) {
        CHECK(line >= prev_end && line + n <= body + size && pos <= size);
        CHECK(line + n <= body + pos);
        CHECK(lineno > prev_no);
        size_t nl = 0;
        for (size_t i = 0; i < n; i++)
            nl += line[i] == '\n';
        if (rc == 1) {
            check_point(&pt, l);
            CHECK(nl >= newlines_in_strings(&pt));
            check_round_trip(&pt, rp, b);
        } else {
            CHECK(rc == 0 || rc == BDB_ERR_INVALID || rc == BDB_ERR_LIMIT);
        }
        prev_no = lineno + nl;
        prev_end = line + n;
    }
    CHECK(pos == size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bdb_lp_parser *def, *tiny, *rt_def, *rt_tiny;
    static bdb_lp_limits def_limits, rt_limits_def, rt_limits_tiny;
    static bdb_buf out;
    if (!def) {
        bdb_lp_limits_default(&def_limits);
        def = bdb_lp_parser_new(&def_limits);
        tiny = bdb_lp_parser_new(&small_limits);
        /* Round trips may lengthen a line (escapes, 17-digit floats) but nothing else. */
        rt_limits_def = def_limits;
        rt_limits_def.max_line_len = 1 << 22;
        rt_def = bdb_lp_parser_new(&rt_limits_def);
        rt_limits_tiny = small_limits;
        rt_limits_tiny.max_line_len = 1 << 22;
        rt_tiny = bdb_lp_parser_new(&rt_limits_tiny);
        bdb_buf_init(&out);
    }
    const char *body = (const char *)data;
    for (int prec = BDB_LP_NS; prec <= BDB_LP_H; prec++) {
        size_t pos = 0, lineno = 0, prev = 0, n;
        const char *line;
        while (bdb_lp_next_line(body, size, &pos, &line, &n, &lineno)) {
            CHECK(lineno == prev + 1);
            prev = lineno;
            CHECK(line >= body && line + n <= body + size && pos <= size);
            CHECK(!memchr(line, '\n', n));
            int use_tiny = (lineno + (size_t)prec) % 2 == 1;
            bdb_lp_parser *p = use_tiny ? tiny : def;
            const bdb_lp_limits *l = use_tiny ? &small_limits : &def_limits;
            bdb_lp_point pt;
            char err[256];
            memset(err, 'x', sizeof err);
            int rc =
                bdb_lp_parse_line(p, line, n, (enum bdb_lp_precision)prec, &pt, err, sizeof err);
            if (rc == 1) {
                check_point(&pt, l);
                check_round_trip(&pt, use_tiny ? rt_tiny : rt_def, &out);
            } else if (rc == 0) {
                size_t i = 0;
                while (i < n && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
                    i++;
                CHECK(i == n || line[i] == '#');
            } else {
                CHECK(rc == BDB_ERR_INVALID || rc == BDB_ERR_LIMIT);
                CHECK(memchr(err, '\0', sizeof err) != NULL && err[0] != '\0');
                if (n > l->max_line_len)
                    CHECK(rc == BDB_ERR_LIMIT);
            }
        }
        CHECK(pos == size);
    }
    check_next_point(body, size, def, &def_limits, rt_def, &out);
    return 0;
}
