/* libFuzzer harness for the engine's own files as bdb_db_open meets them: the
 * catalog, the current-state file (latest) and the records inside WAL segments
 * (batch, bucket-history and hot-device records, decoded by db_apply_record during
 * replay). The first byte picks the file; the harness wraps the rest so that the
 * outer checks pass and the fuzzer reaches the decoders:
 *   0  catalog: the bytes plus their CRC-32 (format version 1, uncompressed image);
 *   1  latest:  header (magic, version, wal_upto 0, device count from the next byte,
 *              image length), a zstd frame of the remaining bytes, CRC-32;
 *   2  WAL:     records (u16le length + bytes each) appended to a fresh WAL with the
 *              real writer, so framing and checksums are valid.
 * Then the database is opened with the background thread off; when it opens, every
 * device is listed, snapshotted, read over its whole range and asked for its latest
 * state, and the database is closed (which flushes the head to block files).
 * Contract: open fails only with a documented error (CORRUPT, IO, INVALID, LIMIT); a
 * database that opened answers every read with OK, NOTFOUND or CORRUPT; no crash,
 * no leak, no undefined behaviour. */
#include "bucketdb/bdb.h"
#include "common/buf.h"
#include "fuzz_util.h"
#include "storage/embedded/core/db.h"
#include "storage/embedded/core/wal.h"

#include <zlib.h>
#include <zstd.h>

#define MAX_DEVICES 64

static void with_crc(bdb_buf *b)
{
    bdb_buf_put_u32le(b, (uint32_t)crc32(0, b->data, (uInt)b->len));
}

static void write_catalog(const char *dir, const uint8_t *p, size_t n)
{
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, p, n);
    with_crc(&b);
    char path[600];
    snprintf(path, sizeof path, "%s/catalog", dir);
    fz_write_file(path, b.data, b.len);
    bdb_buf_free(&b);
}

static void write_latest(const char *dir, const uint8_t *p, size_t n)
{
    uint64_t ndev = n ? p[0] : 0;
    if (n) {
        p++;
        n--;
    }
    bdb_buf b;
    bdb_buf_init(&b);
    bdb_buf_append(&b, "BDBLAT01", 8);
    bdb_buf_put_u32le(&b, 1);
    bdb_buf_put_u64le(&b, 0);
    bdb_buf_put_u64le(&b, ndev);
    bdb_buf_put_u64le(&b, n);
    size_t bound = ZSTD_compressBound(n);
    bdb_buf_reserve(&b, bound);
    size_t z = ZSTD_compress(b.data + b.len, bound, p, n, 1);
    FZ_CHECK(!ZSTD_isError(z));
    b.len += z;
    with_crc(&b);
    char path[600];
    snprintf(path, sizeof path, "%s/latest", dir);
    fz_write_file(path, b.data, b.len);
    bdb_buf_free(&b);
}

static void write_wal(const char *dir, const uint8_t *p, size_t n)
{
    char wdir[600];
    snprintf(wdir, sizeof wdir, "%s/wal", dir);
    bdb_wal_opts o = {.dir = wdir};
    bdb_wal *w;
    FZ_CHECK(bdb_wal_open(&o, &w) == BDB_OK);
    uint64_t lsn = 0;
    while (n >= 2) {
        size_t len = (size_t)p[0] | (size_t)p[1] << 8;
        p += 2;
        n -= 2;
        if (len > n)
            len = n;
        FZ_CHECK(bdb_wal_append(w, p, len, &lsn) == BDB_OK);
        p += len;
        n -= len;
    }
    FZ_CHECK(bdb_wal_sync(w, lsn) == BDB_OK);
    bdb_wal_close(w);
}

typedef struct {
    char tenant[MAX_DEVICES][256], device[MAX_DEVICES][256];
    size_t n;
} devlist;

static int on_device(void *ctx, const bdb_device_info *d)
{
    devlist *l = ctx;
    if (l->n >= MAX_DEVICES)
        return 1;
    snprintf(l->tenant[l->n], sizeof l->tenant[0], "%s", d->tenant);
    snprintf(l->device[l->n], sizeof l->device[0], "%s", d->device);
    l->n++;
    return 0;
}

static int on_latest(void *ctx, const bdb_latest *l)
{
    (void)ctx;
    (void)l;
    return 0;
}

static int on_count(void *ctx, const char *state, uint64_t devices)
{
    (void)ctx;
    FZ_CHECK(state != NULL);
    (void)devices;
    return 0;
}

static void read_everything(bdb_db *db)
{
    static devlist l;
    l.n = 0;
    int rc = bdb_db_list_devices(db, NULL, on_device, &l);
    FZ_CHECK(rc == BDB_OK || rc == 1);
    for (size_t i = 0; i < l.n; i++) {
        bdb_device_snapshot s;
        rc = bdb_db_device_snapshot(db, l.tenant[i], l.device[i], &s);
        FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_NOTFOUND);
        if (rc == BDB_OK) {
            size_t nm = s.nmetrics < 16 ? s.nmetrics : 16;
            bdb_samples out[16];
            memset(out, 0, sizeof out);
            uint64_t chunks = 0;
            rc = bdb_db_read(db, l.tenant[i], l.device[i], (const char *const *)s.metrics, nm,
                             INT64_MIN, INT64_MAX, out, &chunks);
            FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_NOTFOUND || rc == BDB_ERR_CORRUPT);
            for (size_t m = 0; m < nm; m++) {
                for (size_t k = 1; rc == BDB_OK && k < out[m].n; k++)
                    FZ_CHECK(out[m].ts[k - 1] < out[m].ts[k]);
                bdb_samples_free(&out[m]);
            }
            bdb_device_snapshot_free(&s);
        }
        rc = bdb_db_latest(db, l.tenant[i], l.device[i], on_latest, NULL);
        FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_NOTFOUND);
        uint64_t no_state;
        rc = bdb_db_state_counts(db, l.tenant[i], on_count, NULL, &no_state);
        FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_NOTFOUND);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/db", fz_scratch());
    tu_rm_rf(dir);
    FZ_CHECK(mkdir(dir, 0755) == 0);
    switch (data[0] % 3) {
    case 0:
        write_catalog(dir, data + 1, size - 1);
        break;
    case 1:
        write_latest(dir, data + 1, size - 1);
        break;
    default:
        write_wal(dir, data + 1, size - 1);
        break;
    }
    bdb_db_opts o;
    bdb_db_opts_default(&o);
    o.data_dir = dir;
    o.background = 0;
    bdb_db *db;
    int rc = bdb_db_open(&o, &db);
    FZ_CHECK(rc == BDB_OK || rc == BDB_ERR_CORRUPT || rc == BDB_ERR_IO || rc == BDB_ERR_INVALID ||
             rc == BDB_ERR_LIMIT);
    if (rc == BDB_OK) {
        read_everything(db);
        rc = bdb_db_close(db);
        FZ_CHECK(rc == BDB_OK);
    }
    return 0;
}
