/* fileset: the load of window files (fileset.h). */
#include "storage/embedded/fileset/fileset.h"

#include "bucketdb/bdb.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/path.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bdb_fileset_seqs {
    uint64_t *v;
    size_t n, cap;
};

int bdb_fileset_seqs_add(bdb_fileset_seqs *s, const uint64_t *seqs, size_t n)
{
    if (n == 0)
        return BDB_OK;
    if (s->n + n > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        while (cap < s->n + n)
            cap *= 2;
        uint64_t *v = bdb_realloc(s->v, cap * sizeof *v);
        if (!v)
            return BDB_ERR_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    memcpy(s->v + s->n, seqs, n * sizeof *seqs);
    s->n += n;
    return BDB_OK;
}

struct scan {
    bdb_vfs *vfs;
    const bdb_fileset_kind *kind;
    void *ctx;
    const char *dir, *quarantine_dir;
    int sub, pass;
    uint64_t wal_upto;
    bdb_fileset_seqs dead;
    _Atomic uint64_t *quarantined, *discarded;
    int rc; /* what stopped the load */
};

static int replaced(const struct scan *s, uint64_t seq)
{
    for (size_t i = 0; i < s->dead.n; i++)
        if (s->dead.v[i] == seq)
            return 1;
    return 0;
}

static void quarantine(struct scan *s, const char *name, const char *path, const char *why)
{
    char dst[BDB_PATH_BUF];
    snprintf(dst, sizeof dst, "%s/%s-%s", s->quarantine_dir, s->kind->name, name);
    BDB_ERROR("%s file %s is damaged (%s); moved to %s and not read", s->kind->name, path, why,
              dst);
    if (bdb_vfs_rename(s->vfs, path, dst) == BDB_OK)
        bdb_vfs_sync_dir(s->vfs, s->dir);
    atomic_fetch_add(s->quarantined, 1);
}

static int stop(struct scan *s, int rc)
{
    s->rc = rc;
    return 1;
}

static int scan_one(void *ctx, const char *name)
{
    struct scan *s = ctx;
    const bdb_fileset_kind *k = s->kind;
    size_t n = strlen(name), el = strlen(k->ext);
    char path[BDB_PATH_BUF];
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (n > 4 && !strcmp(name + n - 4, ".tmp")) {
        if (s->pass == 1)
            bdb_vfs_unlink(s->vfs, path); /* never published */
        return 0;
    }
    if (n <= el || strcmp(name + n - el, k->ext) != 0)
        return 0;
    void *data = NULL;
    size_t len = 0;
    int rc = bdb_vfs_read_all(s->vfs, path, &data, &len);
    if (rc == BDB_ERR_NOMEM) /* skipping the file would make a flush rewrite its windows */
        return stop(s, rc);
    if (rc != BDB_OK) {
        BDB_ERROR("cannot read %s file %s: %s", k->name, path, bdb_strerror(rc));
        return 0;
    }
    if (s->pass == 1) {
        rc = k->replaced(s->ctx, s->sub, data, len, &s->dead);
        return rc == BDB_OK ? 0 : stop(s, rc); /* a replaced seq must not be missed */
    }
    void *f = NULL;
    uint64_t seq = 0, upto = 0;
    const char *why = NULL;
    rc = k->parse(s->ctx, s->sub, s->dir, name, data, len, &f, &seq, &upto, &why);
    if (rc == BDB_ERR_CORRUPT) {
        quarantine(s, name, path, why ? why : "does not parse");
        return 0;
    }
    if (rc != BDB_OK) /* never quarantined for lack of memory or a full disk */
        return stop(s, rc);
    if (replaced(s, seq) || upto > s->wal_upto) {
        /* Replaced by a compacted file, or written by a flush that never committed
         * (its samples come back from the WAL): either way counting it would count
         * its samples twice. */
        BDB_INFO("%s file %s dropped (%s)", k->name, path,
                 replaced(s, seq) ? "superseded by compaction" : "flush did not commit");
        k->discard(s->ctx, f);
        bdb_vfs_unlink(s->vfs, path);
        atomic_fetch_add(s->discarded, 1);
        return 0;
    }
    rc = k->keep(s->ctx, s->sub, f, path);
    return rc == BDB_ERR_NOMEM ? stop(s, rc) : 0;
}

int bdb_fileset_load(bdb_vfs *vfs, const char *const *dirs, int ndirs, const char *quarantine_dir,
                     uint64_t wal_upto, const bdb_fileset_kind *kind, void *ctx,
                     _Atomic uint64_t *quarantined, _Atomic uint64_t *discarded)
{
    struct scan s = {.vfs = vfs,
                     .kind = kind,
                     .ctx = ctx,
                     .quarantine_dir = quarantine_dir,
                     .wal_upto = wal_upto,
                     .quarantined = quarantined,
                     .discarded = discarded,
                     .rc = BDB_OK};
    for (s.pass = 1; s.pass <= 2 && s.rc == BDB_OK; s.pass++)
        for (s.sub = 0; s.sub < ndirs && s.rc == BDB_OK; s.sub++) {
            s.dir = dirs[s.sub];
            /* a file left unlisted would be missed like one skipped */
            if (bdb_vfs_list(vfs, s.dir, scan_one, &s) == BDB_ERR_NOMEM && s.rc == BDB_OK)
                s.rc = BDB_ERR_NOMEM;
        }
    free(s.dead.v);
    return s.rc;
}
