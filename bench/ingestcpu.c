/* ingestcpu: the embedded engine's CPU per sample at bench/run's size H, without the
 * server, HTTP, the parser or the load generator.
 *
 * Writes DEVICES devices x 10 metrics (10 s reports, ROUNDS rounds, each device at its
 * own phase) into a fresh engine in DIR through bdb_db_write, in batches of 5,000
 * reports as bench/run's requests (half a round of H's 10,000 devices each), with a
 * fixed clock that follows the data. Every other pair of rounds, the first half of
 * the devices gets the later round first, as when one of bench/run's four connections
 * overtakes another: a quarter of the samples arrive late into their chunks' side
 * lists. Prints the process's CPU seconds (user + system) of the ingest per million
 * samples and the heap in use after it. One thread, WAL synced periodically: what the
 * engine's write path costs, which bench/run's figures mix with everything else on
 * two shared cores; alternate a change's build with its base's.
 *
 * Build: make && cc -O2 -std=c11 -D_GNU_SOURCE -Isrc -Iinclude -o /tmp/ingestcpu
 *        bench/ingestcpu.c build/libbucketdb.a $(pkg-config --libs libmicrohttpd
 *        jansson zlib libzstd libssl libcrypto) -lxxhash -lpthread -lm
 * Run:   /tmp/ingestcpu DIR [DEVICES=10000] [ROUNDS=780]      (DIR must not exist;
 *        H's WAL is about 0.8 GB: /dev/shm keeps the disk out of the figure) */
#include "engine_feed.h"
#include "model/batch.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define NMET 10
#define STEP_MS 10000
#define BATCH 5000
#define T0 INT64_C(1795881060288)

static const char *const metric_names[NMET] = {"sensor_f0", "sensor_f1", "sensor_f2", "sensor_f3",
                                               "sensor_f4", "sensor_f5", "sensor_f6", "sensor_f7",
                                               "sensor_f8", "sensor_f9"};

static int64_t now_ms;
static bdb_db *db;
static bdb_batch *b;
static size_t inbatch;

static double cpu_s(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void write_batch(void)
{
    if (!inbatch)
        return;
    int rc = bdb_db_write(db, "default", b);
    if (rc != BDB_OK) {
        fprintf(stderr, "ingestcpu: write failed: %s\n", bdb_strerror(rc));
        exit(1);
    }
    bdb_batch_reset(b);
    inbatch = 0;
}

static void report(long d, long r)
{
    char dev[32];
    int64_t ts = T0 + r * STEP_MS + (d * 7919) % STEP_MS;
    int n = snprintf(dev, sizeof dev, "dev-%05ld", d);
    bdb_batch_begin(b, dev, (size_t)n, ts, 0);
    for (int m = 0; m < NMET; m++)
        bdb_batch_metric(b, metric_names[m], strlen(metric_names[m]),
                         (double)((d * 31 + m * 7 + r * 3) % 5000) / 100.0);
    bdb_batch_end(b);
    if (ts > now_ms)
        now_ms = ts;
    if (++inbatch == BATCH)
        write_batch();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: ingestcpu DIR [DEVICES] [ROUNDS]\n");
        return 2;
    }
    long ndev = ef_arg("ingestcpu", argc, argv, 2, 10000, 2, 10000000);
    long nrounds = ef_arg("ingestcpu", argc, argv, 3, 780, 1, 100000);
    now_ms = T0;
    db = ef_open("ingestcpu", argv[1], &now_ms);
    b = bdb_batch_new();
    double c0 = cpu_s();
    long half = ndev / 2;
    for (long r = 0; r < nrounds; r += 2) {
        int swap = (r / 2) % 2 == 1 && r + 1 < nrounds;
        for (long k = 0; k < 2 && r + k < nrounds; k++) {
            for (long d = 0; d < half; d++)
                report(d, swap ? r + 1 - k : r + k);
            write_batch();
            for (long d = half; d < ndev; d++)
                report(d, r + k);
            write_batch();
        }
    }
    double c1 = cpu_s();
    struct mallinfo2 mi = mallinfo2();
    double ns = (double)ndev * NMET * (double)nrounds;
    printf("ingestcpu: %ld devices x %d metrics x %ld rounds (%.0f samples): ingest CPU %.2f s, "
           "%.3f CPU-s per million samples, heap after ingest %.1f MiB\n",
           ndev, NMET, nrounds, ns, c1 - c0, (c1 - c0) / (ns / 1e6),
           (double)(mi.uordblks + mi.hblkhd) / 1048576.0);
    bdb_batch_free(b);
    bdb_db_close(db);
    return 0;
}
