/* timeutil: clocks and time parsing shared by ingestion, queries and the CLI. */
#ifndef BDB_TIMEUTIL_H
#define BDB_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>

int64_t bdb_now_ms(void);       /* wall clock, Unix ms */
int64_t bdb_monotonic_ms(void); /* for intervals */

/* An injectable wall clock: modules that act on the age of data (retention, hot
 * partition minutes) read time through one so tests can move time forward without
 * sleeping. A zeroed bdb_clock (now_ms NULL) is the real wall clock. */
typedef struct bdb_clock {
    int64_t (*now_ms)(void *ctx);
    void *ctx;
} bdb_clock;
static inline int64_t bdb_clock_now(const bdb_clock *c)
{
    return c && c->now_ms ? c->now_ms(c->ctx) : bdb_now_ms();
}
/* Parses Unix milliseconds ("1700000000000") or RFC 3339 ("2023-11-14T22:13:20Z",
 * fractional seconds and +hh:mm offsets allowed) into Unix ms.
 * Returns BDB_OK or BDB_ERR_INVALID. */
int bdb_parse_time_ms(const char *s, int64_t *out);
/* Formats Unix ms as RFC 3339 UTC with milliseconds into out (>= 32 bytes). */
void bdb_format_time_ms(int64_t ms, char *out, int outlen);
/* The event times bucketdb stores: the range of int64 nanoseconds, 1677-09-21 to
 * 2262-04-11 (InfluxDB's range too), so that every time converts to ns and every
 * bucket, window and file boundary computed from it stays inside int64. Ingestion
 * refuses a time outside it; the engine refuses it in a write and in a WAL record. */
#define BDB_TS_MIN_MS (-9223372036854LL)
#define BDB_TS_MAX_MS 9223372036854LL
static inline int bdb_ts_valid(int64_t ms)
{
    return ms >= BDB_TS_MIN_MS && ms <= BDB_TS_MAX_MS;
}
/* "timestamp T ms is outside the supported range <min>..<max>" into out. */
void bdb_ts_range_error(int64_t ms, char *out, size_t outlen);
/* The times a query parameter (from, to, bucket) may name: the stored range, plus one
 * so that a half-open [from, to) can include BDB_TS_MAX_MS. Inside it every handler's
 * arithmetic (to - an hour, alignment down to a day, + 1) stays inside int64. */
#define BDB_QT_MIN_MS BDB_TS_MIN_MS
#define BDB_QT_MAX_MS (BDB_TS_MAX_MS + 1)
/* bdb_parse_time_ms, then the range: BDB_OK, BDB_ERR_INVALID (not a time) or
 * BDB_ERR_LIMIT (a time outside BDB_QT_MIN_MS..BDB_QT_MAX_MS, int64 overflow
 * included). *out is set only on BDB_OK. */
int bdb_parse_query_time(const char *s, int64_t *out);
/* Floor division that is correct for negative times. */
static inline int64_t bdb_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline int64_t bdb_align_down(int64_t t, int64_t size)
{
    return bdb_floor_div(t, size) * size;
}

#endif
