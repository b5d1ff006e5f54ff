/* fleet: fleet windows, device sets and their encoding (see fleet.h). */
#include "agg/fleet.h"
#include "common/alloc.h"

#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <stdlib.h>
#include <string.h>

void bdb_fleet_init(bdb_fleet *f, int64_t width)
{
    memset(f, 0, sizeof *f);
    f->width = width;
}

void bdb_fleet_init_borrowed(bdb_fleet *f, int64_t width)
{
    bdb_fleet_init(f, width);
    f->borrow = 1;
}

static void win_free(bdb_fleet_win *w, int borrow)
{
    for (size_t i = 0; !borrow && i < w->ndev; i++)
        free(w->dev[i]);
    free(w->dev);
    w->dev = NULL;
    w->ndev = w->cap = 0;
}

void bdb_fleet_reset(bdb_fleet *f)
{
    for (size_t i = 0; i < f->n; i++)
        win_free(&f->w[i], f->borrow);
    f->n = 0;
}

void bdb_fleet_free(bdb_fleet *f)
{
    bdb_fleet_reset(f);
    free(f->w);
    f->w = NULL;
    f->cap = 0;
}

static size_t win_pos(const bdb_fleet *f, int64_t start, int *found)
{
    size_t lo = 0, hi = f->n;
    /* the common case: appending in time order */
    if (f->n && f->w[f->n - 1].start < start) {
        *found = 0;
        return f->n;
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->w[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < f->n && f->w[lo].start == start;
    return lo;
}

static bdb_fleet_win *win_get(bdb_fleet *f, int64_t start)
{
    int found;
    size_t i = win_pos(f, start, &found);
    if (found)
        return &f->w[i];
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        bdb_fleet_win *nw = bdb_realloc(f->w, cap * sizeof *f->w);
        if (!nw)
            return NULL; /* f unchanged */
        f->w = nw;
        f->cap = cap;
    }
    memmove(&f->w[i + 1], &f->w[i], (f->n - i) * sizeof *f->w);
    f->n++;
    memset(&f->w[i], 0, sizeof f->w[i]);
    f->w[i].start = start;
    bdb_stats_init(&f->w[i].st);
    return &f->w[i];
}

const bdb_fleet_win *bdb_fleet_find(const bdb_fleet *f, int64_t start)
{
    int found;
    size_t i = win_pos(f, start, &found);
    return found ? &f->w[i] : NULL;
}

void bdb_fleet_drop(bdb_fleet *f, int64_t start)
{
    int found;
    size_t i = win_pos(f, start, &found);
    if (!found)
        return;
    win_free(&f->w[i], f->borrow);
    memmove(&f->w[i], &f->w[i + 1], (f->n - i - 1) * sizeof *f->w);
    f->n--;
}

static int dev_reserve(bdb_fleet_win *w, size_t extra)
{
    if (w->ndev + extra <= w->cap)
        return BDB_OK;
    size_t c = w->cap ? w->cap * 2 : 8;
    while (c < w->ndev + extra)
        c *= 2;
    char **nd = bdb_realloc(w->dev, c * sizeof *w->dev);
    if (!nd)
        return BDB_ERR_NOMEM; /* w unchanged */
    w->dev = nd;
    w->cap = c;
    return BDB_OK;
}

/* Inserts a name into the sorted set; takes ownership of owned (a copy of name) when
 * given, else copies, or with borrow keeps name itself. */
static int dev_insert(bdb_fleet_win *w, const char *name, char *owned, int borrow)
{
    size_t lo = 0, hi = w->ndev;
    if (w->ndev && strcmp(w->dev[w->ndev - 1], name) < 0) {
        lo = w->ndev;
    } else {
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int c = strcmp(w->dev[mid], name);
            if (c == 0) {
                free(owned);
                return BDB_OK;
            }
            if (c < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
    }
    char *copy = owned ? owned : borrow ? (char *)name : bdb_strdup(name);
    if (!copy || dev_reserve(w, 1) != BDB_OK) {
        if (copy != name)
            free(copy);
        return BDB_ERR_NOMEM;
    }
    memmove(&w->dev[lo + 1], &w->dev[lo], (w->ndev - lo) * sizeof *w->dev);
    w->dev[lo] = copy;
    w->ndev++;
    return BDB_OK;
}

int bdb_fleet_add(bdb_fleet *f, const char *device, int64_t start, const bdb_stats *st)
{
    if (st->count == 0)
        return BDB_OK;
    bdb_fleet_win *w = win_get(f, bdb_align_down(start, f->width));
    if (!w)
        return BDB_ERR_NOMEM;
    int rc = bdb_stats_merge(&w->st, st);
    if (rc == BDB_OK)
        rc = dev_insert(w, device, NULL, f->borrow);
    return rc;
}

int bdb_fleet_add_rollup(bdb_fleet *f, const char *device, const bdb_rollup *r)
{
    if (r->width <= 0 || f->width % r->width != 0)
        return BDB_ERR_INVALID;
    int rc = BDB_OK;
    for (size_t i = 0; i < r->n && rc == BDB_OK; i++)
        rc = bdb_fleet_add(f, device, r->w[i].start, &r->w[i].st);
    return rc;
}

/* dst := dst ∪ src as sets. steal: take src's strings (src is emptied). */
static int dev_union(bdb_fleet_win *dst, bdb_fleet_win *src, int steal)
{
    if (src->ndev == 0)
        return BDB_OK;
    if (dst->ndev == 0 && steal) {
        free(dst->dev);
        dst->dev = src->dev;
        dst->ndev = src->ndev;
        dst->cap = src->cap;
        src->dev = NULL;
        src->ndev = src->cap = 0;
        return BDB_OK;
    }
    size_t total = dst->ndev + src->ndev;
    /* everything allocated before dst changes, so that a failure leaves it as it was */
    char **out = bdb_malloc(total * sizeof *out);
    char **copies = steal || !out ? NULL : bdb_malloc(src->ndev * sizeof *copies);
    if (!out || (!steal && !copies)) {
        free(out);
        return BDB_ERR_NOMEM;
    }
    for (size_t j = 0; !steal && j < src->ndev; j++)
        if ((copies[j] = bdb_strdup(src->dev[j])) == NULL) {
            while (j--)
                free(copies[j]);
            free(copies);
            free(out);
            return BDB_ERR_NOMEM;
        }
    size_t i = 0, j = 0, k = 0;
    while (i < dst->ndev || j < src->ndev) {
        int c = i >= dst->ndev ? 1 : j >= src->ndev ? -1 : strcmp(dst->dev[i], src->dev[j]);
        if (c < 0) {
            out[k++] = dst->dev[i++];
        } else if (c > 0) {
            out[k++] = steal ? src->dev[j] : copies[j];
            j++;
        } else {
            out[k++] = dst->dev[i++];
            free(steal ? src->dev[j] : copies[j]);
            j++;
        }
    }
    free(copies);
    free(dst->dev);
    dst->dev = out;
    dst->ndev = k;
    dst->cap = total;
    if (steal) {
        free(src->dev);
        src->dev = NULL;
        src->ndev = src->cap = 0;
    }
    return BDB_OK;
}

static int merge_impl(bdb_fleet *dst, bdb_fleet *src, int steal)
{
    if (dst->borrow || src->borrow)
        return BDB_ERR_INVALID;
    if (src->width <= 0 || dst->width % src->width != 0)
        return BDB_ERR_INVALID;
    for (size_t i = 0; i < src->n; i++) {
        bdb_fleet_win *w = win_get(dst, bdb_align_down(src->w[i].start, dst->width));
        if (!w)
            return BDB_ERR_NOMEM;
        int rc = bdb_stats_merge(&w->st, &src->w[i].st);
        if (rc == BDB_OK)
            rc = dev_union(w, &src->w[i], steal);
        if (rc != BDB_OK)
            return rc;
    }
    return BDB_OK;
}

int bdb_fleet_merge(bdb_fleet *dst, const bdb_fleet *src)
{
    return merge_impl(dst, (bdb_fleet *)src, 0);
}

void bdb_fleet_row_of(const bdb_fleet *f, const bdb_fleet_win *w, bdb_fleet_row *row)
{
    row->start = w->start;
    row->width = f->width;
    row->devices = w->ndev;
    row->readings = bdb_stats_count(&w->st);
    row->sum = bdb_stats_sum(&w->st);
    row->min = bdb_stats_min(&w->st);
    row->max = bdb_stats_max(&w->st);
    row->avg = bdb_stats_mean(&w->st);
    row->stddev = bdb_stats_stddev_pop(&w->st);
}

/* ---------------------------------------------------------------- encoding */

size_t bdb_fleet_write(const bdb_fleet *f, int64_t lo, int64_t hi, bdb_buf *out)
{
    size_t a = 0, b;
    while (a < f->n && f->w[a].start < lo)
        a++;
    for (b = a; b < f->n && f->w[b].start < hi; b++)
        ;
    size_t n = 0;
    for (size_t i = a; i < b; i++)
        n += f->w[i].st.count > 0;
    bdb_buf_put_uvarint(out, n);
    int64_t prev = 0;
    int first = 1;
    for (size_t i = a; i < b; i++) {
        const bdb_fleet_win *w = &f->w[i];
        if (w->st.count == 0)
            continue;
        int64_t idx = bdb_floor_div(w->start, f->width);
        if (first)
            bdb_buf_put_varint(out, idx);
        else
            bdb_buf_put_uvarint(out, (uint64_t)(idx - prev - 1));
        first = 0;
        prev = idx;
        bdb_stats_write(&w->st, out);
        bdb_buf_put_uvarint(out, w->ndev);
        const char *p = "";
        size_t plen = 0;
        for (size_t k = 0; k < w->ndev; k++) {
            const char *s = w->dev[k];
            size_t len = strlen(s), sh = 0;
            while (sh < plen && sh < len && p[sh] == s[sh])
                sh++;
            bdb_buf_put_uvarint(out, sh);
            bdb_buf_put_str(out, s + sh, len - sh);
            p = s;
            plen = len;
        }
    }
    return n;
}

int bdb_fleet_read(bdb_fleet *f, bdb_dec *d, int64_t lo, int64_t hi)
{
    bdb_fleet tmp;
    bdb_fleet_init(&tmp, f->width);
    uint64_t n = bdb_dec_uvarint_canon(d);
    int rc = d->err || n > bdb_dec_left(d) ? BDB_ERR_CORRUPT : BDB_OK;
    int64_t prev = 0;
    char *name = NULL;
    size_t namecap = 0;
    for (uint64_t i = 0; i < n && rc == BDB_OK; i++) {
        int64_t idx;
        if (i == 0) {
            idx = bdb_dec_varint_canon(d);
        } else {
            uint64_t gap = bdb_dec_uvarint_canon(d);
            if (gap >= (uint64_t)INT64_MAX || prev > INT64_MAX - 1 - (int64_t)gap) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
            idx = prev + 1 + (int64_t)gap;
        }
        prev = idx;
        if (d->err || idx > INT64_MAX / f->width || idx < INT64_MIN / f->width) {
            rc = BDB_ERR_CORRUPT;
            break;
        }
        bdb_stats st;
        uint64_t ndev = 0;
        if (bdb_stats_read(&st, d) != BDB_OK || st.count == 0)
            rc = BDB_ERR_CORRUPT;
        else
            ndev = bdb_dec_uvarint_canon(d);
        if (rc == BDB_OK && (d->err || ndev == 0 || ndev > st.count ||
                             ndev > BDB_FLEET_MAX_DEVICES || ndev > bdb_dec_left(d) / 2))
            rc = BDB_ERR_CORRUPT;
        if (rc != BDB_OK)
            break;
        bdb_fleet_win *w = win_get(&tmp, idx * f->width);
        if (!w || dev_reserve(w, (size_t)ndev) != BDB_OK) {
            rc = BDB_ERR_NOMEM;
            break;
        }
        w->st = st;
        size_t plen = 0;
        for (uint64_t k = 0; k < ndev && rc == BDB_OK; k++) {
            uint64_t sh = bdb_dec_uvarint_canon(d);
            size_t sl = 0;
            const char *suf = bdb_dec_str(d, &sl);
            if (d->err || sh > plen || sh + sl == 0 || (sl && memchr(suf, 0, sl))) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
            size_t len = (size_t)sh + sl;
            if (len + 1 > namecap) {
                char *nn = bdb_realloc(name, (len + 1) * 2);
                if (!nn) {
                    rc = BDB_ERR_NOMEM;
                    break;
                }
                name = nn;
                namecap = (len + 1) * 2;
            }
            memcpy(name + sh, suf, sl);
            name[len] = 0;
            /* strictly increasing: the shared prefix must be the longest one */
            if (k > 0 && (strcmp(w->dev[k - 1], name) >= 0 ||
                          (sh < plen && sh < len && w->dev[k - 1][sh] == name[sh]))) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
            if (k == 0 && sh != 0) {
                rc = BDB_ERR_CORRUPT;
                break;
            }
            if ((w->dev[w->ndev] = bdb_strdup(name)) == NULL) {
                rc = BDB_ERR_NOMEM;
                break;
            }
            w->ndev++;
            plen = len;
        }
    }
    free(name);
    if (rc != BDB_OK) {
        if (rc == BDB_ERR_CORRUPT)
            d->err = 1;
        bdb_fleet_free(&tmp);
        return rc;
    }
    /* keep the windows in [lo, hi) */
    size_t k = 0;
    for (size_t i = 0; i < tmp.n; i++) {
        if (tmp.w[i].start >= lo && tmp.w[i].start < hi)
            tmp.w[k++] = tmp.w[i];
        else
            win_free(&tmp.w[i], 0);
    }
    tmp.n = k;
    rc = merge_impl(f, &tmp, 1);
    bdb_fleet_free(&tmp);
    return rc;
}
