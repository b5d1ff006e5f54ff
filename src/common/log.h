/* log: leveled logging to stderr, one line per event, safe from any thread.
 * Format: `2026-11-22T03:40:00.123Z LEVEL message`. */
#ifndef BDB_LOG_H
#define BDB_LOG_H

/* BDB_LOG_OFF is only for bdb_log_set_level: it silences every level (the fuzz
 * harnesses use it, where one warning per execution would be gigabytes of log). */
enum bdb_log_level { BDB_LOG_DEBUG, BDB_LOG_INFO, BDB_LOG_WARN, BDB_LOG_ERROR, BDB_LOG_OFF };

void bdb_log_set_level(enum bdb_log_level lvl);
/* Parses "debug", "info", "warn", "error"; returns -1 if unknown. */
int bdb_log_parse_level(const char *s);
void bdb_log(enum bdb_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define BDB_DEBUG(...) bdb_log(BDB_LOG_DEBUG, __VA_ARGS__)
#define BDB_INFO(...) bdb_log(BDB_LOG_INFO, __VA_ARGS__)
#define BDB_WARN(...) bdb_log(BDB_LOG_WARN, __VA_ARGS__)
#define BDB_ERROR(...) bdb_log(BDB_LOG_ERROR, __VA_ARGS__)

#endif
