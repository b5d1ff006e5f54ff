#include "common/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static enum bdb_log_level min_level = BDB_LOG_INFO;
static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};

void bdb_log_set_level(enum bdb_log_level lvl)
{
    min_level = lvl;
}

int bdb_log_parse_level(const char *s)
{
    static const char *lower[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(s, lower[i]) == 0)
            return i;
    return -1;
}

void bdb_log(enum bdb_log_level lvl, const char *fmt, ...)
{
    if (lvl < min_level || lvl >= BDB_LOG_OFF)
        return;
    /* Callers log a failure and then report its errno: gmtime_r (tzset reading
     * /etc/localtime the first time, ENOENT in a container without one) and stdio
     * must not change it under them. */
    int saved_errno = errno;
    char line[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, names[lvl]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    /* One fwrite per line keeps concurrent log lines from interleaving. */
    fwrite(line, 1, len, stderr);
    errno = saved_errno;
}

int bdb_log_budget_take(bdb_log_budget *b, int64_t now_ms, uint32_t *held)
{
    int64_t st = atomic_load(&b->start_);
    /* A new window: whoever moves the start resets the count. */
    if ((st == 0 || now_ms + 1 - st >= b->window_ms) &&
        atomic_compare_exchange_strong(&b->start_, &st, now_ms + 1))
        atomic_store(&b->used_, 0);
    if (atomic_fetch_add(&b->used_, 1) < b->lines) {
        *held = atomic_exchange(&b->held_, 0);
        return 1;
    }
    atomic_fetch_add(&b->held_, 1);
    *held = 0;
    return 0;
}
