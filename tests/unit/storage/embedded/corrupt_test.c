/* corrupt: random bit flips in every kind of file of a data directory (block files with
 * their index, tier files, the catalog, the latest file, WAL segments), many seeds,
 * against the engine's documented reactions (docs/RELIABILITY.md, docs/STORAGE.md):
 *   - a damaged block or tier file is quarantined and reported, never read;
 *   - a damaged catalog or latest file makes open fail with BDB_ERR_CORRUPT (refused,
 *     nothing guessed);
 *   - damaged WAL: open succeeds, the valid prefix of the log is kept, the damage is
 *     counted;
 *   - never a wrong value: every raw sample read is exactly one that was written, every
 *     tier window read equals the written data's window exactly, a batch of the WAL is
 *     whole or absent and the surviving batches are a prefix;
 *   - never a crash (the ASan build runs the same trials).
 * Each trial copies a pristine image, flips 1 to 4 distinct bits of one file (half the
 * time inside its first or last 256 bytes, where headers, index and footer live),
 * opens and reads everything. Prints "corrupt figures: ..." per file kind.
 * CORRUPT_TRIALS=n sets the trials per kind (default 150). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "testutil.h"
#include "storage/crashutil.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "model/batch.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/tier/db_tier.h"
#include "storage/vfs/vfs.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define DAY (24 * HOUR)
#define T0 INT64_C(1790006400000) /* an hour boundary */
#define NDEV 3
#define NMET 2
#define A_HOURS 6 /* flushed: T0 - 6 h .. T0, a sample per minute */
#define B_BATCH 5 /* in the WAL only: batch j fills hour T0 + j h */
#define B_PER 20

static char root[64], basedir[128], workdir[128];

static int64_t world_clock(void *ctx)
{
    (void)ctx;
    return T0 + 12 * HOUR;
}

static uint64_t rng_state = 1;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const char *dev_name(int d)
{
    static const char *const n[NDEV] = {"d0", "d1", "d2"};
    return n[d];
}
static const char *met_name(int m)
{
    return m ? "m1" : "m0";
}

/* The value of every sample is a function of where it is, so any misplaced, mixed or
 * garbled value is caught. batch = -1 for the flushed part. */
static double value_at(int d, int m, int64_t ts)
{
    return (double)((ts - T0) / 1000) * 0.5 + d * 1e6 + m * 1e7;
}

/* Which part a time belongs to: -1 flushed, j = WAL batch j, -2 never written. */
static int part_of(int64_t ts)
{
    if (ts >= T0 - A_HOURS * HOUR && ts < T0 && (ts - T0) % MIN == 0)
        return -1;
    for (int j = 0; j < B_BATCH; j++) {
        int64_t lo = T0 + j * HOUR + 17000;
        if (ts >= lo && ts < lo + B_PER * MIN && (ts - lo) % MIN == 0)
            return j;
    }
    return -2;
}

static bdb_db *open_at(const char *dir, int *rc)
{
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    o.block_window_ms = HOUR;
    o.clock = (bdb_clock){world_clock, NULL};
    bdb_db *db = NULL;
    *rc = bdb_db_open(&o, &db);
    return *rc == BDB_OK ? db : NULL;
}

static void build_base(void)
{
    char live[128];
    snprintf(live, sizeof live, "%s/live", root);
    int rc;
    bdb_db *db = open_at(live, &rc);
    assert_int_equal(rc, BDB_OK);
    for (int64_t ts = T0 - A_HOURS * HOUR; ts < T0; ts += 10 * MIN) {
        bdb_batch *b = bdb_batch_new();
        for (int64_t t = ts; t < ts + 10 * MIN; t += MIN)
            for (int d = 0; d < NDEV; d++) {
                bdb_batch_begin(b, dev_name(d), 2, t, 1);
                for (int m = 0; m < NMET; m++)
                    bdb_batch_metric(b, met_name(m), 2, value_at(d, m, t));
                bdb_batch_state(b, (t / MIN + d) % 2 ? "on" : "off", (t / MIN + d) % 2 ? 2 : 3);
                bdb_batch_end(b);
            }
        assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
        bdb_batch_free(b);
        if (ts == T0 - 3 * HOUR)
            assert_int_equal(bdb_db_flush(db), BDB_OK); /* two flushes: compaction work */
    }
    assert_int_equal(bdb_db_flush(db), BDB_OK);
    assert_int_equal(bdb_db_maintain(db), BDB_OK); /* one file per window and tier file */
    for (int j = 0; j < B_BATCH; j++) {
        bdb_batch *b = bdb_batch_new();
        for (int i = 0; i < B_PER; i++) {
            int64_t t = T0 + j * HOUR + 17000 + i * MIN;
            for (int d = 0; d < NDEV; d++) {
                bdb_batch_begin(b, dev_name(d), 2, t, 1);
                for (int m = 0; m < NMET; m++)
                    bdb_batch_metric(b, met_name(m), 2, value_at(d, m, t));
                bdb_batch_end(b);
            }
        }
        assert_int_equal(bdb_db_write(db, "t", b), BDB_OK);
        bdb_batch_free(b);
    }
    assert_int_equal(cu_copy_tree(live, basedir), 0); /* WAL tail included */
    assert_int_equal(bdb_db_close(db), BDB_OK);
    tu_rm_rf(live);
}

typedef struct kind_tally {
    int trials, refused, detected, harmless, wrong, silent_loss, bad_open, not_prefix;
    uint64_t samples_checked;
} kind_tally;

/* Samples of each tier window per the written data (full windows only). */
static uint64_t model_count(int64_t start, int64_t width, double *mn, double *mx, int d, int m)
{
    uint64_t n = 0;
    *mn = INFINITY;
    *mx = -INFINITY;
    for (int64_t t = start - (start % 1000); t < start + width; t += 1000) {
        if (part_of(t) == -2)
            continue;
        double v = value_at(d, m, t);
        n++;
        *mn = v < *mn ? v : *mn;
        *mx = v > *mx ? v : *mx;
    }
    return n;
}

/* One trial on the damaged image in workdir. */
static void check_image(kind_tally *k, const char *what)
{
    int rc;
    bdb_db *db = open_at(workdir, &rc);
    k->trials++;
    if (!db) {
        if (rc == BDB_ERR_CORRUPT) {
            k->refused++;
        } else {
            k->bad_open++;
            print_error("%s: open failed with %s\n", what, bdb_strerror(rc));
        }
        return;
    }
    int detected = 0, complete = 1, have_ref = 0;
    int b_seen[B_BATCH] = {0}; /* WAL batches of the first series read whole */
    for (int d = 0; d < NDEV; d++) {
        for (int m = 0; m < NMET; m++) {
            const char *mm[1] = {met_name(m)};
            bdb_samples s;
            memset(&s, 0, sizeof s);
            rc = bdb_db_read(db, "t", dev_name(d), mm, 1, INT64_MIN, INT64_MAX, &s, NULL);
            if (rc == BDB_ERR_CORRUPT) {
                detected = 1;
                complete = 0;
            } else if (rc != BDB_OK) {
                k->wrong++;
                print_error("%s: read %s: %s\n", what, dev_name(d), bdb_strerror(rc));
            }
            size_t a_n = 0;
            int b_n[B_BATCH] = {0};
            for (size_t i = 0; rc == BDB_OK && i < s.n; i++) {
                int p = part_of(s.ts[i]);
                if (p == -2 || s.v[i] != value_at(d, m, s.ts[i])) {
                    k->wrong++;
                    print_error("%s: %s/%s at %lld: %.17g (part %d)\n", what, dev_name(d),
                                met_name(m), (long long)s.ts[i], s.v[i], p);
                    continue;
                }
                k->samples_checked++;
                if (p == -1)
                    a_n++;
                else
                    b_n[p]++;
            }
            if (rc == BDB_OK && a_n != (size_t)(A_HOURS * 60))
                complete = 0;
            for (int j = 0; j < B_BATCH; j++) {
                if (b_n[j] != 0 && b_n[j] != B_PER) {
                    k->not_prefix++;
                    print_error("%s: WAL batch %d partly there (%d)\n", what, j, b_n[j]);
                }
                if (rc != BDB_OK)
                    continue;
                if (!have_ref)
                    b_seen[j] = b_n[j] > 0;
                else if (b_seen[j] != (b_n[j] > 0)) {
                    k->not_prefix++;
                    print_error("%s: WAL batch %d there for one series only\n", what, j);
                }
            }
            have_ref |= rc == BDB_OK;
            bdb_samples_free(&s);
            /* tiers: every window read is the written data's window, exactly */
            for (int res = BDB_RES_1M; res <= BDB_RES_1H; res++) {
                int64_t w = bdb_res_width((enum bdb_res)res);
                bdb_rollup r;
                bdb_rollup_init(&r, w);
                rc = bdb_db_tier_read(db, "t", dev_name(d), mm, 1, (enum bdb_res)res, T0 - DAY,
                                      T0 + DAY, &r);
                if (rc == BDB_ERR_CORRUPT) {
                    detected = 1;
                } else if (rc != BDB_OK) {
                    k->wrong++;
                    print_error("%s: tier read: %s\n", what, bdb_strerror(rc));
                }
                for (size_t i = 0; rc == BDB_OK && i < r.n; i++) {
                    double mn, mx;
                    uint64_t n = model_count(r.w[i].start, w, &mn, &mx, d, m);
                    if (bdb_stats_count(&r.w[i].st) != n || bdb_stats_min(&r.w[i].st) != mn ||
                        bdb_stats_max(&r.w[i].st) != mx) {
                        /* a WAL batch cut from the head takes its windows whole */
                        int64_t st0 = r.w[i].start;
                        int wal = part_of(st0 - st0 % HOUR + 17000) >= 0;
                        if (!(wal && bdb_stats_count(&r.w[i].st) == 0)) {
                            k->wrong++;
                            print_error("%s: tier %d window %lld: count %llu want %llu\n", what,
                                        res, (long long)st0,
                                        (unsigned long long)bdb_stats_count(&r.w[i].st),
                                        (unsigned long long)n);
                        }
                    }
                }
                bdb_rollup_free(&r);
            }
        }
    }
    for (int j = 1; j < B_BATCH; j++)
        if (b_seen[j] && !b_seen[j - 1]) {
            k->not_prefix++;
            print_error("%s: WAL batch %d kept after a lost batch %d\n", what, j, j - 1);
        }
    for (int j = 0; j < B_BATCH; j++)
        complete &= b_seen[j];
    bdb_db_stats st;
    bdb_db_get_stats(db, &st);
    bdb_tier_stats ts;
    bdb_db_tier_get_stats(db, &ts);
    if (st.quarantined || st.wal_corruptions || ts.quarantined)
        detected = 1;
    if (detected)
        k->detected++;
    else if (complete)
        k->harmless++;
    else {
        k->silent_loss++;
        print_error("%s: data lost without any damage reported\n", what);
    }
    bdb_db_close(db);
}

static int setup(void **state)
{
    (void)state;
    struct stat st;
    const char *parent = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(root, sizeof root, "%s/bdb-corrupt-%d", parent, (int)getpid());
    snprintf(basedir, sizeof basedir, "%s/base", root);
    snprintf(workdir, sizeof workdir, "%s/work", root);
    tu_rm_rf(root);
    mkdir(root, 0755);
    bdb_log_set_level((enum bdb_log_level)(BDB_LOG_ERROR + 1)); /* one error per trial */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tu_rm_rf(root);
    return 0;
}

static const struct {
    const char *name, *sub, *suffix;
} KINDS[] = {
    {"block", "blocks", ".blk"}, {"tier", "tiers", ".tier"}, {"catalog", "", "catalog"},
    {"latest", "", "latest"},    {"wal", "wal", ""},
};
#define NKINDS (sizeof KINDS / sizeof KINDS[0])

static void test_bit_flips_every_file_kind(void **state)
{
    (void)state;
    build_base();
    const char *env = getenv("CORRUPT_TRIALS");
    int trials = env && atoi(env) > 0 ? atoi(env) : 150;
    kind_tally tot[NKINDS];
    memset(tot, 0, sizeof tot);

    /* the pristine image reads back whole: the checker's baseline */
    tu_rm_rf(workdir);
    assert_int_equal(cu_copy_tree(basedir, workdir), 0);
    kind_tally base = {0};
    check_image(&base, "pristine");
    assert_int_equal(base.harmless, 1);
    assert_int_equal(base.samples_checked,
                     (uint64_t)NDEV * NMET * (A_HOURS * 60 + B_BATCH * B_PER));

    for (size_t kd = 0; kd < NKINDS; kd++) {
        char dir[192];
        snprintf(dir, sizeof dir, "%s/%s", basedir, KINDS[kd].sub);
        size_t nf = 0;
        char **files = cu_list_files(dir, KINDS[kd].suffix, &nf);
        { /* non-empty files only; top-level kinds: only the exact name */
            size_t keep = 0;
            for (size_t i = 0; i < nf; i++) {
                const char *slash = strrchr(files[i], '/');
                if (cu_file_size(files[i]) > 0 &&
                    (*KINDS[kd].sub || !strcmp(slash + 1, KINDS[kd].suffix)))
                    files[keep++] = files[i];
                else
                    free(files[i]);
            }
            nf = keep;
        }
        if (nf == 0)
            fail_msg("no %s file in the base image", KINDS[kd].name);
        for (int t = 0; t < trials; t++) {
            rng_state = (uint64_t)(kd * 100003 + (size_t)t) * 2654435761u + 1;
            const char *src = files[rng() % nf];
            long size = cu_file_size(src);
            if (size <= 0)
                continue;
            tu_rm_rf(workdir);
            assert_int_equal(cu_copy_tree(basedir, workdir), 0);
            char dst[512];
            snprintf(dst, sizeof dst, "%s%s", workdir, src + strlen(basedir));
            int nflips = 1 + (int)(rng() % 4);
            long bits[4];
            for (int i = 0; i < nflips; i++) {
                long bit;
                int dup;
                do {
                    long byte;
                    if (rng() % 2 && size > 512)
                        byte = rng() % 2 ? (long)(rng() % 256) : size - 1 - (long)(rng() % 256);
                    else
                        byte = (long)(rng() % (uint64_t)size);
                    bit = byte * 8 + (long)(rng() % 8);
                    dup = 0;
                    for (int j = 0; j < i; j++)
                        dup |= bits[j] == bit;
                } while (dup);
                bits[i] = bit;
                assert_int_equal(cu_xor_byte(dst, bit / 8, (unsigned char)(1u << (bit % 8))), 0);
            }
            char what[600];
            snprintf(what, sizeof what, "%s trial %d (%d flip(s) in %s)", KINDS[kd].name, t, nflips,
                     dst + strlen(workdir));
            check_image(&tot[kd], what);
        }
        cu_free_list(files, nf);
    }
    int wrong = 0, bad = 0;
    for (size_t kd = 0; kd < NKINDS; kd++) {
        const kind_tally *k = &tot[kd];
        printf("corrupt figures %-7s: trials %d, refused at open (BDB_ERR_CORRUPT) %d, detected "
               "and quarantined or cut %d, flip in unused bytes (all data intact) %d, wrong values "
               "%d, lost without a report %d, WAL not a prefix %d, other open errors %d, "
               "samples checked %llu\n",
               KINDS[kd].name, k->trials, k->refused, k->detected, k->harmless, k->wrong,
               k->silent_loss, k->not_prefix, k->bad_open, (unsigned long long)k->samples_checked);
        wrong += k->wrong + k->not_prefix;
        bad += k->silent_loss + k->bad_open;
    }
    fflush(stdout);
    assert_int_equal(wrong, 0);
    assert_int_equal(bad, 0);
    /* the flips did bite: each kind saw damage found */
    for (size_t kd = 0; kd < NKINDS; kd++)
        assert_true(tot[kd].refused + tot[kd].detected > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bit_flips_every_file_kind, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
