/* lineproto: InfluxDB 1.x line protocol parser.
 *
 *   measurement[,tag=v...] field=v[,field=v...] [timestamp]
 *
 * A quoted string value may hold newlines (they are part of it, as in InfluxDB);
 * bdb_lp_next_point splits a body that way. `time` is refused as a tag or field key,
 * and a NUL byte inside a string value is refused (never stored cut short).
 *
 * Escapes: measurement `\,` `\ `; tag keys/values and field keys `\,` `\=` `\ `;
 * string field values `\"` `\\`. Field values: float (1, 1.5, -1e3), integer (1i),
 * unsigned (1u), boolean (t, T, true, True, TRUE, f, ...), string ("...").
 * NaN and infinities are rejected. Blank lines and lines starting with '#' are skipped.
 *
 * The parser is not thread-safe; use one per request. Points it returns point into
 * the input line or into the parser's scratch space (for unescaped strings) and stay
 * valid until the next call of bdb_lp_parse_line on the same parser. */
#ifndef BDB_LINEPROTO_H
#define BDB_LINEPROTO_H

#include <stddef.h>
#include <stdint.h>

enum bdb_lp_precision { BDB_LP_NS, BDB_LP_US, BDB_LP_MS, BDB_LP_S, BDB_LP_M, BDB_LP_H };

/* Parses "ns", "n", "u", "us", "µ", "ms", "s", "m", "h" (empty/NULL = ns). Returns -1 if unknown.
 */
int bdb_lp_parse_precision(const char *s);

typedef struct bdb_lp_limits {
    size_t max_line_len;      /* bytes in one line, default 65536 */
    size_t max_tags;          /* per point, default 64 */
    size_t max_fields;        /* per point, default 256 */
    size_t max_key_len;       /* measurement, tag key, field key, default 256 */
    size_t max_tag_value_len; /* default 1024 */
    size_t max_string_len;    /* string field value, default 65536 */
} bdb_lp_limits;

void bdb_lp_limits_default(bdb_lp_limits *l);

typedef struct bdb_lp_str {
    const char *p;
    size_t n;
} bdb_lp_str;

enum bdb_lp_ftype { BDB_LP_FLOAT, BDB_LP_INT, BDB_LP_UINT, BDB_LP_BOOL, BDB_LP_STRING };

typedef struct bdb_lp_tag {
    bdb_lp_str key, val;
} bdb_lp_tag;

typedef struct bdb_lp_field {
    bdb_lp_str key;
    enum bdb_lp_ftype type;
    double num;     /* value as a double for FLOAT, INT, UINT, BOOL (1/0) */
    bdb_lp_str str; /* STRING value (unescaped) */
} bdb_lp_field;

typedef struct bdb_lp_point {
    bdb_lp_str measurement;
    const bdb_lp_tag *tags;
    size_t ntags;
    const bdb_lp_field *fields;
    size_t nfields;
    int has_time;
    int64_t time_ms; /* converted from the precision; floor division for sub-ms units */
} bdb_lp_point;

typedef struct bdb_lp_parser bdb_lp_parser;

/* NULL limits = defaults. Returns NULL when out of memory. */
bdb_lp_parser *bdb_lp_parser_new(const bdb_lp_limits *limits);
void bdb_lp_parser_free(bdb_lp_parser *p);

/* Splits a body into lines. Call with *pos = 0 first; returns 1 with the next line
 * (without '\n' or a trailing '\r') and its 1-based number in *lineno, 0 at the end.
 * Blank lines and comment lines are returned too (the parser skips them) so that
 * line numbers in errors match the client's view. */
int bdb_lp_next_line(const char *body, size_t len, size_t *pos, const char **line, size_t *linelen,
                     size_t *lineno);

/* Takes the next line of a body and parses it: like bdb_lp_next_line followed by
 * bdb_lp_parse_line, except that a line cut at a newline inside a quoted string is
 * joined with what follows up to the string's end (so the text inside the quotes
 * never becomes a line of its own), and an unterminated string runs to the end of
 * the body, as InfluxDB reads it. Call with *pos = 0 first. Returns 0 at the end,
 * else 1 with *rc = bdb_lp_parse_line's result, *line and *linelen the whole line and
 * *lineno the number of its first physical line (1-based, counting every '\n'). */
int bdb_lp_next_point(bdb_lp_parser *p, const char *body, size_t len, size_t *pos,
                      enum bdb_lp_precision prec, bdb_lp_point *out, const char **line,
                      size_t *linelen, size_t *lineno, int *rc, char *err, size_t errlen);

/* Parses one line. Returns:
 *   1  a point was parsed into *out
 *   0  the line is blank or a comment (nothing to store)
 *   BDB_ERR_INVALID  syntax error; err (if non-NULL, errlen bytes) gets a reason such
 *                    as "invalid field format", "missing fields", "invalid number",
 *                    "NaN or infinity is not a valid field value", naming the field
 *   BDB_ERR_LIMIT    a limit was exceeded; err names the limit and its value,
 *                    e.g. "line length 70000 exceeds max-line-bytes 65536"
 *   BDB_ERR_NOMEM    out of memory; not the line's fault, so the caller fails the
 *                    whole body instead of skipping the line */
int bdb_lp_parse_line(bdb_lp_parser *p, const char *line, size_t len, enum bdb_lp_precision prec,
                      bdb_lp_point *out, char *err, size_t errlen);

#endif
