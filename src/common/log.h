/* log: leveled logging to stderr, one line per event, safe from any thread.
 * Format: `2026-11-22T03:40:00.123Z LEVEL message`. */
#ifndef BDB_LOG_H
#define BDB_LOG_H

#include <stdatomic.h>
#include <stdint.h>

/* BDB_LOG_OFF is only for bdb_log_set_level: it silences every level (the fuzz
 * harnesses use it, where one warning per execution would be gigabytes of log). */
enum bdb_log_level { BDB_LOG_DEBUG, BDB_LOG_INFO, BDB_LOG_WARN, BDB_LOG_ERROR, BDB_LOG_OFF };

void bdb_log_set_level(enum bdb_log_level lvl);
/* Parses "debug", "info", "warn", "error"; returns -1 if unknown. */
int bdb_log_parse_level(const char *s);
void bdb_log(enum bdb_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A budget for a message that can come once per device (a fleet of a million new
 * devices would otherwise write a million lines): at most `lines` lines per
 * `window_ms`; the caller logs the rest at the debug level. Set the two limits,
 * leave the rest zero; safe from any thread (approximate under contention). */
typedef struct bdb_log_budget {
    uint32_t lines;
    int64_t window_ms;
    _Atomic int64_t start_; /* the window's start (now_ms + 1, 0: none yet) */
    _Atomic uint32_t used_, held_;
} bdb_log_budget;

/* 1: the line may go out at its level, and *held is how many were held back (sent to
 * the debug level) since the last one that went out, for the caller to mention; 0:
 * over budget, log it at the debug level. now_ms is a monotonic clock. */
int bdb_log_budget_take(bdb_log_budget *b, int64_t now_ms, uint32_t *held);

#define BDB_DEBUG(...) bdb_log(BDB_LOG_DEBUG, __VA_ARGS__)
#define BDB_INFO(...) bdb_log(BDB_LOG_INFO, __VA_ARGS__)
#define BDB_WARN(...) bdb_log(BDB_LOG_WARN, __VA_ARGS__)
#define BDB_ERROR(...) bdb_log(BDB_LOG_ERROR, __VA_ARGS__)

#endif
