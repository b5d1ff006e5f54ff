/* db_latest_int: the current-state index's structures and the helpers its two files
 * share (db_latest.c: entries, states, reservations, readers; db_latest_file.c: the
 * file <data>/latest). Private to those two files. */
#ifndef BDB_DB_LATEST_INT_H
#define BDB_DB_LATEST_INT_H

#include "storage/embedded/core/db_consumer.h"
#include "storage/embedded/state/db_latest.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct lt_metric {
    series *s; /* the catalog's series: its name, alive as long as the device */
    int64_t ts;
    double v;
} lt_metric;

/* One string attribute: name and value in one allocation ("name\0value\0") so a newer
 * value replaces the old one by a pointer swap. */
typedef struct lt_attr {
    char *s;
    uint32_t nlen, vlen;
    int64_t ts;
} lt_attr;

struct lt_state;
struct lt_tenant;

/* One device. Guarded by its device's stripe lock; st, left and right also change
 * only with the tenant's mutex held. */
typedef struct lt_dev {
    device *dev;
    struct lt_tenant *t;
    struct lt_state *st;         /* NULL: no state reported yet */
    struct lt_dev *left, *right; /* treap links inside st's set */
    _Atomic int64_t state_ts;    /* read without the stripe lock by state listings */
    int64_t event_ts;
    lt_metric *m; /* sorted by metric name */
    uint32_t nm, cap;
    lt_attr *a;       /* sorted by name; na, acap, ares after live */
    uint64_t gen;     /* sink: round of the last change (db_state_sink.c) */
    int64_t dirty_lo; /* sink: oldest report time applied since the last sent round */
    /* Reservations (db_latest_reserve): writers between their reserve and release
     * hold the entry (pending) and mres free metric slots of m (cap >= nm + mres). An
     * entry made by a reservation stays hidden from every reader until a report is
     * applied to it (live), and is dropped again when its last holder lets go
     * unapplied, so a refused write leaves no entry behind. */
    uint32_t pending, mres;
    int live;
    /* attributes: count, capacity, slots held by reservations (as mres); at most
     * BDB_MAX_DEVICE_ATTRS, so bytes in what was padding: 8 bytes per device in all */
    uint8_t na, acap, ares;
} lt_dev;

_Static_assert(BDB_MAX_DEVICE_ATTRS <= 127, "lt_dev's attribute counts are bytes");

typedef struct lt_state {
    char *name;
    size_t nlen;
    uint64_t count;
    uint64_t pending; /* reservations holding it: not dropped, and (count 0) not listed */
    lt_dev *root;
} lt_state;

typedef struct lt_tenant {
    pthread_mutex_t mu; /* states, every state's set, ndev */
    bdb_map *states;    /* name -> lt_state; a state is dropped when its last device leaves */
    uint64_t ndev;
} lt_tenant;

/* Entries of the devices of one engine stripe: open addressing on the device pointer,
 * guarded by that stripe's lock. Entries are removed only with their tenant
 * (db_latest_forget_tenant), since devices are freed only then. */
typedef struct lt_table {
    lt_dev **slot;
    uint32_t cap, n;
} lt_table;

struct db_latest {
    lt_table tables[DB_STRIPES];
    pthread_mutex_t mu; /* tenants */
    bdb_map *tenants;   /* tenant name -> lt_tenant */
    _Atomic uint64_t bytes;
    _Atomic uint64_t round, sent;   /* sink: changes since round `sent` are not sent yet */
    _Atomic uint64_t attrs_dropped; /* attributes beyond BDB_MAX_DEVICE_ATTRS, not kept */
    /* each device's entry is also in its consumer bytes (dev_size), at this offset of
     * d->ext: a report finds it without a probe of the table, whose slots are cold at
     * fleet sizes; the table stays for the walks over every entry */
    uint32_t dev_off;
};

void lt_account(struct db_latest *L, int64_t delta);
/* d's entry, made hidden (not live) if absent and create is set; NULL when out of
 * memory (nothing changed). Caller holds d's stripe lock. */
lt_dev *lt_entry(struct db_latest *L, device *d, int create);
/* The first report applied to e: readers see it from now on. */
void lt_make_live(lt_dev *e);
/* Sets metric s of e to (ts, v) unless it holds a newer value; BDB_ERR_NOMEM when the
 * metric is new and e has no room left (e unchanged). */
int lt_metric_set(struct db_latest *L, lt_dev *e, series *s, int64_t ts, double v);
/* Moves e into state (state, slen) set at ts unless it holds a newer state. */
/* Sets attribute (name, value) of e at ts unless it holds a newer value, allocating
 * the copy (file load, replay); beyond BDB_MAX_DEVICE_ATTRS a new name is dropped and
 * counted. BDB_ERR_NOMEM with e unchanged. */
int lt_attr_set(struct db_latest *L, lt_dev *e, const char *name, size_t nl, const char *val,
                size_t vl, int64_t ts);
int lt_apply_state(struct db_latest *L, lt_dev *e, const char *state, size_t slen, int64_t ts);

/* The index of db (registered as db_latest_consumer; NULL before its open). */
static inline struct db_latest *lt_of(bdb_db *db)
{
    return *db_consumer_slot(db, &db_latest_consumer);
}

#endif
