/* lineproto: InfluxDB 1.x line protocol parser.
 *
 * One pass over the line with pointers, no allocation in the steady state: tags and
 * fields go to arrays owned by the parser that grow (up to the limits) only when a
 * line has more of them than any line before, and unescaped text goes to a scratch
 * buffer sized once per line, so pointers into it never move while a line is parsed.
 *
 * Escapes follow the header: a backslash escapes only the characters listed for the
 * part it is in; before any other byte it is an ordinary character. A successfully
 * parsed key therefore never ends in a lone backslash, which keeps escape/parse round
 * trips exact.
 *
 * A newline inside a quoted string value is part of the string, as InfluxDB has it.
 * Lines are still cut at every '\n' first (memchr, the fast path); only a line that
 * fails to parse and holds a '"' is measured again with a quote-aware scan
 * (bdb_lp_next_point), so lines without multi-line strings pay nothing for them. */
#include "ingest/lineproto.h"
#include "common/alloc.h"
#include "common/utf8.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <float.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bdb_lp_parser {
    bdb_lp_limits lim;
    bdb_lp_tag *tags;
    uint32_t *tag_hash; /* parallel to tags, makes duplicate checks cheap */
    size_t tag_cap;
    bdb_lp_field *fields;
    uint32_t *field_hash;
    size_t field_cap;
    char *scratch; /* unescaped keys and strings of the current line */
    size_t scratch_cap, scratch_len;
    char *numbuf; /* NUL-terminated copy of an unusually long number for strtod */
    size_t numbuf_cap;
    int oom;           /* this line ran out of memory: it fails with BDB_ERR_NOMEM */
    size_t phys_lines; /* bdb_lp_next_point: physical lines consumed so far */
};

/* Grows *arr to n elements of sz; on failure keeps it and sets p->oom. */
static int xrealloc(bdb_lp_parser *p, void *arr, size_t n, size_t sz)
{
    void *q = bdb_realloc(*(void **)arr, n * sz);
    if (!q) {
        p->oom = 1;
        return -1;
    }
    *(void **)arr = q;
    return 0;
}

void bdb_lp_limits_default(bdb_lp_limits *l)
{
    l->max_line_len = 65536;
    l->max_tags = 64;
    l->max_fields = 256;
    l->max_key_len = 256;
    l->max_tag_value_len = 1024;
    l->max_string_len = 65536;
}

int bdb_lp_parse_precision(const char *s)
{
    if (!s || !*s || !strcmp(s, "ns") || !strcmp(s, "n"))
        return BDB_LP_NS;
    if (!strcmp(s, "u") || !strcmp(s, "us") || !strcmp(s, "\xc2\xb5") || !strcmp(s, "\xc2\xb5s"))
        return BDB_LP_US;
    if (!strcmp(s, "ms"))
        return BDB_LP_MS;
    if (!strcmp(s, "s"))
        return BDB_LP_S;
    if (!strcmp(s, "m"))
        return BDB_LP_M;
    if (!strcmp(s, "h"))
        return BDB_LP_H;
    return -1;
}

bdb_lp_parser *bdb_lp_parser_new(const bdb_lp_limits *limits)
{
    bdb_lp_parser *p = bdb_calloc(1, sizeof *p);
    if (!p)
        return NULL;
    bdb_lp_limits_default(&p->lim);
    if (limits) {
        /* A zero limit means "default" so that a partly filled config works. */
        bdb_lp_limits d = p->lim;
        p->lim = *limits;
        if (!p->lim.max_line_len)
            p->lim.max_line_len = d.max_line_len;
        if (!p->lim.max_tags)
            p->lim.max_tags = d.max_tags;
        if (!p->lim.max_fields)
            p->lim.max_fields = d.max_fields;
        if (!p->lim.max_key_len)
            p->lim.max_key_len = d.max_key_len;
        if (!p->lim.max_tag_value_len)
            p->lim.max_tag_value_len = d.max_tag_value_len;
        if (!p->lim.max_string_len)
            p->lim.max_string_len = d.max_string_len;
    }
    return p;
}

void bdb_lp_parser_free(bdb_lp_parser *p)
{
    if (!p)
        return;
    free(p->tags);
    free(p->tag_hash);
    free(p->fields);
    free(p->field_hash);
    free(p->scratch);
    free(p->numbuf);
    free(p);
}

int bdb_lp_next_line(const char *body, size_t len, size_t *pos, const char **line, size_t *linelen,
                     size_t *lineno)
{
    if (*pos == 0)
        *lineno = 0;
    if (*pos >= len)
        return 0;
    const char *s = body + *pos;
    size_t left = len - *pos;
    const char *nl = memchr(s, '\n', left);
    size_t n = nl ? (size_t)(nl - s) : left;
    *pos += n + (nl != NULL);
    if (n > 0 && s[n - 1] == '\r')
        n--;
    *line = s;
    *linelen = n;
    (*lineno)++;
    return 1;
}

/* ---- errors ---- */

__attribute__((format(printf, 4, 5))) static int fail(char *err, size_t errlen, int code,
                                                      const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* A key as it may appear in an error message: bounded, and with control bytes and
 * quotes replaced so the message stays one readable line. */
static const char *printable(char out[80], bdb_lp_str s)
{
    size_t n = s.n > 64 ? 64 : s.n, o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        out[o++] = (c < 0x20 || c == 0x7f || c == '"') ? '?' : (char)c;
    }
    if (s.n > n) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = '\0';
    return out;
}

/* ---- scanning ---- */

static inline int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

/* Ends an unquoted field value or the timestamp. */
static inline int is_value_end(char c)
{
    return c == ',' || is_ws(c);
}

static inline int escapable(char c, int meas)
{
    return c == ',' || c == ' ' || (c == '=' && !meas);
}

static const char *skip_ws(const char *s, const char *end)
{
    while (s < end && is_ws(*s))
        s++;
    return s;
}

/* Finds the end of a measurement (meas = 1) or of a tag key, tag value or field key:
 * the first unescaped ',' or ' ' (or '=' outside measurements). Sets *esc when an
 * escape was seen so that only such keys pay for unescaping. */
static const char *scan_key(const char *s, const char *end, int meas, int *esc)
{
    while (s < end) {
        char c = *s;
        if (c == '\\') {
            if (s + 1 < end && escapable(s[1], meas)) {
                *esc = 1;
                s += 2;
            } else {
                s++;
            }
            continue;
        }
        if (c == ',' || c == ' ' || (c == '=' && !meas))
            break;
        s++;
    }
    return s;
}

/* The text of [s, e): in place when it has no escapes, else unescaped into scratch,
 * which bdb_lp_parse_line has sized for the whole line. */
static bdb_lp_str take_key(bdb_lp_parser *p, const char *s, const char *e, int meas, int esc)
{
    if (!esc)
        return (bdb_lp_str){s, (size_t)(e - s)};
    char *out = p->scratch + p->scratch_len, *o = out;
    while (s < e) {
        if (*s == '\\' && s + 1 < e && escapable(s[1], meas))
            s++;
        *o++ = *s++;
    }
    p->scratch_len += (size_t)(o - out);
    return (bdb_lp_str){out, (size_t)(o - out)};
}

/* InfluxQL reads `time` as the timestamp, so InfluxDB refuses it as a tag or field
 * key; a point stored with one could not be queried back the same way. */
static inline int is_time_key(bdb_lp_str k)
{
    return k.n == 4 && memcmp(k.p, "time", 4) == 0;
}

static uint32_t key_hash(bdb_lp_str k)
{
    uint32_t h = 2166136261u; /* FNV-1a: keys are short, quality needs are modest */
    for (size_t i = 0; i < k.n; i++)
        h = (h ^ (unsigned char)k.p[i]) * 16777619u;
    return h;
}

static inline int str_eq(bdb_lp_str a, bdb_lp_str b)
{
    return a.n == b.n && memcmp(a.p, b.p, a.n) == 0;
}

static int grow_tags(bdb_lp_parser *p)
{
    size_t cap = p->tag_cap ? p->tag_cap * 2 : 16;
    if (cap > p->lim.max_tags)
        cap = p->lim.max_tags;
    if (xrealloc(p, &p->tags, cap, sizeof *p->tags) ||
        xrealloc(p, &p->tag_hash, cap, sizeof *p->tag_hash))
        return -1; /* a grown first array is kept: only tag_cap says what both hold */
    p->tag_cap = cap;
    return 0;
}

static int grow_fields(bdb_lp_parser *p)
{
    size_t cap = p->field_cap ? p->field_cap * 2 : 32;
    if (cap > p->lim.max_fields)
        cap = p->lim.max_fields;
    if (xrealloc(p, &p->fields, cap, sizeof *p->fields) ||
        xrealloc(p, &p->field_hash, cap, sizeof *p->field_hash))
        return -1;
    p->field_cap = cap;
    return 0;
}

/* ---- numbers ---- */

static const double pow10_exact[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                       1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                       1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static pthread_once_t c_locale_once = PTHREAD_ONCE_INIT;
static locale_t c_locale;

static void c_locale_init(void)
{
    c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
}

/* strtod on [s, e), which is not NUL-terminated, in the C locale whatever the process
 * locale is (a ',' decimal separator would silently truncate values). */
static double slow_strtod(bdb_lp_parser *p, const char *s, const char *e)
{
    char local[64], *buf = local;
    size_t n = (size_t)(e - s);
    if (n + 1 > sizeof local) {
        if (p->numbuf_cap < n + 1) {
            if (xrealloc(p, &p->numbuf, n + 1, 1))
                return 0; /* p->oom fails the line */
            p->numbuf_cap = n + 1;
        }
        buf = p->numbuf;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    pthread_once(&c_locale_once, c_locale_init);
    if (c_locale != (locale_t)0)
        return strtod_l(buf, NULL, c_locale);
    return strtod(buf, NULL);
}

#define NUM_SYNTAX -1
#define NUM_RANGE -2

/* Parses a float: -?(digits[.digits]|.digits)([eE][+-]?digits)?. Plain decimals whose
 * significand fits in 53 bits and whose decimal exponent is within +-22 are computed
 * as one exact integer times or divided by one exact power of ten, a single correctly
 * rounded operation, hence bit-identical to strtod; everything else goes to strtod. */
static int parse_float(bdb_lp_parser *p, const char *s, const char *e, double *out)
{
    const char *start = s;
    int neg = 0;
    if (s < e && *s == '-') {
        neg = 1;
        s++;
    }
    uint64_t m = 0;
    int sig = 0, dropped = 0, ndigits = 0;
    long exp10 = 0;
    for (; s < e && *s >= '0' && *s <= '9'; s++, ndigits++) {
        if (m == 0 && *s == '0')
            continue;
        if (sig < 19) {
            m = m * 10 + (uint64_t)(*s - '0');
            sig++;
        } else {
            dropped = 1;
            exp10++;
        }
    }
    if (s < e && *s == '.') {
        for (s++; s < e && *s >= '0' && *s <= '9'; s++, ndigits++) {
            if (m == 0 && *s == '0') {
                exp10--;
            } else if (sig < 19) {
                m = m * 10 + (uint64_t)(*s - '0');
                sig++;
                exp10--;
            } else {
                dropped = 1;
            }
        }
    }
    if (ndigits == 0)
        return NUM_SYNTAX;
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        int eneg = 0;
        if (s < e && (*s == '+' || *s == '-'))
            eneg = *s++ == '-';
        if (s == e || *s < '0' || *s > '9')
            return NUM_SYNTAX;
        long ev = 0;
        for (; s < e && *s >= '0' && *s <= '9'; s++)
            if (ev < 1000000) /* far beyond any double; stops overflow */
                ev = ev * 10 + (*s - '0');
        exp10 += eneg ? -ev : ev;
    }
    if (s != e)
        return NUM_SYNTAX;
    if (m == 0 && !dropped) {
        *out = neg ? -0.0 : 0.0;
        return 0;
    }
#if FLT_EVAL_METHOD == 0 /* x87 extended precision would round twice */
    if (!dropped && m <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        double d = (double)m;
        d = exp10 < 0 ? d / pow10_exact[-exp10] : d * pow10_exact[exp10];
        *out = neg ? -d : d;
        return 0;
    }
#endif
    double d = slow_strtod(p, start, e);
    if (isinf(d))
        return NUM_RANGE;
    *out = d;
    return 0;
}

/* Parses -?digits (signed) or digits (unsigned) in [s, e) into a double. */
static int parse_integer(const char *s, const char *e, int is_unsigned, double *out)
{
    int neg = 0;
    if (!is_unsigned && s < e && *s == '-') {
        neg = 1;
        s++;
    }
    if (s == e)
        return NUM_SYNTAX;
    uint64_t max = is_unsigned ? UINT64_MAX : (neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX);
    uint64_t v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return NUM_SYNTAX;
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (max - d) / 10)
            return NUM_RANGE;
        v = v * 10 + d;
    }
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? (double)INT64_MIN : -(double)(int64_t)v;
    else
        *out = (double)v;
    return 0;
}

static int eq_nocase(const char *s, size_t n, const char *lit)
{
    size_t ln = strlen(lit);
    if (n != ln)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != lit[i])
            return 0;
    }
    return 1;
}

static int is_nan_or_inf(const char *s, size_t n)
{
    if (n > 0 && (*s == '-' || *s == '+')) {
        s++;
        n--;
    }
    return eq_nocase(s, n, "nan") || eq_nocase(s, n, "inf") || eq_nocase(s, n, "infinity");
}

static int parse_bool(const char *s, size_t n, double *out)
{
    static const char *const yes[] = {"t", "T", "true", "True", "TRUE"};
    static const char *const no[] = {"f", "F", "false", "False", "FALSE"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (strlen(yes[i]) == n && !memcmp(s, yes[i], n)) {
            *out = 1;
            return 0;
        }
        if (strlen(no[i]) == n && !memcmp(s, no[i], n)) {
            *out = 0;
            return 0;
        }
    }
    return -1;
}

/* ---- field values ---- */

/* Parses the value at *sp into f (whose key is set) and leaves *sp after it. */
static int parse_value(bdb_lp_parser *p, const char **sp, const char *end, bdb_lp_field *f,
                       char *err, size_t errlen)
{
    const char *s = *sp;
    char name[80];
    if (s == end || is_value_end(*s))
        return fail(err, errlen, BDB_ERR_INVALID, "missing field value (field \"%s\")",
                    printable(name, f->key));
    f->num = 0;
    f->str = (bdb_lp_str){NULL, 0};
    if (*s == '"') {
        const char *q = s + 1;
        size_t nesc = 0;
        while (q < end && *q != '"') {
            if (*q == '\\' && q + 1 < end && (q[1] == '"' || q[1] == '\\')) {
                nesc++;
                q += 2;
            } else {
                q++;
            }
        }
        if (q == end)
            return fail(err, errlen, BDB_ERR_INVALID, "unbalanced quotes (field \"%s\")",
                        printable(name, f->key));
        /* A state holding a NUL came back cut at the NUL while the write answered 204
         * (issue 19): the state index names states as C strings (db_latest.c). Refused
         * whole instead; JSON ingestion refuses \u0000 the same way. */
        const char *nul = memchr(s + 1, '\0', (size_t)(q - s - 1));
        if (nul)
            return fail(err, errlen, BDB_ERR_INVALID,
                        "string value holds a NUL byte at offset %zu (field \"%s\")",
                        (size_t)(nul - s - 1), printable(name, f->key));
        size_t n = (size_t)(q - s - 1) - nesc;
        if (n > p->lim.max_string_len)
            return fail(err, errlen, BDB_ERR_LIMIT,
                        "string length %zu exceeds max-string-bytes %zu (field \"%s\")", n,
                        p->lim.max_string_len, printable(name, f->key));
        if (q + 1 < end && !is_value_end(q[1]))
            return fail(err, errlen, BDB_ERR_INVALID, "invalid field format (field \"%s\")",
                        printable(name, f->key));
        f->type = BDB_LP_STRING;
        if (!nesc) {
            f->str = (bdb_lp_str){s + 1, n};
        } else {
            char *o = p->scratch + p->scratch_len;
            f->str = (bdb_lp_str){o, n};
            for (const char *c = s + 1; c < q; c++) {
                if (*c == '\\' && (c[1] == '"' || c[1] == '\\'))
                    c++;
                *o++ = *c;
            }
            p->scratch_len += n;
        }
        *sp = q + 1;
        return 0;
    }
    const char *e = s;
    while (e < end && !is_value_end(*e))
        e++;
    *sp = e;
    size_t n = (size_t)(e - s);
    if (*s == 't' || *s == 'T' || *s == 'f' || *s == 'F') {
        f->type = BDB_LP_BOOL;
        if (parse_bool(s, n, &f->num) < 0)
            return fail(err, errlen, BDB_ERR_INVALID, "invalid boolean (field \"%s\")",
                        printable(name, f->key));
        return 0;
    }
    if (is_nan_or_inf(s, n))
        return fail(err, errlen, BDB_ERR_INVALID,
                    "NaN or infinity is not a valid field value (field \"%s\")",
                    printable(name, f->key));
    int rc;
    if (e[-1] == 'i') {
        f->type = BDB_LP_INT;
        rc = parse_integer(s, e - 1, 0, &f->num);
    } else if (e[-1] == 'u') {
        f->type = BDB_LP_UINT;
        rc = parse_integer(s, e - 1, 1, &f->num);
    } else {
        f->type = BDB_LP_FLOAT;
        rc = parse_float(p, s, e, &f->num);
    }
    if (rc == NUM_RANGE)
        return fail(err, errlen, BDB_ERR_INVALID, "invalid number: out of range (field \"%s\")",
                    printable(name, f->key));
    if (rc < 0)
        return fail(err, errlen, BDB_ERR_INVALID, "invalid number (field \"%s\")",
                    printable(name, f->key));
    return 0;
}

/* ---- timestamps ---- */

static int convert_time(int64_t t, enum bdb_lp_precision prec, int64_t *ms)
{
    int64_t mul;
    switch (prec) {
    case BDB_LP_NS:
        *ms = bdb_floor_div(t, 1000000);
        return 0;
    case BDB_LP_US:
        *ms = bdb_floor_div(t, 1000);
        return 0;
    case BDB_LP_MS:
        *ms = t;
        return 0;
    case BDB_LP_S:
        mul = 1000;
        break;
    case BDB_LP_M:
        mul = 60000;
        break;
    case BDB_LP_H:
        mul = 3600000;
        break;
    default:
        return -1;
    }
    if (t > INT64_MAX / mul || t < INT64_MIN / mul)
        return -1;
    *ms = t * mul;
    return 0;
}

static int parse_time(const char *s, const char *end, enum bdb_lp_precision prec, bdb_lp_point *out,
                      char *err, size_t errlen)
{
    out->has_time = 0;
    out->time_ms = 0;
    if (s == end)
        return 0;
    const char *t = s;
    int neg = 0;
    if (*t == '-') {
        neg = 1;
        t++;
    }
    uint64_t max = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    const char *digits = t;
    for (; t < end && !is_ws(*t); t++) {
        if (*t < '0' || *t > '9')
            return fail(err, errlen, BDB_ERR_INVALID, "bad timestamp");
        uint64_t d = (uint64_t)(*t - '0');
        if (v > (max - d) / 10)
            return fail(err, errlen, BDB_ERR_INVALID, "bad timestamp: out of range");
        v = v * 10 + d;
    }
    if (t == digits || skip_ws(t, end) != end)
        return fail(err, errlen, BDB_ERR_INVALID, "bad timestamp");
    int64_t ts = neg ? (v == max ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    if (convert_time(ts, prec, &out->time_ms) < 0)
        return fail(err, errlen, BDB_ERR_INVALID, "bad timestamp: out of range");
    out->has_time = 1;
    return 0;
}

/* ---- the line ---- */

static int parse_tags(bdb_lp_parser *p, const char **sp, const char *end, size_t *ntags, char *err,
                      size_t errlen)
{
    const bdb_lp_limits *lim = &p->lim;
    const char *s = *sp;
    char name[80];
    *ntags = 0;
    while (s < end && *s == ',') {
        s++;
        int esc = 0;
        const char *e = scan_key(s, end, 0, &esc);
        if (e == s)
            return fail(err, errlen, BDB_ERR_INVALID, "missing tag key");
        bdb_lp_str key = take_key(p, s, e, 0, esc);
        if (e == end || *e != '=')
            return fail(err, errlen, BDB_ERR_INVALID, "missing tag value (tag \"%s\")",
                        printable(name, key));
        if (key.n > lim->max_key_len)
            return fail(err, errlen, BDB_ERR_LIMIT,
                        "tag key length %zu exceeds max-key-bytes %zu (tag \"%s\")", key.n,
                        lim->max_key_len, printable(name, key));
        if (is_time_key(key))
            return fail(err, errlen, BDB_ERR_INVALID,
                        "invalid tag key \"time\": it names the timestamp (as in InfluxDB)");
        s = e + 1;
        esc = 0;
        e = scan_key(s, end, 0, &esc);
        if (e == s)
            return fail(err, errlen, BDB_ERR_INVALID, "missing tag value (tag \"%s\")",
                        printable(name, key));
        if (e == end)
            return fail(err, errlen, BDB_ERR_INVALID, "missing fields");
        if (*e == '=')
            return fail(err, errlen, BDB_ERR_INVALID, "invalid tag format (tag \"%s\")",
                        printable(name, key));
        bdb_lp_str val = take_key(p, s, e, 0, esc);
        if (val.n > lim->max_tag_value_len)
            return fail(err, errlen, BDB_ERR_LIMIT,
                        "tag value length %zu exceeds max-tag-value-bytes %zu (tag \"%s\")", val.n,
                        lim->max_tag_value_len, printable(name, key));
        if (*ntags == lim->max_tags)
            return fail(err, errlen, BDB_ERR_LIMIT, "tag count exceeds max-tags %zu",
                        lim->max_tags);
        uint32_t h = key_hash(key);
        for (size_t i = 0; i < *ntags; i++)
            if (p->tag_hash[i] == h && str_eq(p->tags[i].key, key))
                return fail(err, errlen, BDB_ERR_INVALID, "duplicate tags (tag \"%s\")",
                            printable(name, key));
        if (*ntags == p->tag_cap && grow_tags(p))
            return fail(err, errlen, BDB_ERR_NOMEM, "out of memory");
        p->tags[*ntags] = (bdb_lp_tag){key, val};
        p->tag_hash[(*ntags)++] = h;
        s = e;
    }
    *sp = s;
    return 0;
}

static int parse_fields(bdb_lp_parser *p, const char **sp, const char *end, size_t *nfields,
                        char *err, size_t errlen)
{
    const bdb_lp_limits *lim = &p->lim;
    const char *s = *sp;
    char name[80];
    size_t seen = 0, n = 0;
    for (;;) {
        int esc = 0;
        const char *e = scan_key(s, end, 0, &esc);
        if (e == s)
            return fail(err, errlen, BDB_ERR_INVALID, "missing field key");
        bdb_lp_field f;
        f.key = take_key(p, s, e, 0, esc);
        if (e == end || *e != '=')
            return fail(err, errlen, BDB_ERR_INVALID, "invalid field format (field \"%s\")",
                        printable(name, f.key));
        if (f.key.n > lim->max_key_len)
            return fail(err, errlen, BDB_ERR_LIMIT,
                        "field key length %zu exceeds max-key-bytes %zu (field \"%s\")", f.key.n,
                        lim->max_key_len, printable(name, f.key));
        if (is_time_key(f.key))
            return fail(err, errlen, BDB_ERR_INVALID,
                        "invalid field key \"time\": it names the timestamp (as in InfluxDB)");
        /* Counted before duplicates are folded: the limit bounds the work per line. */
        if (++seen > lim->max_fields)
            return fail(err, errlen, BDB_ERR_LIMIT, "field count exceeds max-fields %zu",
                        lim->max_fields);
        s = e + 1;
        int rc = parse_value(p, &s, end, &f, err, errlen);
        if (rc < 0)
            return rc;
        /* Influx accepts a repeated field key; the last value wins. */
        uint32_t h = key_hash(f.key);
        size_t i = 0;
        while (i < n && !(p->field_hash[i] == h && str_eq(p->fields[i].key, f.key)))
            i++;
        if (i == n) {
            if (n == p->field_cap && grow_fields(p))
                return fail(err, errlen, BDB_ERR_NOMEM, "out of memory");
            p->field_hash[n++] = h;
        }
        p->fields[i] = f;
        if (s == end || *s != ',')
            break;
        s++;
    }
    *sp = s;
    *nfields = n;
    return 0;
}

int bdb_lp_parse_line(bdb_lp_parser *p, const char *line, size_t len, enum bdb_lp_precision prec,
                      bdb_lp_point *out, char *err, size_t errlen)
{
    const bdb_lp_limits *lim = &p->lim;
    if (err && errlen)
        err[0] = '\0';
    if (len > lim->max_line_len)
        return fail(err, errlen, BDB_ERR_LIMIT, "line length %zu exceeds max-line-bytes %zu", len,
                    lim->max_line_len);
    const char *end = line + len;
    const char *s = skip_ws(line, end);
    if (s == end || *s == '#')
        return 0;
    /* Names, tags and strings end up in JSON answers and Cassandra text columns, which
     * take UTF-8 only (common/utf8.h); the line protocol is defined as UTF-8 too. */
    size_t bad;
    if (!bdb_utf8_valid(s, (size_t)(end - s), &bad))
        return fail(err, errlen, BDB_ERR_INVALID, "invalid UTF-8 at column %zu (byte 0x%02x)",
                    (size_t)(s - line) + bad + 1, (unsigned)(unsigned char)s[bad]);
    /* Unescaped text is never longer than the line, so sizing scratch once here means
     * it never moves under pointers already handed out for this line. */
    p->scratch_len = 0;
    p->oom = 0;
    if (memchr(s, '\\', (size_t)(end - s)) && p->scratch_cap < len) {
        if (xrealloc(p, &p->scratch, len, 1))
            return fail(err, errlen, BDB_ERR_NOMEM, "out of memory");
        p->scratch_cap = len;
    }

    int esc = 0;
    const char *e = scan_key(s, end, 1, &esc);
    if (e == s)
        return fail(err, errlen, BDB_ERR_INVALID, "missing measurement");
    out->measurement = take_key(p, s, e, 1, esc);
    if (out->measurement.n > lim->max_key_len)
        return fail(err, errlen, BDB_ERR_LIMIT, "measurement length %zu exceeds max-key-bytes %zu",
                    out->measurement.n, lim->max_key_len);
    s = e;
    size_t ntags = 0, nfields = 0;
    int rc = parse_tags(p, &s, end, &ntags, err, errlen);
    if (rc < 0)
        return rc;
    s = skip_ws(s, end);
    if (s == end)
        return fail(err, errlen, BDB_ERR_INVALID, "missing fields");
    rc = parse_fields(p, &s, end, &nfields, err, errlen);
    if (p->oom)
        return fail(err, errlen, BDB_ERR_NOMEM, "out of memory");
    if (rc < 0)
        return rc;
    rc = parse_time(skip_ws(s, end), end, prec, out, err, errlen);
    if (rc < 0)
        return rc;
    out->tags = p->tags;
    out->ntags = ntags;
    out->fields = p->fields;
    out->nfields = nfields;
    return 1;
}

/* ---- lines whose strings hold newlines ---- */

static inline int key_escapable(char c)
{
    return c == ',' || c == ' ' || c == '=';
}

/* The end of the line starting at s, with the parser's notion of where a quoted
 * string is: only a field value that starts with '"' opens one, and inside it only
 * `\"` and `\\` are escapes. Returns the '\n' that ends the line (or end) and counts
 * the newlines inside strings in *inner. One pass, run only for failed lines. */
static const char *quoted_line_end(const char *s, const char *end, size_t *inner)
{
    enum { KEYS, FKEY, VALUE, STRING, UNQUOTED, TAIL } st = KEYS;
    *inner = 0;
    /* as bdb_lp_parse_line does: leading blanks do not start the field section (a
     * line starting with one would otherwise take its measurement for a field key
     * and a '"' in it for a string holding the next line's newline) */
    s = skip_ws(s, end);
    while (s < end) {
        char c = *s;
        switch (st) {
        case KEYS: /* measurement and tags, up to the first unescaped space */
        case FKEY:
            if (c == '\n')
                return s;
            if (c == '\\' && s + 1 < end && key_escapable(s[1])) {
                s += 2;
                continue;
            }
            if (st == KEYS && c == ' ') {
                s = skip_ws(s, end);
                st = FKEY;
                continue;
            }
            if (st == FKEY && c == '=')
                st = VALUE;
            else if (st == FKEY && c == ' ')
                st = TAIL;
            s++;
            continue;
        case VALUE:
            st = c == '"' ? STRING : UNQUOTED;
            if (st == STRING)
                s++;
            continue;
        case STRING:
            if (c == '\\' && s + 1 < end && (s[1] == '"' || s[1] == '\\')) {
                s += 2;
                continue;
            }
            if (c == '\n')
                (*inner)++;
            else if (c == '"')
                st = UNQUOTED; /* whatever follows the string ends it or is an error */
            s++;
            continue;
        case UNQUOTED:
            if (c == '\n')
                return s;
            if (c == ',')
                st = FKEY;
            else if (is_ws(c))
                st = TAIL;
            s++;
            continue;
        case TAIL:
            if (c == '\n')
                return s;
            s++;
            continue;
        }
    }
    return end;
}

int bdb_lp_next_point(bdb_lp_parser *p, const char *body, size_t len, size_t *pos,
                      enum bdb_lp_precision prec, bdb_lp_point *out, const char **line,
                      size_t *linelen, size_t *lineno, int *rc, char *err, size_t errlen)
{
    if (*pos == 0)
        p->phys_lines = 0;
    size_t start = *pos, dummy = 0;
    if (!bdb_lp_next_line(body, len, pos, line, linelen, &dummy))
        return 0;
    *lineno = ++p->phys_lines;
    *rc = bdb_lp_parse_line(p, *line, *linelen, prec, out, err, errlen);
    /* A failed line cut at a '\n' may have been cut inside a string: measure it again
     * knowing quotes. Lines that parse never get here, nor lines without a quote. */
    if (*rc >= 0 || *rc == BDB_ERR_NOMEM || *pos > len || body[*pos - 1] != '\n' ||
        !memchr(*line, '"', *linelen))
        return 1;
    size_t inner;
    const char *e = quoted_line_end(body + start, body + len, &inner);
    if (!inner)
        return 1;
    *pos = (size_t)(e - body) + (e < body + len);
    p->phys_lines += inner;
    *linelen = (size_t)(e - *line);
    if (*linelen > 0 && (*line)[*linelen - 1] == '\r')
        (*linelen)--;
    *rc = bdb_lp_parse_line(p, *line, *linelen, prec, out, err, errlen);
    return 1;
}
