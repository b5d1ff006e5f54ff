#include "ingest/lp_ingest.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/timeutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reject(bdb_lp_result *res, size_t lineno, const char *line, size_t len,
                   const char *reason, int is_limit)
{
    res->rejected++;
    if (res->first_bad_line)
        return;
    res->first_bad_line = lineno;
    int shown = len > 200 ? 200 : (int)len;
    /* is_limit 2: the line parsed but its time is past the tenant's retention. */
    snprintf(res->first_error, sizeof res->first_error, "%s '%.*s%s': %s",
             is_limit == 2 ? "point beyond retention policy" : "unable to parse", shown, line,
             len > 200 ? "..." : "", reason);
    res->first_is_limit = is_limit == 1;
}

/* bdb_devrule_device's "alternative" of a line named by fallback_device: no tag used. */
#define NO_ALT (-100)

/* A line's tag by key, for the device rule. */
static const char *lp_tag(void *ctx, const char *key, size_t klen, size_t *vlen)
{
    const bdb_lp_point *pt = ctx;
    for (size_t i = 0; i < pt->ntags; i++)
        if (pt->tags[i].key.n == klen && memcmp(pt->tags[i].key.p, key, klen) == 0) {
            *vlen = pt->tags[i].val.n;
            return pt->tags[i].val.p;
        }
    return NULL;
}

int bdb_lp_ingest(bdb_lp_parser *p, const char *body, size_t len, enum bdb_lp_precision prec,
                  int64_t now_ms, const bdb_lp_map *map, bdb_batch *b, bdb_lp_result *res)
{
    memset(res, 0, sizeof *res);
    size_t pos = 0, lineno, linelen;
    const char *line;
    bdb_devrule_tags dtags;
    bdb_devrule_tags_init(&dtags, map->rule, map->device_tag);
    const bdb_devrule *rule = dtags.rule;
    /* a composite device name is built here; longer ones are refused by name length */
    char devbuf[1024];
    char reason[512];
    /* metric names ("measurement.field") are built here; a heap buffer takes over when
     * max_key_bytes allows longer ones than the stack's */
    char stackname[1024], *name = stackname, *heapname = NULL;
    size_t namecap = sizeof stackname;
    int ret = BDB_OK;
    bdb_lp_point pt;
    int rc;
    while (bdb_lp_next_point(p, body, len, &pos, prec, &pt, &line, &linelen, &lineno, &rc, reason,
                             sizeof reason)) {
        if (rc == 0)
            continue;
        res->lines++;
        if (rc == BDB_ERR_NOMEM) {
            ret = rc;
            goto out;
        }
        if (rc < 0) {
            reject(res, lineno, line, linelen, reason, rc == BDB_ERR_LIMIT);
            continue;
        }
        const char *devp;
        size_t devn;
        int alt = bdb_devrule_device(rule, lp_tag, &pt, devbuf, sizeof devbuf, &devp, &devn);
        if (alt == -1 && map->fallback_device) {
            devp = map->fallback_device;
            devn = strlen(devp);
            alt = NO_ALT;
        }
        if (alt == -1) {
            bdb_devrule_missing(rule, reason, sizeof reason);
            reject(res, lineno, line, linelen, reason, 0);
            continue;
        }
        if ((alt < 0 && alt != NO_ALT) || !bdb_batch_name_valid(devp, devn) ||
            devn > map->max_name_bytes) {
            snprintf(reason, sizeof reason,
                     "device name must be 1..%zu bytes of UTF-8 without control characters",
                     map->max_name_bytes);
            reject(res, lineno, line, linelen, reason, 0);
            continue;
        }
        int64_t ts = pt.has_time ? pt.time_ms : now_ms;
        if (!bdb_ts_valid(ts)) {
            bdb_ts_range_error(ts, reason, sizeof reason);
            reject(res, lineno, line, linelen, reason, 0);
            continue;
        }
        if (map->max_future_ms > 0 && ts > now_ms + map->max_future_ms) {
            snprintf(reason, sizeof reason,
                     "timestamp %lld ms is more than max-future-ms %lld ahead of the server "
                     "clock",
                     (long long)ts, (long long)map->max_future_ms);
            reject(res, lineno, line, linelen, reason, 0);
            continue;
        }
        if (map->max_age_ms > 0 && ts < now_ms - map->max_age_ms) {
            snprintf(reason, sizeof reason,
                     "timestamp %lld ms is older than the tenant's retention of %lld ms",
                     (long long)ts, (long long)map->max_age_ms);
            res->beyond_retention++;
            reject(res, lineno, line, linelen, reason, 2);
            continue;
        }
        bdb_batch_begin(b, devp, devn, ts, lineno);
        /* devp points into pt's tags (lp_tag), so the default rule's skipped tag is
         * told by its value's address */
        bdb_devrule_skip skip = bdb_devrule_tags_skip(&dtags, alt, devp);
        for (size_t i = 0; i < pt.ntags; i++)
            if (bdb_devrule_tag_stored(&skip, pt.tags[i].key.p, pt.tags[i].key.n, pt.tags[i].val.p))
                bdb_batch_tag(b, pt.tags[i].key.p, pt.tags[i].key.n, pt.tags[i].val.p,
                              pt.tags[i].val.n);
        int bad = 0;
        size_t stored = 0, skipped = 0, nattrs = 0;
        const bdb_lp_field *first_str = NULL;
        for (size_t i = 0; i < pt.nfields && !bad; i++) {
            const bdb_lp_field *f = &pt.fields[i];
            if (f->type == BDB_LP_STRING) {
                if (f->key.n == 5 && memcmp(f->key.p, "state", 5) == 0) {
                    if (map->max_state_bytes && f->str.n > map->max_state_bytes) {
                        snprintf(reason, sizeof reason,
                                 "state length %zu exceeds max-tag-value-bytes %zu", f->str.n,
                                 map->max_state_bytes);
                        bad = 1;
                        break;
                    }
                    bdb_batch_state(b, f->str.p, f->str.n);
                    stored++;
                    continue;
                }
                /* an attribute: bounded as the state; beyond, not stored as before */
                if ((map->max_state_bytes && f->str.n > map->max_state_bytes) ||
                    memchr(f->str.p, 0, f->str.n) || nattrs >= BDB_MAX_REPORT_ATTRS) {
                    if (!skipped++)
                        first_str = f;
                    continue;
                }
            }
            size_t n = map->field_only ? f->key.n : pt.measurement.n + 1 + f->key.n;
            size_t max = map->field_only ? map->max_name_bytes : 2 * map->max_name_bytes + 1;
            if (n <= max && n > namecap) {
                char *g = bdb_realloc(heapname, n);
                if (!g) {
                    bdb_batch_cancel(b);
                    ret = BDB_ERR_NOMEM;
                    goto out;
                }
                name = heapname = g;
                namecap = n;
            }
            if (map->field_only) {
                if (n > max)
                    n = SIZE_MAX;
                else
                    memcpy(name, f->key.p, n);
            } else {
                if (n > max) {
                    n = SIZE_MAX;
                } else {
                    memcpy(name, pt.measurement.p, pt.measurement.n);
                    name[pt.measurement.n] = '.';
                    memcpy(name + pt.measurement.n + 1, f->key.p, f->key.n);
                }
            }
            if (n == SIZE_MAX || !bdb_batch_name_valid(name, n)) {
                snprintf(reason, sizeof reason,
                         "metric name for field '%.*s' is empty, too long or has control "
                         "characters",
                         (int)(f->key.n > 100 ? 100 : f->key.n), f->key.p);
                bad = 1;
                break;
            }
            if (f->type == BDB_LP_STRING) {
                bdb_batch_attr(b, name, n, f->str.p, f->str.n);
                nattrs++;
            } else {
                bdb_batch_metric(b, name, n, f->num);
            }
            stored++;
        }
        if (!bad && !stored) {
            /* only strings other than state: nothing of the line could be kept */
            snprintf(reason, sizeof reason,
                     "no field could be stored: string field '%.*s' (only numbers, booleans "
                     "and 'state' are stored)",
                     (int)(first_str->key.n > 100 ? 100 : first_str->key.n), first_str->key.p);
            bad = 1;
        }
        if (bad) {
            bdb_batch_cancel(b);
            reject(res, lineno, line, linelen, reason, 0);
            continue;
        }
        bdb_batch_end(b);
        if (bdb_batch_failed(b) != BDB_OK) {
            ret = BDB_ERR_NOMEM;
            goto out;
        }
        res->accepted++;
        if (skipped && res->strings_skipped == 0)
            snprintf(res->first_skipped, sizeof res->first_skipped, "line %zu: string field '%.*s'",
                     lineno, (int)(first_str->key.n > 100 ? 100 : first_str->key.n),
                     first_str->key.p);
        res->strings_skipped += skipped;
    }
out:
    free(heapname);
    return ret;
}
