/* headmem: the embedded engine's heap per live series, for shrinking the head at XL.
 *
 * Writes DEVICES devices x 10 metrics (10 s reports, REPORTS rounds, each device at
 * its own phase) into a fresh engine in DIR through bdb_db_write in batches of 1,000
 * reports, with a fixed clock that follows the data (no wall time), then prints the
 * heap in use (mallinfo2: uordblks + hblkhd) per series at the end of ingest, after a
 * flush, the peak seen at every 64th batch and the flush's peak (sampled every
 * 100 ms). Heap bytes are deterministic for a given
 * build and glibc, so a change's effect shows without a quiet machine; bench/run's XL
 * size remains the measure against VictoriaMetrics.
 *
 * Build: make && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -o /tmp/headmem
 *        bench/headmem.c build/libbucketdb.a $(pkg-config --libs libmicrohttpd jansson
 *        zlib libzstd libssl libcrypto) -lxxhash -lpthread -lm
 * Run:   /tmp/headmem DIR [DEVICES=100000] [REPORTS=6]      (DIR must not exist) */
#include "engine_feed.h"
#include "model/batch.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NMET 10
#define STEP_MS 10000
#define T0 INT64_C(1699920000000) /* 2023-11-14T00:00:00Z */

static const char *const metric_names[NMET] = {
    "env.temp",  "env.humidity", "env.pressure", "pwr.voltage", "pwr.current",
    "pwr.power", "net.rssi",     "sys.cpu",      "sys.mem",     "bat.level"};

static int64_t now_ms;
static uint64_t heap(void)
{
    struct mallinfo2 m = mallinfo2();
    return (uint64_t)m.uordblks + (uint64_t)m.hblkhd;
}

/* The flush runs on the calling thread: a sampler thread keeps the heap's peak. */
static atomic_int sampling;
static _Atomic uint64_t flush_peak;
static void *sampler(void *arg)
{
    (void)arg;
    while (atomic_load(&sampling)) {
        uint64_t h = heap();
        if (h > atomic_load(&flush_peak))
            atomic_store(&flush_peak, h);
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: headmem DIR [DEVICES] [REPORTS]\n");
        return 2;
    }
    long ndev = ef_arg("headmem", argc, argv, 2, 100000, 1, 10000000);
    long nrep = ef_arg("headmem", argc, argv, 3, 6, 1, 10000);
    now_ms = T0;
    uint64_t base = heap();
    bdb_db *db = ef_open("headmem", argv[1], &now_ms);
    uint64_t opened = heap(), peak = opened;
    bdb_batch *b = bdb_batch_new();
    char dev[32];
    size_t inbatch = 0, lineno = 0, writes = 0;
    for (long r = 0; r < nrep; r++) {
        for (long d = 0; d < ndev; d++) {
            int64_t ts = T0 + r * STEP_MS + (d * 7919) % STEP_MS;
            int n = snprintf(dev, sizeof dev, "dev-%07ld", d);
            bdb_batch_begin(b, dev, (size_t)n, ts, lineno++);
            for (int m = 0; m < NMET; m++)
                bdb_batch_metric(b, metric_names[m], strlen(metric_names[m]),
                                 (double)((d * 31 + m * 7 + r) % 5000) / 100.0);
            bdb_batch_end(b);
            if (++inbatch == 1000 || (r == nrep - 1 && d == ndev - 1)) {
                now_ms = ts;
                int rc = bdb_db_write(db, "acme", b);
                if (rc != BDB_OK) {
                    fprintf(stderr, "headmem: write failed: %d\n", rc);
                    return 1;
                }
                bdb_batch_reset(b);
                inbatch = 0;
                /* mallinfo2 walks the allocator's lists: sample it, not every batch */
                if (++writes % 64 == 0) {
                    uint64_t h = heap();
                    if (h > peak)
                        peak = h;
                }
            }
        }
    }
    uint64_t ingested = heap();
    if (ingested > peak)
        peak = ingested;
    double nser = (double)ndev * NMET;
    atomic_store(&flush_peak, ingested);
    atomic_store(&sampling, 1);
    pthread_t th;
    pthread_create(&th, NULL, sampler, NULL);
    int frc = bdb_db_flush(db);
    atomic_store(&sampling, 0);
    pthread_join(th, NULL);
    if (frc != BDB_OK) {
        fprintf(stderr, "headmem: flush failed\n");
        return 1;
    }
    uint64_t flushed = heap();
    printf("headmem: %ld devices x %d metrics, %ld reports each (%.0f series, %.0f samples)\n",
           ndev, NMET, nrep, nser, nser * (double)nrep);
    printf("heap at open           %10.1f MiB\n", (double)(opened - base) / 1048576.0);
    printf("heap after ingest      %10.1f MiB  %7.1f B/series\n",
           (double)(ingested - base) / 1048576.0, (double)(ingested - opened) / nser);
    printf("heap peak during ingest %9.1f MiB  %7.1f B/series\n", (double)(peak - base) / 1048576.0,
           (double)(peak - opened) / nser);
    printf("heap peak during flush  %9.1f MiB  %7.1f B/series (sampled every 100 ms)\n",
           (double)(atomic_load(&flush_peak) - base) / 1048576.0,
           (double)(atomic_load(&flush_peak) - opened) / nser);
    printf("heap after flush       %10.1f MiB  %7.1f B/series\n",
           (double)(flushed - base) / 1048576.0, (double)(flushed - opened) / nser);
    bdb_batch_free(b);
    bdb_db_close(db);
    return 0;
}
