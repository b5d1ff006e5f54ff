/* loadgen: load generator for bench/run.
 *
 *   loadgen write [options]   sends a device fleet's line-protocol bodies over N
 *                             keep-alive HTTP/1.1 connections (one thread each) and
 *                             counts the samples acknowledged with 2xx. The bodies are
 *                             generated in memory before the timed phase (--gen ahead),
 *                             or by the sending threads as they go (--gen stream), which
 *                             --pace also spreads over the wall clock, one round of all
 *                             devices per interval.
 *   loadgen query [options]   sends GET queries one after another on one keep-alive
 *                             connection and reports latency percentiles.
 *
 * Every loop is bounded by a count and a wall-clock limit. Only numeric IPv4 hosts are
 * accepted and the bench passes 127.0.0.1. Results are printed as one "RESULT k=v ..."
 * line on stdout; progress and errors go to stderr.
 *
 * Built by bench/run with: cc -O2 -pthread bench/loadgen.c -o ... -lm
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------- utilities */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void die(const char *msg)
{
    fprintf(stderr, "loadgen: %s\n", msg);
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory");
    return p;
}

/* Growable byte buffer. */
typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void buf_reserve(buf *b, size_t extra)
{
    if (b->len + extra <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra)
        cap *= 2;
    char *np = realloc(b->p, cap);
    if (!np)
        die("out of memory");
    b->p = np;
    b->cap = cap;
}

static void buf_add(buf *b, const void *d, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->p + b->len, d, n);
    b->len += n;
}

/* xorshift64*: deterministic, so both peers receive byte-identical bodies. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static double rng_unit(uint64_t *s)
{
    return (double)(rng_next(s) >> 11) / 9007199254740992.0;
}

/* ---------------------------------------------------------------- HTTP client */

typedef struct {
    int fd;
    char host[64];
    int port;
    buf in;     /* bytes read but not consumed */
    double tmo; /* socket timeout, seconds */
} conn;

static int conn_open(conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct timeval tv = {(time_t)c->tmo, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)c->port);
    if (inet_pton(AF_INET, c->host, &sa.sin_addr) != 1) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    c->in.len = 0;
    return 0;
}

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->in.len = 0;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Reads more bytes into c->in; returns bytes read, 0 on EOF, -1 on error. */
static ssize_t fill(conn *c)
{
    buf_reserve(&c->in, 65536);
    for (;;) {
        ssize_t r = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r > 0)
            c->in.len += (size_t)r;
        return r;
    }
}

static void consume(conn *c, size_t n)
{
    memmove(c->in.p, c->in.p + n, c->in.len - n);
    c->in.len -= n;
}

/* Ensures at least n bytes are buffered. */
static int need(conn *c, size_t n)
{
    while (c->in.len < n)
        if (fill(c) <= 0)
            return -1;
    return 0;
}

/* Finds "\r\n" from offset off; waits for more data as needed. Returns index or -1. */
static ssize_t find_crlf(conn *c, size_t off)
{
    for (;;) {
        if (c->in.len >= off + 2) {
            char *e = memmem(c->in.p + off, c->in.len - off, "\r\n", 2);
            if (e)
                return e - c->in.p;
        }
        if (fill(c) <= 0)
            return -1;
    }
}

static int header_has(const char *h, size_t hl, const char *name, const char *val)
{
    /* case-insensitive search for "\r\nname:" then val in the value */
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl + 3 < hl; i++) {
        if (h[i] == '\r' && h[i + 1] == '\n' && !strncasecmp(h + i + 2, name, nl) &&
            h[i + 2 + nl] == ':') {
            const char *v = h + i + 3 + nl;
            const char *e = memmem(v, hl - (size_t)(v - h), "\r\n", 2);
            size_t vl = e ? (size_t)(e - v) : hl - (size_t)(v - h);
            if (!val)
                return 1;
            for (size_t j = 0; j + strlen(val) <= vl; j++)
                if (!strncasecmp(v + j, val, strlen(val)))
                    return 1;
            return 0;
        }
    }
    return 0;
}

static long long header_num(const char *h, size_t hl, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i + nl + 3 < hl; i++)
        if (h[i] == '\r' && h[i + 1] == '\n' && !strncasecmp(h + i + 2, name, nl) &&
            h[i + 2 + nl] == ':')
            return strtoll(h + i + 3 + nl, NULL, 10);
    return -1;
}

/* Reads one response. Returns the status (or -1 on a transport error); the body is
 * appended to *body when body != NULL. Sets *closing when the server closes. */
static int read_response(conn *c, int head_req, buf *body, int *closing)
{
    size_t hend;
    for (;;) {
        char *e = c->in.len >= 4 ? memmem(c->in.p, c->in.len, "\r\n\r\n", 4) : NULL;
        if (e) {
            hend = (size_t)(e - c->in.p) + 4;
            break;
        }
        if (c->in.len > (1u << 20) || fill(c) <= 0)
            return -1;
    }
    if (hend < 12 || strncmp(c->in.p, "HTTP/1.", 7))
        return -1;
    int status = atoi(c->in.p + 9);
    /* copy the header: the buffer moves as the body is read */
    char *h = xmalloc(hend + 1);
    memcpy(h, c->in.p, hend);
    h[hend] = 0;
    consume(c, hend);
    *closing = header_has(h, hend, "Connection", "close") || !strncmp(h, "HTTP/1.0", 8);
    int chunked = header_has(h, hend, "Transfer-Encoding", "chunked");
    long long clen = header_num(h, hend, "Content-Length");
    free(h);
    if (head_req || status == 204 || status == 304 || (status >= 100 && status < 200))
        return status;
    if (chunked) {
        for (;;) {
            ssize_t le = find_crlf(c, 0);
            if (le < 0)
                return -1;
            unsigned long long n = strtoull(c->in.p, NULL, 16);
            consume(c, (size_t)le + 2);
            if (n == 0) {
                /* trailers, ending with an empty line */
                for (;;) {
                    ssize_t t = find_crlf(c, 0);
                    if (t < 0)
                        return -1;
                    consume(c, (size_t)t + 2);
                    if (t == 0)
                        break;
                }
                return status;
            }
            if (need(c, n + 2) < 0)
                return -1;
            if (body)
                buf_add(body, c->in.p, n);
            consume(c, n + 2);
        }
    }
    if (clen >= 0) {
        size_t left = (size_t)clen;
        while (left) {
            if (c->in.len == 0 && fill(c) <= 0)
                return -1;
            size_t take = c->in.len < left ? c->in.len : left;
            if (body)
                buf_add(body, c->in.p, take);
            consume(c, take);
            left -= take;
        }
        return status;
    }
    /* no length: body runs to EOF */
    for (;;) {
        if (body)
            buf_add(body, c->in.p, c->in.len);
        c->in.len = 0;
        ssize_t r = fill(c);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
    }
    *closing = 1;
    return status;
}

/* One request/response on a keep-alive connection, reconnecting once if a kept-alive
 * connection turns out to be closed before anything was read. Returns the status or -1. */
static int http_do(conn *c, const char *method, const char *target, const char *ctype,
                   const char *data, size_t dlen, buf *body)
{
    char hdr[4096];
    for (int attempt = 0; attempt < 2; attempt++) {
        int fresh = 0;
        if (c->fd < 0) {
            if (conn_open(c) < 0)
                return -1;
            fresh = 1;
        }
        int hl;
        if (data)
            hl = snprintf(hdr, sizeof hdr,
                          "%s %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: bucketdb-bench\r\n"
                          "Content-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                          method, target, c->host, c->port, ctype, dlen);
        else
            hl = snprintf(hdr, sizeof hdr,
                          "%s %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: bucketdb-bench\r\n"
                          "Accept-Encoding: identity\r\n\r\n",
                          method, target, c->host, c->port);
        if (hl <= 0 || (size_t)hl >= sizeof hdr)
            return -1;
        size_t body_mark = body ? body->len : 0;
        if (send_all(c->fd, hdr, (size_t)hl) < 0 || (data && send_all(c->fd, data, dlen) < 0)) {
            conn_close(c);
            if (fresh)
                return -1;
            continue;
        }
        int closing = 0;
        int st = read_response(c, !strcmp(method, "HEAD"), body, &closing);
        if (st < 0) {
            conn_close(c);
            if (body)
                body->len = body_mark;
            if (fresh || data) /* never resend a write: it may have been applied */
                return -1;
            continue;
        }
        if (closing)
            conn_close(c);
        return st;
    }
    return -1;
}

/* ---------------------------------------------------------------- write mode */

/* The fleet: one line per device and round, round r of every device before round
 * r + 1, `lines` lines per request, generated request by request in that order from
 * one random stream (the seed's): the initial values of every device and metric, then
 * one step per line and metric. The bytes depend only on the options, so every peer
 * and every repetition gets the same bodies, whether they are generated before the
 * timed phase (--gen ahead) or by the sending threads while it runs (--gen stream:
 * a lock hands out the requests in order and each thread generates the one it took).
 *
 * Values are random walks with two decimals, kept in hundredths (integers) and printed
 * by hand: the same bytes as printf("%.2f") of the doubles this generator used before
 * (floor(u * 10000) / 100, then round((v + step) * 100) / 100 with step =
 * floor(u * 101 - 50) / 100), at a fraction of the CPU. */
typedef struct {
    long devices;
    int metrics;
    long lines;
    long long interval;
    long long t0; /* device d reports round r at t0 + r * interval + phase(d) */
    unsigned long long total_lines, next_line;
    uint64_t rs;
    int32_t *cents; /* devices x metrics current values, in hundredths */
    const char *meas;
    size_t meas_len;
    char (*fname)[16]; /* "f0=", ",f1=", ...: field name with its separators */
    uint8_t *fname_len;
    size_t line_max; /* bytes one line can take at most */
    long long first_ts, last_ts;
} fleet;

static char *put_uint(char *p, unsigned long long v, int min_digits)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n < min_digits && n < (int)sizeof tmp)
        tmp[n++] = '0';
    while (n)
        *p++ = tmp[--n];
    return p;
}

static char *put_cents(char *p, int32_t c)
{
    uint32_t a = c < 0 ? (uint32_t)(-(int64_t)c) : (uint32_t)c;
    if (c < 0)
        *p++ = '-';
    p = put_uint(p, a / 100, 1);
    *p++ = '.';
    *p++ = (char)('0' + (a % 100) / 10);
    *p++ = (char)('0' + a % 10);
    return p;
}

static void fleet_init(fleet *f, long devices, int metrics, long lines, long long interval,
                       long long t0, unsigned long long total_lines, uint64_t seed,
                       const char *meas)
{
    memset(f, 0, sizeof *f);
    f->devices = devices;
    f->metrics = metrics;
    f->lines = lines;
    f->interval = interval;
    f->t0 = t0;
    f->total_lines = total_lines;
    f->rs = seed * 0x9E3779B97F4A7C15ULL + 1;
    f->meas = meas;
    f->meas_len = strlen(meas);
    f->first_ts = INT64_MAX;
    f->last_ts = INT64_MIN;
    size_t nv = (size_t)devices * (size_t)metrics;
    f->cents = xmalloc(sizeof(int32_t) * nv);
    for (size_t i = 0; i < nv; i++)
        f->cents[i] = (int32_t)floor(rng_unit(&f->rs) * 10000.0); /* 0.00 .. 99.99 */
    f->fname = xmalloc(sizeof *f->fname * (size_t)metrics);
    f->fname_len = xmalloc((size_t)metrics);
    for (int m = 0; m < metrics; m++)
        f->fname_len[m] =
            (uint8_t)snprintf(f->fname[m], sizeof f->fname[m], "%sf%d=", m ? "," : "", m);
    /* measurement + ",device=dev" + index + ' ' + fields (name, sign, 10 digits, '.',
     * 2 decimals) + ' ' + timestamp (sign and 19 digits) + '\n' */
    f->line_max = f->meas_len + 11 + 20 + 1 + (size_t)metrics * (16 + 14) + 1 + 20 + 1;
}

static void fleet_free(fleet *f)
{
    free(f->cents);
    free(f->fname);
    free(f->fname_len);
}

/* Appends the next request's body to b. Returns its samples, 0 when all is sent. */
static uint32_t fleet_next(fleet *f, buf *b)
{
    uint32_t samples = 0;
    buf_reserve(b, (size_t)f->lines * f->line_max < ((size_t)64 << 20)
                       ? (size_t)f->lines * f->line_max
                       : f->line_max);
    for (long k = 0; k < f->lines && f->next_line < f->total_lines; k++, f->next_line++) {
        long r = (long)(f->next_line / (unsigned long long)f->devices);
        long d = (long)(f->next_line % (unsigned long long)f->devices);
        /* each device reports at its own phase inside the interval */
        long long ts = f->t0 + (long long)r * f->interval + (long long)((d * 7919L) % f->interval);
        if (ts < f->first_ts)
            f->first_ts = ts;
        if (ts > f->last_ts)
            f->last_ts = ts;
        buf_reserve(b, f->line_max);
        char *p = b->p + b->len;
        memcpy(p, f->meas, f->meas_len);
        p += f->meas_len;
        memcpy(p, ",device=dev", 11);
        p = put_uint(p + 11, (unsigned long long)d, 7);
        *p++ = ' ';
        int32_t *v = &f->cents[(size_t)d * (size_t)f->metrics];
        for (int m = 0; m < f->metrics; m++) {
            /* random walk in steps of -0.50 .. +0.50 */
            v[m] += (int32_t)floor(rng_unit(&f->rs) * 101.0 - 50.0);
            memcpy(p, f->fname[m], f->fname_len[m]);
            p = put_cents(p + f->fname_len[m], v[m]);
        }
        *p++ = ' ';
        if (ts < 0) {
            *p++ = '-';
            ts = -ts;
        }
        p = put_uint(p, (unsigned long long)ts, 1);
        *p++ = '\n';
        b->len = (size_t)(p - b->p);
        samples += (uint32_t)f->metrics;
    }
    return samples;
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double process_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

typedef struct {
    char *data;
    size_t len;
    uint32_t samples;
} request;

typedef struct {
    const char *host;
    int port;
    const char *path;
    /* --gen ahead: every body generated before the timed phase */
    request *reqs;
    size_t nreqs;
    atomic_size_t next;
    /* --gen stream: the sending threads generate the next request under gen_lock */
    fleet *gen;
    pthread_mutex_t gen_lock;
    size_t gen_req;
    double gen_cpu; /* under gen_lock */
    /* --pace: line L is due at s0 + L * line_s (one round per interval) */
    int pace;
    double s0, line_s;
    pthread_mutex_t lag_lock;
    double lag_max, lag_sum, last_due;
    unsigned long long lag_n;
    double deadline;
    atomic_ullong ok_samples, fail_samples, ok_reqs, fail_reqs, bytes_sent;
    atomic_int first_errors, threads_done;
    int verbose;
} wctx;

/* Sleeps until monotonic time t (or the deadline); returns 0 if t was reached. */
static int sleep_until(double t, double deadline)
{
    for (int i = 0; i < 1000000; i++) {
        double n = now_s();
        if (n >= t)
            return 0;
        if (n >= deadline)
            return -1;
        double d = t - n;
        if (d > 0.2)
            d = 0.2;
        struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return -1;
}

static void *writer(void *arg)
{
    wctx *w = arg;
    conn c = {.fd = -1, .port = w->port, .tmo = 120};
    snprintf(c.host, sizeof c.host, "%s", w->host);
    buf resp = {0}, own = {0};
    for (;;) {
        if (now_s() >= w->deadline)
            break;
        size_t i;
        const char *data;
        size_t len;
        uint32_t samples;
        if (w->reqs) {
            i = atomic_fetch_add(&w->next, 1);
            if (i >= w->nreqs)
                break;
            data = w->reqs[i].data;
            len = w->reqs[i].len;
            samples = w->reqs[i].samples;
        } else {
            pthread_mutex_lock(&w->gen_lock);
            if (w->gen->next_line >= w->gen->total_lines) {
                pthread_mutex_unlock(&w->gen_lock);
                break;
            }
            i = w->gen_req++;
            unsigned long long first = w->gen->next_line;
            double c0 = thread_cpu_s();
            own.len = 0;
            samples = fleet_next(w->gen, &own);
            w->gen_cpu += thread_cpu_s() - c0;
            pthread_mutex_unlock(&w->gen_lock);
            data = own.p;
            len = own.len;
            if (w->pace) {
                double due = w->s0 + (double)first * w->line_s;
                if (sleep_until(due, w->deadline) < 0)
                    break; /* past the time limit: the rest is unsent */
                double lag = now_s() - due;
                pthread_mutex_lock(&w->lag_lock);
                if (lag > w->lag_max)
                    w->lag_max = lag;
                w->lag_sum += lag;
                w->lag_n++;
                if (due > w->last_due)
                    w->last_due = due;
                pthread_mutex_unlock(&w->lag_lock);
            }
        }
        resp.len = 0;
        int st = http_do(&c, "POST", w->path, "text/plain; charset=utf-8", data, len, &resp);
        if (st >= 200 && st < 300) {
            atomic_fetch_add(&w->ok_samples, samples);
            atomic_fetch_add(&w->ok_reqs, 1);
            atomic_fetch_add(&w->bytes_sent, len);
        } else {
            atomic_fetch_add(&w->fail_samples, samples);
            atomic_fetch_add(&w->fail_reqs, 1);
            if (atomic_fetch_add(&w->first_errors, 1) < 5)
                fprintf(stderr, "loadgen: request %zu failed: status %d %.*s\n", i, st,
                        (int)(resp.len > 300 ? 300 : resp.len), resp.p ? resp.p : "");
            if (st < 0)
                usleep(100000); /* transport error: do not spin */
        }
    }
    conn_close(&c);
    free(resp.p);
    free(own.p);
    free(c.in.p);
    atomic_fetch_add(&w->threads_done, 1);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr,
            "usage:\n"
            "  loadgen write --port P [--host 127.0.0.1] [--devices 10000] [--metrics 10]\n"
            "                [--rounds 30] [--interval-ms 10000] [--end-ms MS] [--lines 5000]\n"
            "                [--conns 4] [--max-samples N] [--time-limit S]\n"
            "                [--gen ahead|stream] [--pace]\n"
            "                [--path /write?precision=ms] [--measurement sensor] [--seed 1]\n"
            "  loadgen query --port P --kind a|b --peer bucketdb|vm [--host 127.0.0.1]\n"
            "                [--devices 10000] [--metrics 10] [--count 200] [--warmup 10]\n"
            "                [--from-ms MS --to-ms MS] [--time-limit S] [--seed 7]\n"
            "                [--measurement sensor]\n"
            "\n"
            "  --gen ahead    generate every body before the timed phase (default)\n"
            "  --gen stream   the sending threads generate each body when they take it\n"
            "  --pace         (implies --gen stream) send at the wall clock: one round of\n"
            "                 all devices per interval, spread evenly; round 0's event times\n"
            "                 are the interval before the start; --end-ms is ignored\n");
    exit(2);
}

static const char *argval(int argc, char **argv, const char *name, const char *def)
{
    for (int i = 2; i + 1 < argc; i++)
        if (!strcmp(argv[i], name))
            return argv[i + 1];
    return def;
}

static int argflag(int argc, char **argv, const char *name)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], name))
            return 1;
    return 0;
}

static int cmd_write(int argc, char **argv)
{
    const char *host = argval(argc, argv, "--host", "127.0.0.1");
    int port = atoi(argval(argc, argv, "--port", "0"));
    long devices = atol(argval(argc, argv, "--devices", "10000"));
    int metrics = atoi(argval(argc, argv, "--metrics", "10"));
    long rounds = atol(argval(argc, argv, "--rounds", "30"));
    long interval = atol(argval(argc, argv, "--interval-ms", "10000"));
    long long end_ms = atoll(argval(argc, argv, "--end-ms", "0"));
    long lines = atol(argval(argc, argv, "--lines", "5000"));
    int conns = atoi(argval(argc, argv, "--conns", "4"));
    unsigned long long max_samples = strtoull(argval(argc, argv, "--max-samples", "0"), NULL, 10);
    double tlimit = atof(argval(argc, argv, "--time-limit", "120"));
    const char *path = argval(argc, argv, "--path", "/write?precision=ms");
    const char *meas = argval(argc, argv, "--measurement", "sensor");
    uint64_t seed = strtoull(argval(argc, argv, "--seed", "1"), NULL, 10);
    const char *genmode = argval(argc, argv, "--gen", "ahead");
    int pace = argflag(argc, argv, "--pace");
    int stream = pace || !strcmp(genmode, "stream");
    if (port <= 0 || devices <= 0 || devices > 100000000 || metrics <= 0 || metrics > 1000 ||
        rounds <= 0 || rounds > 10000000 || interval <= 0 || lines <= 0 || lines > 1000000 ||
        conns <= 0 || conns > 256 || tlimit <= 0 || strlen(meas) > 200 ||
        (strcmp(genmode, "ahead") && strcmp(genmode, "stream")))
        usage();
    unsigned long long total_lines = (unsigned long long)devices * (unsigned long long)rounds;
    if (max_samples) {
        unsigned long long cap = max_samples / (unsigned long long)metrics;
        if (cap < total_lines)
            total_lines = cap;
    }
    if (total_lines == 0)
        die("nothing to send");
    unsigned long long planned = total_lines * (unsigned long long)metrics;
    if (pace)
        end_ms = wall_ms() + (long long)(rounds - 1) * interval; /* round 0: the last interval */
    else if (end_ms <= 0)
        end_ms = wall_ms() - 60000;
    long long t0 = end_ms - (long long)rounds * interval;
    fleet f;
    fleet_init(&f, devices, metrics, lines, interval, t0, total_lines, seed, meas);

    wctx w = {.host = host, .port = port, .path = path, .pace = pace};
    atomic_init(&w.next, 0);
    pthread_mutex_init(&w.gen_lock, NULL);
    pthread_mutex_init(&w.lag_lock, NULL);
    size_t nreqs =
        (size_t)((total_lines + (unsigned long long)lines - 1) / (unsigned long long)lines);
    double gen_s = 0, gen_cpu = 0;
    if (!stream) {
        /* ---- pre-generation (not timed) */
        double g0 = now_s(), c0 = thread_cpu_s();
        w.reqs = calloc(nreqs, sizeof *w.reqs);
        if (!w.reqs)
            die("out of memory");
        w.nreqs = nreqs;
        size_t total_bytes = 0;
        for (size_t q = 0; q < nreqs; q++) {
            buf b = {0};
            w.reqs[q].samples = fleet_next(&f, &b);
            w.reqs[q].data = b.p;
            w.reqs[q].len = b.len;
            total_bytes += b.len;
        }
        gen_s = now_s() - g0;
        gen_cpu = thread_cpu_s() - c0;
        fprintf(stderr,
                "loadgen: generated %zu requests, %llu samples, %.1f MiB in %.2f s (not timed)\n",
                nreqs, planned, (double)total_bytes / 1048576.0, gen_s);
    } else {
        w.gen = &f;
        fprintf(stderr,
                "loadgen: %zu requests, %llu samples, generated by the sending threads as they "
                "go%s\n",
                nreqs, planned, pace ? "; paced at one round per interval" : "");
    }

    /* ---- timed phase */
    pthread_t *th = xmalloc(sizeof(pthread_t) * (size_t)conns);
    double pc0 = process_cpu_s();
    double s0 = now_s();
    w.s0 = s0;
    w.line_s = (double)interval / 1000.0 / (double)devices;
    w.deadline = s0 + tlimit;
    for (int i = 0; i < conns; i++)
        if (pthread_create(&th[i], NULL, writer, &w) != 0)
            die("pthread_create failed");
    /* progress once a minute; the writers stop at the deadline, and a request in flight
     * ends within the socket time-out (120 s), so this loop is bounded */
    double next_report = s0 + 60;
    while (atomic_load(&w.threads_done) < conns && now_s() < w.deadline + 240) {
        usleep(100000);
        if (now_s() >= next_report) {
            next_report += 60;
            pthread_mutex_lock(&w.lag_lock);
            double lag_max = w.lag_max;
            pthread_mutex_unlock(&w.lag_lock);
            fprintf(stderr, "loadgen: %.0f s: %llu samples acknowledged, %llu failed%s",
                    now_s() - s0, (unsigned long long)atomic_load(&w.ok_samples),
                    (unsigned long long)atomic_load(&w.fail_samples), pace ? "" : "\n");
            if (pace)
                fprintf(stderr, ", largest lag so far %.2f s\n", lag_max);
        }
    }
    for (int i = 0; i < conns; i++)
        pthread_join(th[i], NULL);
    double el = now_s() - s0;
    double timed_cpu = process_cpu_s() - pc0;
    if (stream)
        gen_cpu = w.gen_cpu;
    unsigned long long ok = atomic_load(&w.ok_samples), fail = atomic_load(&w.fail_samples);
    unsigned long long sent = ok + fail;
    /* paced: how late the sends were against the schedule, and how long after the last
     * request was due its answer (and every other) had come; kept up = every request
     * sent less than one interval late and nothing left unsent. The accepted rate of a
     * paced run is over the whole schedule (rounds x interval), not just until the last
     * answer, so a server that keeps up shows the offered rate. */
    double sched_s = (double)total_lines * w.line_s;
    double behind_end = pace && w.lag_n ? el - (w.last_due - s0) : 0;
    double rate_s = pace && sched_s > el ? sched_s : el;
    double lag_mean = w.lag_n ? w.lag_sum / (double)w.lag_n : 0;
    int kept_up = pace ? (sent == planned && w.lag_max < (double)interval / 1000.0) : -1;
    printf("RESULT planned_samples=%llu ok_samples=%llu failed_samples=%llu unsent_samples=%llu "
           "ok_requests=%llu failed_requests=%llu seconds=%.3f samples_per_s=%.0f "
           "mib_per_s=%.1f timed_out=%d first_ts=%lld last_ts=%lld gen=%s gen_seconds=%.2f "
           "gen_cpu_s=%.2f timed_cpu_s=%.2f paced=%d offered_per_s=%.0f lag_max_s=%.3f "
           "lag_mean_s=%.3f behind_end_s=%.3f kept_up=%d\n",
           planned, ok, fail, planned - sent, (unsigned long long)atomic_load(&w.ok_reqs),
           (unsigned long long)atomic_load(&w.fail_reqs), el, (double)ok / rate_s,
           (double)atomic_load(&w.bytes_sent) / 1048576.0 / el, sent < planned,
           f.first_ts == INT64_MAX ? 0 : f.first_ts, f.last_ts == INT64_MIN ? 0 : f.last_ts,
           stream ? "stream" : "ahead", gen_s, gen_cpu, timed_cpu, pace,
           pace ? (double)planned / sched_s : 0.0, w.lag_max, lag_mean, behind_end, kept_up);
    if (w.reqs)
        for (size_t q = 0; q < nreqs; q++)
            free(w.reqs[q].data);
    free(w.reqs);
    free(th);
    fleet_free(&f);
    return fail || sent < planned ? 1 : 0;
}

/* ---------------------------------------------------------------- query mode */

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *sorted, size_t n, double p)
{
    if (n == 0)
        return NAN;
    /* nearest-rank */
    size_t k = (size_t)ceil(p / 100.0 * (double)n);
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

/* Samples in a bucketdb JSON answer: its "count" field. */
static long count_bucketdb(const buf *b)
{
    const char *k = b->len ? memmem(b->p, b->len, "\"count\":", 8) : NULL;
    return k ? strtol(k + 8, NULL, 10) : -1;
}

/* Samples in a VictoriaMetrics /api/v1/export answer (JSON lines): the number of
 * entries of each line's "timestamps" array. */
static long count_vm(const buf *b)
{
    long n = 0;
    const char *p = b->p, *end = b->p + b->len;
    while (p && p < end) {
        const char *k = memmem(p, (size_t)(end - p), "\"timestamps\":[", 14);
        if (!k)
            break;
        k += 14;
        if (k < end && *k != ']')
            n++;
        while (k < end && *k != ']') {
            if (*k == ',')
                n++;
            k++;
        }
        p = k;
    }
    return n;
}

/* Percent-encodes s into out. */
static void urlenc(const char *s, char *out, size_t cap)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '-' || ch == '_' || ch == '.' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = 0;
}

static int cmd_query(int argc, char **argv)
{
    const char *host = argval(argc, argv, "--host", "127.0.0.1");
    int port = atoi(argval(argc, argv, "--port", "0"));
    const char *kind = argval(argc, argv, "--kind", "");
    const char *peer = argval(argc, argv, "--peer", "");
    long devices = atol(argval(argc, argv, "--devices", "10000"));
    int metrics = atoi(argval(argc, argv, "--metrics", "10"));
    long count = atol(argval(argc, argv, "--count", "200"));
    long warmup = atol(argval(argc, argv, "--warmup", "10"));
    long long from = atoll(argval(argc, argv, "--from-ms", "0"));
    long long to = atoll(argval(argc, argv, "--to-ms", "0"));
    double tlimit = atof(argval(argc, argv, "--time-limit", "120"));
    const char *meas = argval(argc, argv, "--measurement", "sensor");
    uint64_t seed = strtoull(argval(argc, argv, "--seed", "7"), NULL, 10);
    int vm = !strcmp(peer, "vm");
    if (port <= 0 || devices <= 0 || metrics <= 0 || count <= 0 || count > 1000000 ||
        (strcmp(kind, "a") && strcmp(kind, "b")) || (!vm && strcmp(peer, "bucketdb")))
        usage();
    int last_hour = !strcmp(kind, "a");
    if (!last_hour && (from <= 0 || to <= from))
        die("--kind b needs --from-ms and --to-ms");
    conn c = {.fd = -1, .port = port, .tmo = 60};
    snprintf(c.host, sizeof c.host, "%s", host);
    uint64_t rs = seed * 0x9E3779B97F4A7C15ULL + 3;
    double *lat = xmalloc(sizeof(double) * (size_t)count);
    size_t nlat = 0;
    long failed = 0, samples = 0, min_s = -1, max_s = -1;
    unsigned long long bytes = 0;
    buf body = {0};
    char target[2048], sel[512], enc[1536];
    double deadline = now_s() + tlimit;
    for (long i = 0; i < warmup + count && now_s() < deadline; i++) {
        long d = (long)(rng_next(&rs) % (uint64_t)devices);
        int m = (int)(rng_next(&rs) % (uint64_t)metrics);
        long long f = from, t = to;
        if (last_hour && (from <= 0 || to <= from)) {
            /* without --from-ms/--to-ms: the hour before the wall clock */
            t = wall_ms();
            f = t - 3600000;
        }
        if (!vm) {
            if (last_hour) {
                /* all metrics of the device, named explicitly */
                size_t o = 0;
                for (int k = 0; k < metrics && o + 64 < sizeof sel; k++)
                    o += (size_t)snprintf(sel + o, sizeof sel - o, "%s%s.f%d", k ? "," : "", meas,
                                          k);
                urlenc(sel, enc, sizeof enc);
                snprintf(target, sizeof target,
                         "/api/v1/query?device=dev%07ld&metric=%s&from=%lld&to=%lld", d, enc, f, t);
            } else {
                snprintf(target, sizeof target,
                         "/api/v1/query?device=dev%07ld&metric=%s.f%d&from=%lld&to=%lld", d, meas,
                         m, f, t);
            }
        } else {
            /* raw samples of the equivalent series; start and end are inclusive seconds */
            if (last_hour)
                snprintf(sel, sizeof sel, "{device=\"dev%07ld\"}", d);
            else
                snprintf(sel, sizeof sel, "%s_f%d{device=\"dev%07ld\"}", meas, m, d);
            urlenc(sel, enc, sizeof enc);
            snprintf(target, sizeof target, "/api/v1/export?match%%5B%%5D=%s&start=%.3f&end=%.3f",
                     enc, (double)f / 1000.0, (double)(t - 1) / 1000.0);
        }
        body.len = 0;
        double q0 = now_s();
        int st = http_do(&c, "GET", target, NULL, NULL, 0, &body);
        double ms = (now_s() - q0) * 1000.0;
        if (i < warmup)
            continue;
        if (st != 200) {
            if (failed++ < 5)
                fprintf(stderr, "loadgen: query failed: status %d: %s -> %.*s\n", st, target,
                        (int)(body.len > 300 ? 300 : body.len), body.p ? body.p : "");
            if (st < 0)
                usleep(100000);
            continue;
        }
        lat[nlat++] = ms;
        bytes += body.len;
        long n = vm ? count_vm(&body) : count_bucketdb(&body);
        samples += n;
        if (min_s < 0 || n < min_s)
            min_s = n;
        if (n > max_s)
            max_s = n;
    }
    conn_close(&c);
    qsort(lat, nlat, sizeof *lat, cmp_dbl);
    double sum = 0;
    for (size_t i = 0; i < nlat; i++)
        sum += lat[i];
    printf("RESULT ok=%zu failed=%ld p50_ms=%.3f p99_ms=%.3f mean_ms=%.3f max_ms=%.3f "
           "avg_samples=%.1f min_samples=%ld max_samples=%ld avg_bytes=%.0f\n",
           nlat, failed, pct(lat, nlat, 50), pct(lat, nlat, 99), nlat ? sum / (double)nlat : NAN,
           nlat ? lat[nlat - 1] : NAN, nlat ? (double)samples / (double)nlat : 0.0, min_s, max_s,
           nlat ? (double)bytes / (double)nlat : 0.0);
    free(lat);
    free(body.p);
    free(c.in.p);
    return failed || nlat < (size_t)count ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    if (!strcmp(argv[1], "write"))
        return cmd_write(argc, argv);
    if (!strcmp(argv[1], "query"))
        return cmd_query(argc, argv);
    usage();
    return 2;
}
