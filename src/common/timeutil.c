#include "common/timeutil.h"

#include "bucketdb/bdb.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int64_t bdb_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t bdb_monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i]))
            return 0;
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return 1;
}

/* 1 when s is all digits after an optional '-' (Unix ms, however many). */
static int unix_ms_form(const char *s)
{
    if (*s == '-')
        s++;
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return 0;
    return 1;
}

int bdb_parse_time_ms(const char *s, int64_t *out)
{
    if (!s || !*s)
        return BDB_ERR_INVALID;
    const char *p = s;
    if (unix_ms_form(s)) {
        errno = 0;
        long long v = strtoll(s, NULL, 10);
        if (errno == ERANGE) /* out of int64 range: not a time we can store */
            return BDB_ERR_INVALID;
        *out = v;
        return BDB_OK;
    }
    int Y, M, D, h, mi, sec;
    if (!digits(&p, 4, &Y) || *p++ != '-' || !digits(&p, 2, &M) || *p++ != '-' ||
        !digits(&p, 2, &D) || (*p != 'T' && *p != 't' && *p != ' '))
        return BDB_ERR_INVALID;
    p++;
    if (!digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi) || *p++ != ':' ||
        !digits(&p, 2, &sec))
        return BDB_ERR_INVALID;
    static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (M < 1 || M > 12 || D < 1 || D > mdays[M - 1] || h > 23 || mi > 59 || sec > 60)
        return BDB_ERR_INVALID;
    if (M == 2 && D == 29 && !(Y % 4 == 0 && (Y % 100 != 0 || Y % 400 == 0)))
        return BDB_ERR_INVALID; /* Feb 29 of a common year */
    int64_t ms = 0;
    if (*p == '.') {
        p++;
        int n = 0;
        int64_t frac = 0;
        while (isdigit((unsigned char)*p)) {
            if (n < 3)
                frac = frac * 10 + (*p - '0');
            n++;
            p++;
        }
        if (n == 0)
            return BDB_ERR_INVALID;
        for (int i = n; i < 3; i++)
            frac *= 10;
        ms = frac;
    }
    int64_t off = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int sign = *p++ == '-' ? -1 : 1, oh, om;
        if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
            return BDB_ERR_INVALID;
        off = sign * (oh * 3600 + om * 60);
    } else {
        return BDB_ERR_INVALID;
    }
    if (*p != '\0')
        return BDB_ERR_INVALID;
    int64_t secs = days_from_civil(Y, M, D) * 86400 + h * 3600 + mi * 60 + sec - off;
    *out = secs * 1000 + ms;
    return BDB_OK;
}

void bdb_format_time_ms(int64_t ms, char *out, int outlen)
{
    time_t secs = (time_t)bdb_floor_div(ms, 1000);
    int rem = (int)(ms % 1000); /* not ms - secs*1000: that overflows near INT64_MIN */
    if (rem < 0)
        rem += 1000;
    struct tm tm;
    if (!gmtime_r(&secs, &tm)) { /* beyond the calendar gmtime can represent */
        snprintf(out, (size_t)outlen, "%lld", (long long)ms);
        return;
    }
    snprintf(out, (size_t)outlen, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, rem);
}

int bdb_parse_query_time(const char *s, int64_t *out)
{
    int64_t t;
    if (bdb_parse_time_ms(s, &t) != BDB_OK)
        /* a number too long for int64 is a time, only far out of range */
        return s && unix_ms_form(s) ? BDB_ERR_LIMIT : BDB_ERR_INVALID;
    if (t < BDB_QT_MIN_MS || t > BDB_QT_MAX_MS)
        return BDB_ERR_LIMIT;
    *out = t;
    return BDB_OK;
}

void bdb_ts_range_error(int64_t ms, char *out, size_t outlen)
{
    char lo[40], hi[40];
    bdb_format_time_ms(BDB_TS_MIN_MS, lo, sizeof lo);
    bdb_format_time_ms(BDB_TS_MAX_MS, hi, sizeof hi);
    snprintf(out, outlen, "timestamp %lld ms is outside the supported range %s..%s", (long long)ms,
             lo, hi);
}
