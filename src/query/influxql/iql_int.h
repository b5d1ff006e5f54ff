/* iql_int: what the files of the InfluxQL executor share (private to
 * src/query/influxql/): result building, string lists, the catalog of measurements,
 * and the WHERE evaluation. iql_exec.h is the interface. */
#ifndef BDB_IQL_INT_H
#define BDB_IQL_INT_H

#include "query/influxql/iql.h"
#include "query/influxql/iql_exec.h"

#include <stddef.h>
#include <stdint.h>

#define NS_PER_MS 1000000LL

/* ---- result building (iql_result.c); allocation failure aborts, the server's
 * policy (docs/RELIABILITY.md) ---- */
void *iql_xmalloc(size_t n);
void *iql_xrealloc(void *p, size_t n);
char *iql_xstrdup(const char *s);
/* A copy of s that r owns (freed with it). */
const char *iql_ostr(iql_result *r, const char *s);
void iql_set_error(iql_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
iql_series *iql_add_series(iql_result *r, const char *name, size_t ncols);
void iql_series_free(iql_series *s);
/* Keeps rows [offset, offset + limit) of s (limit 0: all). */
void iql_apply_limits(iql_series *s, int64_t limit, int64_t offset);

/* string lists (pointers, not copies) */
typedef struct strv {
    const char **v;
    size_t n, cap;
} strv;
void iql_strv_push(strv *s, const char *x);
void iql_strv_sort_unique(strv *s);
int iql_strv_has(const strv *s, const char *x);

/* ---- the catalog: devices, and the measurements their metrics make (iql_cat.c) ---- */
typedef struct dev {
    char *name;
    char **tk, **tv; /* the device's own tags */
    size_t nt;
} dev;

typedef struct mfield {
    const char *field, *metric;
    size_t dev;
} mfield;

typedef struct meas {
    char *name;
    strv fields;  /* sorted, unique */
    size_t *devs; /* sorted, unique device indexes */
    size_t ndevs;
    strv tagkeys; /* sorted, unique; the device tag included */
    mfield *mf;   /* (field, metric, device) of this measurement, sorted by device */
    size_t nmf;
} meas;

typedef struct cat {
    dev *d;
    size_t nd, capd;
    meas *m;
    size_t nm;
    struct trip *t;
    size_t nt, capt;
    const char *devtag;
    /* private to iql_cat.c: the catalog's strings and arrays in a few blocks (one
     * malloc per string cost more than the listing), the measurement names by id */
    struct cat_blk *arena;
    struct bdb_map *mids, *strs;
    char **mnames;
    size_t nmid, capmid;
    char *value; /* "value": the field of a metric without a dot */
    /* a catalog from ctx->catalogs: shared, read only, released rather than freed */
    struct bdb_rcache *cache;
    struct bdb_rcache_ent *ref;
    /* the engine's version of the catalog, read before the listing (has_ver 0: not
     * read, a listing of one device): what a kept result over it is keyed on */
    uint64_t ver[2];
    int has_ver;
} cat;

typedef struct trip {
    char *meas, *field, *metric;
    size_t dev;
    uint32_t mid; /* the measurement's id (cat.mnames) */
} trip;

/* Loads the tenant's devices and their measurements; free with iql_cat_free (also
 * after an error). */
int iql_cat_load(const iql_ctx *x, cat *c);
/* The same for one device only (none when it does not exist): its measurements hold
 * only its own fields and tag keys, which a statement may use only where those of
 * every device would give the same answer (iql_exec.c). */
int iql_cat_load_device(const iql_ctx *x, const char *device, cat *c);
void iql_cat_free(cat *c);
/* Tag key of device d: the device tag, its own tags; NULL when it has none. */
const char *iql_dev_tag(const cat *c, const dev *d, const char *key);
int iql_name_match(const iql_name *n, const char *s);
/* 1 when the statement's FROM (none: every measurement) names m. */
int iql_meas_selected(const iql_stmt *st, const meas *m);

/* ---- WHERE (iql_cond.c) ---- */
/* Field values of one row for iql_eval_cond: names (the statement's field list) and their
 * values at one time of one device, NaN where the row has none. */
typedef struct rowvals {
    const strv *names;
    const double *v;
} rowvals;

int iql_is_time(const iql_expr *e);
int iql_refers_time(const iql_expr *e);
/* Device d of measurement m against e: 1 passes, 0 not, 2 unknown (a field condition
 * and no row: rv NULL), -1 with an error in r. fields: field conditions allowed. */
int iql_eval_cond(const cat *c, const iql_expr *e, const dev *d, const meas *m, const rowvals *rv,
                  int fields, iql_result *r);
/* The fields of m that e compares, appended to out once each; 1 when there is one. */
int iql_cond_fields(const iql_expr *e, const meas *m, strv *out);
/* Narrows [*from, *to) (ms) by e's time comparisons; *wfrom: where InfluxDB starts
 * windows (its ns lower bound, in ms). -1 with an error in r. */
int iql_time_bounds(const iql_ctx *c, const iql_expr *e, int under_or, int64_t *from, int64_t *to,
                    int *has_from, int *has_to, int64_t *wfrom, iql_result *r);
/* 1 when e compares anything but time. */
int iql_where_has_tags(const iql_expr *e);
/* The device e selects by itself: an AND of time comparisons and one `devtag = 'name'`;
 * NULL for any other condition. */
const char *iql_where_device(const iql_expr *e, const char *devtag);
/* ok[device index] = 1 for the devices of m that may pass the WHERE. -1 on error. */
int iql_match_devs(const cat *c, const iql_stmt *st, const meas *m, unsigned char *ok,
                   iql_result *r);
int64_t iql_floor_div(int64_t a, int64_t b);

/* ---- SHOW and CREATE DATABASE (iql_show.c) ---- */
int iql_exec_show(const iql_ctx *x, const iql_stmt *st, iql_result *r);

#endif
