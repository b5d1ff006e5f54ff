/* agg/fleet: fleet windows against exact computation. 300 devices with lognormal,
 * uniform or constant readings at random times over two days, some devices silent in
 * some hours; each device's samples split at random into three "flushes" whose
 * partial minute windows are added to per-flush fleets, which are merged in two
 * orders and through the encoding. Every hour and day: device count, readings, min,
 * max exactly, avg and stddev (population) within 1e-12 relative of a two-pass long
 * double computation. Also: a device seen in several partial windows of one hour is
 * counted once; devices added out of name order; the encoding round-trips byte for
 * byte, and truncations, byte flips and non-canonical bytes are rejected or decode to
 * a valid fleet. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agg/fleet.h"
#include "bucketdb/bdb.h"
#include "common/timeutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_MS INT64_C(60000)
#define HOUR_MS (60 * MIN_MS)
#define DAY_MS (24 * HOUR_MS)
#define T0 INT64_C(1705276800000) /* 2024-01-15T00:00:00Z */
#define NDEV 300
#define NSAMP 400

static uint64_t rng_state;
static uint64_t rng(void)
{
    uint64_t z = (rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}
static double unif(void)
{
    return ((double)(rng() >> 11) + 0.5) / 9007199254740992.0;
}

struct samp {
    int dev;
    int64_t ts;
    double v;
};
static struct samp samples[NDEV * NSAMP];
static size_t nsamples, dev_first[NDEV + 1]; /* samples are grouped by device */

static void make_data(void)
{
    nsamples = 0;
    for (int d = 0; d < NDEV; d++) {
        dev_first[d] = nsamples;
        int kind = d % 3;
        /* each device is active in a random subset of hours */
        uint64_t mask = rng();
        for (int i = 0; i < NSAMP; i++) {
            int64_t ts = T0 + (int64_t)(rng() % (uint64_t)(2 * DAY_MS));
            if (!((mask >> ((ts - T0) / HOUR_MS % 48)) & 1))
                continue;
            double v = kind == 0   ? exp(1.5 * sqrt(-2 * log(unif())) * cos(6.283185307 * unif()))
                       : kind == 1 ? 1e6 + 100 * unif()
                                   : 42.5;
            samples[nsamples++] = (struct samp){d, ts, v};
        }
    }
    dev_first[NDEV] = nsamples;
}

static void dev_name(int d, char *out, size_t n)
{
    snprintf(out, n, "dev-%05d", d);
}

/* The fleet of flush k of 3: per device, the minute rollup of its samples assigned to
 * that flush, added device by device (in name order when ordered, else reversed). */
static void build_flush(bdb_fleet *f, int k, const int *assign, int ordered)
{
    bdb_rollup r;
    bdb_rollup_init(&r, MIN_MS);
    for (int x = 0; x < NDEV; x++) {
        int d = ordered ? x : NDEV - 1 - x;
        bdb_rollup_reset(&r);
        for (size_t i = dev_first[d]; i < dev_first[d + 1]; i++)
            if (assign[i] == k)
                assert_int_equal(bdb_rollup_add(&r, samples[i].ts, samples[i].v), BDB_OK);
        char name[32];
        dev_name(d, name, sizeof name);
        assert_int_equal(bdb_fleet_add_rollup(f, name, &r), BDB_OK);
    }
    bdb_rollup_free(&r);
}

static void check_exact(const bdb_fleet *f)
{
    int64_t w = f->width;
    size_t windows = 0;
    for (int64_t s = T0; s < T0 + 2 * DAY_MS; s += w) {
        long double sum = 0;
        uint64_t n = 0;
        double mn = INFINITY, mx = -INFINITY;
        static char seen[NDEV];
        memset(seen, 0, sizeof seen);
        uint64_t devs = 0;
        for (size_t i = 0; i < nsamples; i++)
            if (samples[i].ts >= s && samples[i].ts < s + w) {
                sum += samples[i].v;
                n++;
                mn = fmin(mn, samples[i].v);
                mx = fmax(mx, samples[i].v);
                if (!seen[samples[i].dev]++)
                    devs++;
            }
        const bdb_fleet_win *fw = bdb_fleet_find(f, s);
        if (n == 0) {
            assert_null(fw);
            continue;
        }
        assert_non_null(fw);
        long double mean = sum / n, m2 = 0;
        for (size_t i = 0; i < nsamples; i++)
            if (samples[i].ts >= s && samples[i].ts < s + w)
                m2 += (samples[i].v - mean) * (samples[i].v - mean);
        double sd = (double)sqrtl(m2 / n);
        bdb_fleet_row row;
        bdb_fleet_row_of(f, fw, &row);
        assert_int_equal(row.devices, devs);
        assert_int_equal(row.readings, n);
        assert_true(row.min == mn);
        assert_true(row.max == mx);
        assert_true(fabs(row.avg - (double)mean) <= 1e-12 * fabs((double)mean));
        assert_true(fabs(row.stddev - sd) <= 1e-12 * sd + 1e-300);
        windows++;
    }
    assert_true(windows > 0);
}

static void roundtrip(const bdb_fleet *f, bdb_fleet *out)
{
    bdb_buf b, b2;
    bdb_buf_init(&b);
    bdb_buf_init(&b2);
    bdb_fleet_write(f, INT64_MIN, INT64_MAX, &b);
    bdb_fleet_init(out, f->width);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_fleet_read(out, &d, INT64_MIN, INT64_MAX), BDB_OK);
    assert_int_equal(bdb_dec_left(&d), 0);
    bdb_fleet_write(out, INT64_MIN, INT64_MAX, &b2);
    assert_int_equal(b.len, b2.len);
    assert_memory_equal(b.data, b2.data, b.len);
    bdb_buf_free(&b);
    bdb_buf_free(&b2);
}

static void test_against_exact(void **st)
{
    (void)st;
    rng_state = 7;
    make_data();
    static int assign[NDEV * NSAMP];
    for (size_t i = 0; i < nsamples; i++)
        assign[i] = (int)(rng() % 3);
    for (int res = 0; res < 2; res++) {
        int64_t w = res ? DAY_MS : HOUR_MS;
        bdb_fleet part[3], a, b, c;
        for (int k = 0; k < 3; k++) {
            bdb_fleet_init(&part[k], w);
            build_flush(&part[k], k, assign, k != 1);
        }
        /* order 1: 0, 1, 2 */
        bdb_fleet_init(&a, w);
        for (int k = 0; k < 3; k++)
            assert_int_equal(bdb_fleet_merge(&a, &part[k]), BDB_OK);
        check_exact(&a);
        /* order 2: 2 into 1, then 0, each through the encoding */
        bdb_fleet_init(&b, w);
        for (int k = 2; k >= 0; k--) {
            roundtrip(&part[k], &c);
            assert_int_equal(bdb_fleet_merge(&b, &c), BDB_OK);
            bdb_fleet_free(&c);
        }
        check_exact(&b);
        /* the days also from the merged hours */
        if (res == 1) {
            bdb_fleet h;
            bdb_fleet_init(&h, HOUR_MS);
            for (int k = 0; k < 3; k++) {
                bdb_fleet ph;
                bdb_fleet_init(&ph, HOUR_MS);
                build_flush(&ph, k, assign, 1);
                assert_int_equal(bdb_fleet_merge(&h, &ph), BDB_OK);
                bdb_fleet_free(&ph);
            }
            bdb_fleet d;
            bdb_fleet_init(&d, DAY_MS);
            assert_int_equal(bdb_fleet_merge(&d, &h), BDB_OK);
            check_exact(&d);
            bdb_fleet_free(&d);
            bdb_fleet_free(&h);
        }
        for (int k = 0; k < 3; k++)
            bdb_fleet_free(&part[k]);
        bdb_fleet_free(&a);
        bdb_fleet_free(&b);
    }
}

static void test_device_counted_once(void **st)
{
    (void)st;
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR_MS);
    bdb_stats s;
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add(&s, 1.0), BDB_OK);
    /* three minutes of the same hour, from three "flushes", plus other devices */
    for (int m = 0; m < 3; m++)
        assert_int_equal(bdb_fleet_add(&f, "b", T0 + m * MIN_MS, &s), BDB_OK);
    assert_int_equal(bdb_fleet_add(&f, "c", T0, &s), BDB_OK);
    assert_int_equal(bdb_fleet_add(&f, "a", T0 + 59 * MIN_MS, &s), BDB_OK);
    assert_int_equal(bdb_fleet_add(&f, "ab", T0 + 5 * MIN_MS, &s), BDB_OK);
    assert_int_equal(bdb_fleet_add(&f, "b", T0 + HOUR_MS, &s), BDB_OK);
    bdb_stats empty;
    bdb_stats_init(&empty);
    assert_int_equal(bdb_fleet_add(&f, "z", T0, &empty), BDB_OK); /* no reading: no device */
    assert_int_equal(f.n, 2);
    bdb_fleet_row row;
    bdb_fleet_row_of(&f, &f.w[0], &row);
    assert_int_equal(row.devices, 4);
    assert_int_equal(row.readings, 6);
    assert_string_equal(f.w[0].dev[0], "a");
    assert_string_equal(f.w[0].dev[1], "ab");
    assert_string_equal(f.w[0].dev[3], "c");
    /* a merge with itself keeps the device set and doubles the readings */
    bdb_fleet g;
    bdb_fleet_init(&g, HOUR_MS);
    assert_int_equal(bdb_fleet_merge(&g, &f), BDB_OK);
    assert_int_equal(bdb_fleet_merge(&g, &f), BDB_OK);
    bdb_fleet_row_of(&g, &g.w[0], &row);
    assert_int_equal(row.devices, 4);
    assert_int_equal(row.readings, 12);
    /* widths: a day fleet takes hours, an hour fleet refuses a day */
    bdb_fleet day;
    bdb_fleet_init(&day, DAY_MS);
    assert_int_equal(bdb_fleet_merge(&day, &g), BDB_OK);
    assert_int_equal(day.n, 1);
    assert_int_equal(day.w[0].ndev, 4);
    assert_int_equal(bdb_fleet_merge(&g, &day), BDB_ERR_INVALID);
    bdb_fleet_free(&day);
    bdb_fleet_free(&g);
    bdb_fleet_free(&f);
}

/* A borrowing fleet keeps the caller's names (no copy, nothing freed: a stack name
 * freed would crash the sanitizer build), writes the same bytes as an owning one, and
 * refuses merges either way. */
static void test_borrowed_names(void **st)
{
    (void)st;
    char names[3][8] = {"d-2", "d-10", "d-1"};
    bdb_fleet own, bor;
    bdb_fleet_init(&own, HOUR_MS);
    bdb_fleet_init_borrowed(&bor, HOUR_MS);
    bdb_stats s;
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add(&s, 2.5), BDB_OK);
    for (int r = 0; r < 2; r++) /* twice: a repeated device is counted once */
        for (int i = 0; i < 3; i++) {
            assert_int_equal(bdb_fleet_add(&own, names[i], T0 + i * MIN_MS, &s), BDB_OK);
            assert_int_equal(bdb_fleet_add(&bor, names[i], T0 + i * MIN_MS, &s), BDB_OK);
        }
    assert_int_equal(bor.w[0].ndev, 3);
    assert_ptr_equal(bor.w[0].dev[0], names[2]); /* "d-1" < "d-10" < "d-2" */
    assert_ptr_equal(bor.w[0].dev[1], names[1]);
    assert_ptr_equal(bor.w[0].dev[2], names[0]);
    assert_ptr_not_equal(own.w[0].dev[0], names[2]);
    bdb_buf a, b;
    bdb_buf_init(&a);
    bdb_buf_init(&b);
    assert_int_equal(bdb_fleet_write(&own, INT64_MIN, INT64_MAX, &a), 1);
    assert_int_equal(bdb_fleet_write(&bor, INT64_MIN, INT64_MAX, &b), 1);
    assert_int_equal(a.len, b.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_int_equal(bdb_fleet_merge(&bor, &own), BDB_ERR_INVALID);
    assert_int_equal(bdb_fleet_merge(&own, &bor), BDB_ERR_INVALID);
    bdb_dec d;
    bdb_dec_init(&d, a.data, a.len);
    assert_int_equal(bdb_fleet_read(&bor, &d, INT64_MIN, INT64_MAX), BDB_ERR_INVALID);
    bdb_fleet_drop(&bor, T0);
    assert_int_equal(bor.n, 0);
    bdb_buf_free(&a);
    bdb_buf_free(&b);
    bdb_fleet_free(&bor);
    bdb_fleet_free(&own);
}

static void test_encoding_damage(void **st)
{
    (void)st;
    rng_state = 11;
    bdb_fleet f;
    bdb_fleet_init(&f, HOUR_MS);
    bdb_stats s;
    char name[32];
    for (int d = 0; d < 40; d++) {
        bdb_stats_init(&s);
        for (int i = 0; i <= d % 4; i++)
            assert_int_equal(bdb_stats_add(&s, (double)(rng() % 1000) / 7), BDB_OK);
        dev_name(d * 7, name, sizeof name);
        assert_int_equal(bdb_fleet_add(&f, name, T0 + (d % 5) * HOUR_MS, &s), BDB_OK);
    }
    bdb_buf b;
    bdb_buf_init(&b);
    assert_int_equal(bdb_fleet_write(&f, INT64_MIN, INT64_MAX, &b), 5);
    /* sub-range on read */
    bdb_fleet g;
    bdb_fleet_init(&g, HOUR_MS);
    bdb_dec d;
    bdb_dec_init(&d, b.data, b.len);
    assert_int_equal(bdb_fleet_read(&g, &d, T0 + HOUR_MS, T0 + 3 * HOUR_MS), BDB_OK);
    assert_int_equal(g.n, 2);
    /* every truncation fails */
    for (size_t n = 0; n < b.len; n++) {
        bdb_fleet_reset(&g);
        bdb_dec_init(&d, b.data, n);
        int rc = bdb_fleet_read(&g, &d, INT64_MIN, INT64_MAX);
        assert_int_equal(rc, BDB_ERR_CORRUPT);
        assert_int_equal(g.n, 0); /* nothing merged on failure */
    }
    /* every byte flip: rejected, or a valid fleet that re-encodes to the same bytes */
    size_t accepted = 0;
    for (size_t i = 0; i < b.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            b.data[i] ^= (uint8_t)(1u << bit);
            bdb_fleet_reset(&g);
            bdb_dec_init(&d, b.data, b.len);
            if (bdb_fleet_read(&g, &d, INT64_MIN, INT64_MAX) == BDB_OK && !bdb_dec_left(&d)) {
                bdb_buf b2;
                bdb_buf_init(&b2);
                bdb_fleet_write(&g, INT64_MIN, INT64_MAX, &b2);
                assert_int_equal(b2.len, b.len);
                assert_memory_equal(b2.data, b.data, b.len);
                for (size_t w = 0; w < g.n; w++)
                    assert_true(g.w[w].ndev >= 1 && g.w[w].ndev <= g.w[w].st.count);
                bdb_buf_free(&b2);
                accepted++;
            }
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    /* names carry no check of their own (the file's CRC does), so flips inside a name
     * that keep the order are accepted; the invariants above still hold */
    assert_true(accepted < b.len * 8);
    /* hand-made: names out of order, a shared prefix that is not the longest, zero
     * devices */
    bdb_buf h;
    bdb_buf_init(&h);
    bdb_stats_init(&s);
    assert_int_equal(bdb_stats_add(&s, 1), BDB_OK);
    assert_int_equal(bdb_stats_add(&s, 2), BDB_OK);
    const char *cases[][2] = {{"b", "a"}, {"a", "a"}, {"ab", "ac"}};
    const unsigned shared[] = {0, 0, 0};
    for (int c = 0; c < 3; c++) {
        bdb_buf_reset(&h);
        bdb_buf_put_uvarint(&h, 1);
        bdb_buf_put_varint(&h, 5);
        bdb_stats_write(&s, &h);
        bdb_buf_put_uvarint(&h, 2);
        bdb_buf_put_uvarint(&h, 0);
        bdb_buf_put_str(&h, cases[c][0], strlen(cases[c][0]));
        bdb_buf_put_uvarint(&h, shared[c]);
        bdb_buf_put_str(&h, cases[c][1], strlen(cases[c][1]));
        bdb_fleet_reset(&g);
        bdb_dec_init(&d, h.data, h.len);
        assert_int_equal(bdb_fleet_read(&g, &d, INT64_MIN, INT64_MAX), BDB_ERR_CORRUPT);
    }
    /* the canonical form of the last case shares one byte, and is accepted */
    bdb_buf_reset(&h);
    bdb_buf_put_uvarint(&h, 1);
    bdb_buf_put_varint(&h, 5);
    bdb_stats_write(&s, &h);
    bdb_buf_put_uvarint(&h, 2);
    bdb_buf_put_uvarint(&h, 0);
    bdb_buf_put_str(&h, "ab", 2);
    bdb_buf_put_uvarint(&h, 1);
    bdb_buf_put_str(&h, "c", 1);
    bdb_fleet_reset(&g);
    bdb_dec_init(&d, h.data, h.len);
    assert_int_equal(bdb_fleet_read(&g, &d, INT64_MIN, INT64_MAX), BDB_OK);
    assert_int_equal(g.w[0].ndev, 2);
    assert_string_equal(g.w[0].dev[1], "ac");
    /* more devices than readings */
    bdb_buf_reset(&h);
    bdb_buf_put_uvarint(&h, 1);
    bdb_buf_put_varint(&h, 5);
    bdb_stats_write(&s, &h);
    bdb_buf_put_uvarint(&h, 3);
    for (int i = 0; i < 3; i++) {
        bdb_buf_put_uvarint(&h, 0);
        bdb_buf_put_str(&h, (const char[]){(char)('a' + i)}, 1);
    }
    bdb_fleet_reset(&g);
    bdb_dec_init(&d, h.data, h.len);
    assert_int_equal(bdb_fleet_read(&g, &d, INT64_MIN, INT64_MAX), BDB_ERR_CORRUPT);
    bdb_buf_free(&h);
    bdb_buf_free(&b);
    bdb_fleet_free(&g);
    bdb_fleet_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_exact),
        cmocka_unit_test(test_device_counted_once),
        cmocka_unit_test(test_encoding_damage),
        cmocka_unit_test(test_borrowed_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
