/* mqtt_gw: see mqtt_gw.h and docs/MQTT.md. */
#include "server/mqtt_gw.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "ingest/json_ingest.h"
#include "ingest/lp_ingest.h"
#include "ingest/mqtt/mqtt_codec.h"
#include "server/devlimit.h"
#include "server/quota.h"
#include "server/server_int.h"
#include "server/tenants.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FILTERS 32
#define KEEPALIVE_S 30
#define CONNECT_TIMEOUT_MS 5000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define WRITE_FAIL_BACKOFF_MS 2000

enum { MR_OK, MR_PARTIAL, MR_BAD, MR_WRITE_FAILED, MR_OVER_BURST, MR_N };
static const char *const result_names[MR_N] = {"accepted", "partial", "malformed", "write_failed",
                                               "over_burst"};

struct bdb_mqtt_gw {
    bdb_server *s;
    char host[256], port[16];
    char *filters[MAX_FILTERS];
    size_t nfilters;
    size_t max_packet;
    pthread_t thread;
    atomic_int stop;
    int fd;
    bdb_buf rbuf, wbuf;
    int64_t last_sent; /* monotonic ms of the last packet sent (keepalive) */
    size_t skip;       /* bytes of an oversized PUBLISH still to discard */
    _Atomic uint64_t results[MR_N];
    _Atomic uint64_t samples, connects, connect_failures, duplicates, quota_pauses;
    atomic_int connected;
};

/* ------------------------------------------------------------ topic and payload */

int bdb_mqtt_topic_ids(const char *topic, size_t len, char *tenant, size_t tcap, char *device,
                       size_t dcap, char *why, size_t whylen)
{
    const char *lv[3];
    size_t ll[3], n = 0, start = 0;
    for (size_t i = 0; i <= len && n < 3; i++) {
        if (i == len || topic[i] == '/') {
            lv[n] = topic + start;
            ll[n] = i - start;
            n++;
            start = i + 1;
        }
    }
    if (n < 3) {
        snprintf(why, whylen,
                 "topic has fewer than 3 levels (expected <prefix>/<tenant>/<device>/...)");
        return -1;
    }
    if (ll[1] == 0 || ll[1] >= tcap) {
        snprintf(why, whylen, "tenant level is empty or longer than %zu bytes", tcap - 1);
        return -1;
    }
    memcpy(tenant, lv[1], ll[1]);
    tenant[ll[1]] = '\0';
    if (!bdb_tenant_name_valid(tenant)) {
        snprintf(why, whylen, "tenant '%s' is not a valid name (A-Z a-z 0-9 _ - .)", tenant);
        return -1;
    }
    if (ll[2] == 0 || ll[2] >= dcap) {
        snprintf(why, whylen, "device level is empty or longer than %zu bytes", dcap - 1);
        return -1;
    }
    for (size_t i = 0; i < ll[2]; i++)
        if ((unsigned char)lv[2][i] < 0x20 || lv[2][i] == 0x7f) {
            snprintf(why, whylen, "device level has control characters");
            return -1;
        }
    memcpy(device, lv[2], ll[2]);
    device[ll[2]] = '\0';
    return 0;
}

/* Gives the report object r the topic's device when it has none. */
static void default_device(json_t *r, const char *device)
{
    if (json_is_object(r) && !json_object_get(r, "device"))
        json_object_set_new(r, "device", json_string(device));
}

static int parse_json(const bdb_config *cfg, const char *p, size_t len, const char *device,
                      int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    json_error_t err;
    json_t *root = json_loadb(p, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        snprintf(why, whylen, "invalid JSON at line %d column %d: %s", err.line, err.column,
                 err.text);
        return BDB_MQTT_BAD;
    }
    json_t *reps = json_is_object(root) ? json_object_get(root, "reports") : NULL;
    if (json_is_array(reps) || json_is_array(root)) {
        json_t *arr = json_is_array(root) ? root : reps, *r;
        size_t i;
        json_array_foreach(arr, i, r) default_device(r, device);
    } else {
        default_device(root, device);
    }
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!text) {
        snprintf(why, whylen, "out of memory");
        return BDB_MQTT_BAD;
    }
    bdb_json_limits lim;
    bdb_json_limits_default(&lim);
    lim.max_key_len = cfg->max_key_bytes;
    lim.max_value_len = cfg->max_tag_value_bytes;
    lim.max_tags = cfg->max_tags;
    lim.max_metrics = cfg->max_fields;
    lim.max_future_ms = cfg->max_future_ms;
    bdb_json_result jr;
    int rc = bdb_json_ingest(text, strlen(text), now_ms, &lim, b, &jr);
    free(text);
    if (rc == BDB_ERR_LIMIT || jr.fatal || jr.accepted == 0) {
        snprintf(why, whylen, "%s", jr.first_error[0] ? jr.first_error : "no report in payload");
        return BDB_MQTT_BAD;
    }
    if (jr.rejected) {
        snprintf(why, whylen, "%s (%zu report(s) accepted, %zu rejected)", jr.first_error,
                 jr.accepted, jr.rejected);
        return BDB_MQTT_PARTIAL;
    }
    return BDB_MQTT_OK;
}

/* Appends s with line-protocol tag escaping (comma, space, equals sign). */
static void lp_escape(bdb_buf *o, const char *s)
{
    for (; *s; s++) {
        if (*s == ',' || *s == ' ' || *s == '=' || *s == '\\')
            bdb_buf_putc(o, '\\');
        bdb_buf_putc(o, (uint8_t)*s);
    }
}

/* Copies one line, adding the device tag after the measurement when the line's tag
 * set does not name one. */
static void lp_line_with_device(bdb_buf *o, const char *l, size_t n, const char *tag,
                                const char *device)
{
    size_t i = 0;
    while (i < n && (l[i] == ' ' || l[i] == '\t'))
        i++;
    if (i == n || l[i] == '#') {
        bdb_buf_append(o, l, n);
        return;
    }
    size_t m = i; /* end of the measurement */
    while (m < n && l[m] != ',' && l[m] != ' ') {
        if (l[m] == '\\')
            m++;
        m++;
    }
    if (m > n)
        m = n;
    size_t te = m; /* end of the tag set */
    while (te < n && l[te] != ' ') {
        if (l[te] == '\\')
            te++;
        te++;
    }
    if (te > n)
        te = n;
    size_t tl = strlen(tag);
    int has = 0;
    for (size_t k = m; k + tl + 1 < te && !has; k++)
        if (l[k] == ',' && l[k - 1] != '\\' && memcmp(l + k + 1, tag, tl) == 0 &&
            l[k + 1 + tl] == '=')
            has = 1;
    if (has) {
        bdb_buf_append(o, l, n);
        return;
    }
    bdb_buf_append(o, l, m);
    bdb_buf_putc(o, ',');
    lp_escape(o, tag);
    bdb_buf_putc(o, '=');
    lp_escape(o, device);
    bdb_buf_append(o, l + m, n - m);
}

static int parse_lp(const bdb_config *cfg, const char *p, size_t len, const char *device,
                    int64_t now_ms, bdb_batch *b, char *why, size_t whylen)
{
    bdb_buf body;
    bdb_buf_init(&body);
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(p + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - p) : len;
        lp_line_with_device(&body, p + i, e - i, cfg->device_tag, device);
        if (nl)
            bdb_buf_putc(&body, '\n');
        i = e + 1;
    }
    bdb_lp_limits lim;
    bdb_lp_limits_default(&lim);
    lim.max_line_len = cfg->max_line_bytes;
    lim.max_tags = cfg->max_tags;
    lim.max_fields = cfg->max_fields;
    lim.max_key_len = cfg->max_key_bytes;
    lim.max_tag_value_len = cfg->max_tag_value_bytes;
    bdb_lp_parser *lp = bdb_lp_parser_new(&lim);
    bdb_lp_map map = {cfg->device_tag, !strcmp(cfg->metric_naming, "field"), cfg->max_future_ms,
                      cfg->max_key_bytes, cfg->max_tag_value_bytes};
    bdb_lp_result lr;
    memset(&lr, 0, sizeof lr);
    bdb_lp_ingest(lp, body.len ? (const char *)body.data : "", body.len, BDB_LP_NS, now_ms, &map, b,
                  &lr);
    bdb_lp_parser_free(lp);
    bdb_buf_free(&body);
    if (lr.accepted == 0) {
        snprintf(why, whylen, "%s", lr.first_error[0] ? lr.first_error : "no line in payload");
        return BDB_MQTT_BAD;
    }
    if (lr.rejected) {
        snprintf(why, whylen, "line %zu: %s (%zu line(s) accepted, %zu rejected)",
                 lr.first_bad_line, lr.first_error, lr.accepted, lr.rejected);
        return BDB_MQTT_PARTIAL;
    }
    return BDB_MQTT_OK;
}

int bdb_mqtt_payload_parse(const bdb_config *cfg, const char *payload, size_t len,
                           const char *device, int64_t now_ms, bdb_batch *b, char *why,
                           size_t whylen)
{
    why[0] = '\0';
    size_t i = 0;
    while (i < len &&
           (payload[i] == ' ' || payload[i] == '\t' || payload[i] == '\r' || payload[i] == '\n'))
        i++;
    if (i == len) {
        snprintf(why, whylen, "empty payload");
        return BDB_MQTT_BAD;
    }
    if (memchr(payload, '\0', len)) {
        snprintf(why, whylen, "payload contains a NUL byte");
        return BDB_MQTT_BAD;
    }
    if (payload[i] == '{' || payload[i] == '[')
        return parse_json(cfg, payload + i, len - i, device, now_ms, b, why, whylen);
    return parse_lp(cfg, payload + i, len - i, device, now_ms, b, why, whylen);
}

/* ------------------------------------------------------------ one message */

static int sleep_ms(bdb_mqtt_gw *g, int64_t ms);
static int flush_out(bdb_mqtt_gw *g);

/* The tenant's write-rate quota (docs/TENANCY.md) for a message of `cost` samples.
 * While the rate is exceeded the gateway pauses: it reads nothing more and
 * acknowledges nothing, so the broker holds the stream (it keeps the connection
 * alive with PINGREQ meanwhile). Returns 1 admitted, 0 never admissible (larger than
 * the burst), -1 stopping or the connection failed. */
static int admit_rate(bdb_mqtt_gw *g, const char *tenant, uint64_t cost, const char *topic)
{
    int logged = 0;
    for (;;) {
        int64_t retry = 0;
        uint64_t value = 0;
        int v = bdb_tenants_admit(g->s->tenants, tenant, cost, bdb_monotonic_ms(), &retry, &value);
        if (v != 0)
            return v > 0 ? 1 : 0;
        atomic_fetch_add(&g->quota_pauses, 1);
        if (!logged++)
            BDB_WARN("mqtt: tenant '%s' is over its write rate of %llu samples/s; consumption "
                     "paused (message on '%s' not yet acknowledged)",
                     tenant, (unsigned long long)value, topic);
        if (bdb_monotonic_ms() - g->last_sent >= KEEPALIVE_S * 1000 / 2) {
            bdb_mqtt_encode_pingreq(&g->wbuf);
            if (flush_out(g) != 0)
                return -1;
        }
        if (sleep_ms(g, 250) != 0)
            return -1;
    }
}

/* Stores a PUBLISH. Returns 0 when it may be acknowledged (stored, or dropped as
 * malformed), -1 when storage failed (do not acknowledge). */
static int handle_message(bdb_mqtt_gw *g, const bdb_mqtt_publish *p, int too_large)
{
    bdb_server *s = g->s;
    char topic[512];
    size_t tl = p->topic_len < sizeof topic - 1 ? p->topic_len : sizeof topic - 1;
    memcpy(topic, p->topic, tl);
    topic[tl] = '\0';
    char why[700], tenant[BDB_TENANT_NAME_MAX + 1], device[1024];
    if (p->dup)
        atomic_fetch_add(&g->duplicates, 1);
    if (too_large) {
        atomic_fetch_add(&g->results[MR_BAD], 1);
        BDB_WARN("mqtt: dropped message on '%s': larger than %zu bytes (max_body_bytes)", topic,
                 g->max_packet);
        return 0;
    }
    size_t dcap =
        s->cfg.max_key_bytes + 1 < sizeof device ? s->cfg.max_key_bytes + 1 : sizeof device;
    if (bdb_mqtt_topic_ids(p->topic, p->topic_len, tenant, sizeof tenant, device, dcap, why,
                           sizeof why) != 0) {
        atomic_fetch_add(&g->results[MR_BAD], 1);
        BDB_WARN("mqtt: dropped message on '%s': %s", topic, why);
        return 0;
    }
    bdb_batch *b = bdb_batch_new();
    int pr = bdb_mqtt_payload_parse(&s->cfg, (const char *)p->payload, p->payload_len, device,
                                    bdb_now_ms(), b, why, sizeof why);
    if (pr == BDB_MQTT_BAD) {
        bdb_batch_free(b);
        atomic_fetch_add(&g->results[MR_BAD], 1);
        BDB_WARN("mqtt: dropped malformed message on '%s': %s", topic, why);
        return 0;
    }
    uint64_t cost = bdb_quota_cost(b);
    int ad = admit_rate(g, tenant, cost, topic);
    if (ad <= 0) {
        bdb_batch_free(b);
        if (ad < 0)
            return -1; /* not acknowledged: the broker re-sends it */
        atomic_fetch_add(&g->results[MR_OVER_BURST], 1);
        BDB_WARN("mqtt: dropped message on '%s': %llu samples exceed tenant '%s''s burst", topic,
                 (unsigned long long)cost, tenant);
        return 0;
    }
    {
        /* device profiles (docs/TENANCY.md): a message over a device's max_rps is
         * dropped and counted, not retried (a retry would only be over it again) */
        char dev[256];
        uint32_t limit = 0, value = 0;
        int64_t retry = 0;
        if (bdb_devlimit_admit(s->devlimit, tenant, b, bdb_monotonic_ms(), dev, sizeof dev, &limit,
                               &value, &retry) <= 0) {
            bdb_tenants_refund(s->tenants, tenant, cost);
            bdb_batch_free(b);
            atomic_fetch_add(&s->device_rate_rejections, 1);
            BDB_WARN("mqtt: dropped message on '%s': device '%s' over its max_rps %u", topic, dev,
                     limit);
            return 0;
        }
    }
    int rc = bdb_db_write(s->db, tenant, b);
    if (rc != BDB_OK)
        bdb_tenants_refund(s->tenants, tenant, cost);
    if (rc == BDB_ERR_LIMIT || rc == BDB_ERR_INVALID) {
        /* a property of the message (e.g. too many metrics in one report): retrying
         * cannot help, so it is dropped like any malformed message */
        bdb_batch_free(b);
        atomic_fetch_add(&g->results[MR_BAD], 1);
        BDB_WARN("mqtt: dropped message on '%s': %s", topic, bdb_strerror(rc));
        return 0;
    }
    if (rc != BDB_OK) {
        bdb_batch_free(b);
        atomic_fetch_add(&g->results[MR_WRITE_FAILED], 1);
        atomic_fetch_add(&s->write_failures, 1);
        BDB_ERROR("mqtt: cannot store message on '%s': %s; not acknowledged, the broker keeps "
                  "it; reconnecting later",
                  topic, bdb_strerror(rc));
        return -1;
    }
    size_t n = bdb_batch_samples(b);
    bdb_batch_free(b);
    atomic_fetch_add(&g->samples, n);
    hist_observe(&s->batch_size, n);
    if (!bdb_tenants_count_ingest(s->tenants, tenant, n))
        atomic_fetch_add(&s->other_samples, n);
    if (pr == BDB_MQTT_PARTIAL) {
        atomic_fetch_add(&g->results[MR_PARTIAL], 1);
        BDB_WARN("mqtt: partly stored message on '%s': %s", topic, why);
    } else {
        atomic_fetch_add(&g->results[MR_OK], 1);
    }
    return 0;
}

/* ------------------------------------------------------------ connection */

static int sleep_ms(bdb_mqtt_gw *g, int64_t ms)
{
    int64_t end = bdb_monotonic_ms() + ms;
    while (!atomic_load(&g->stop)) {
        int64_t left = end - bdb_monotonic_ms();
        if (left <= 0)
            return 0;
        usleep((useconds_t)(left < 100 ? left : 100) * 1000);
    }
    return -1;
}

static int tcp_connect(bdb_mqtt_gw *g)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int e = getaddrinfo(g->host, g->port, &hints, &res);
    if (e != 0) {
        BDB_WARN("mqtt: cannot resolve %s: %s", g->host, gai_strerror(e));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd pf = {fd, POLLOUT, 0};
        int err = 0;
        socklen_t el = sizeof err;
        if (poll(&pf, 1, CONNECT_TIMEOUT_MS) != 1 ||
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0 || err != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

/* Sends wbuf whole (bounded wait); 0 or -1. */
static int flush_out(bdb_mqtt_gw *g)
{
    size_t off = 0;
    int64_t deadline = bdb_monotonic_ms() + 10000;
    while (off < g->wbuf.len) {
        ssize_t n = send(g->fd, g->wbuf.data + off, g->wbuf.len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        if (bdb_monotonic_ms() > deadline)
            return -1;
        struct pollfd pf = {g->fd, POLLOUT, 0};
        poll(&pf, 1, 100);
    }
    bdb_buf_reset(&g->wbuf);
    g->last_sent = bdb_monotonic_ms();
    return 0;
}

static void consume(bdb_buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

enum { ST_CONNACK, ST_UP };

/* Processes the complete packets in rbuf. Returns 0, 1 (storage failed: back off
 * and reconnect) or -1 (protocol error: reconnect). */
static int process(bdb_mqtt_gw *g, int *state, int *ping_out)
{
    for (;;) {
        if (g->skip) {
            size_t n = g->skip < g->rbuf.len ? g->skip : g->rbuf.len;
            consume(&g->rbuf, n);
            g->skip -= n;
            if (g->skip)
                return 0;
        }
        bdb_mqtt_hdr h;
        int hr = bdb_mqtt_decode_header(g->rbuf.data, g->rbuf.len, g->max_packet, &h);
        if (hr == BDB_MQTT_NEED_MORE)
            return 0;
        if (hr == BDB_MQTT_MALFORMED) {
            BDB_WARN("mqtt: malformed packet from the broker (remaining length)");
            return -1;
        }
        if (hr == BDB_MQTT_TOO_LARGE) {
            if (h.type != BDB_MQTT_PUBLISH || *state != ST_UP) {
                BDB_WARN("mqtt: packet type %d of %zu bytes is too large", h.type, h.rem_len);
                return -1;
            }
            /* Read the topic and packet id, acknowledge, discard the rest. */
            size_t prefix = h.rem_len < 65539 ? h.rem_len : 65539;
            if (g->rbuf.len < h.hdr_len + prefix)
                return 0;
            bdb_mqtt_publish p;
            if (bdb_mqtt_parse_publish(h.flags, g->rbuf.data + h.hdr_len, prefix, &p) != 0 ||
                p.qos > 1)
                return -1;
            handle_message(g, &p, 1);
            if (p.qos == 1)
                bdb_mqtt_encode_puback(&g->wbuf, p.packet_id);
            g->skip = h.hdr_len + h.rem_len;
            if (flush_out(g) != 0)
                return -1;
            continue;
        }
        if (g->rbuf.len < h.hdr_len + h.rem_len)
            return 0;
        const uint8_t *body = g->rbuf.data + h.hdr_len;
        if (*state == ST_CONNACK) {
            int sp, rc;
            if (h.type != BDB_MQTT_CONNACK || bdb_mqtt_parse_connack(body, h.rem_len, &sp, &rc))
                return -1;
            if (rc != 0) {
                BDB_ERROR("mqtt: broker %s:%s refused the connection: %s", g->host, g->port,
                          bdb_mqtt_connack_str(rc));
                return -1;
            }
            BDB_INFO("mqtt: connected to %s:%s as '%s' (session %s)", g->host, g->port,
                     g->s->cfg.mqtt_client_id, sp ? "resumed" : "new");
            *state = ST_UP;
            /* Subscribe every time: a session the broker lost must come back. */
            if (bdb_mqtt_encode_subscribe(&g->wbuf, 1, (const char *const *)g->filters, g->nfilters,
                                          1) != 0)
                return -1;
        } else if (h.type == BDB_MQTT_PUBLISH) {
            bdb_mqtt_publish p;
            if (bdb_mqtt_parse_publish(h.flags, body, h.rem_len, &p) != 0 || p.qos > 1) {
                BDB_WARN("mqtt: malformed PUBLISH from the broker");
                return -1;
            }
            if (handle_message(g, &p, 0) != 0)
                return 1;
            if (p.qos == 1)
                bdb_mqtt_encode_puback(&g->wbuf, p.packet_id);
        } else if (h.type == BDB_MQTT_SUBACK) {
            uint16_t pid;
            uint8_t codes[MAX_FILTERS];
            size_t n;
            if (bdb_mqtt_parse_suback(body, h.rem_len, &pid, codes, MAX_FILTERS, &n) != 0)
                return -1;
            atomic_store(&g->connected, 1); /* subscribed: consuming */
            atomic_fetch_add(&g->connects, 1);
            for (size_t i = 0; i < n && i < g->nfilters; i++)
                if (codes[i] == 0x80)
                    BDB_ERROR("mqtt: the broker refused the subscription to '%s'", g->filters[i]);
                else if (codes[i] == 0)
                    BDB_WARN("mqtt: subscription to '%s' granted at QoS 0 only: messages may "
                             "be lost",
                             g->filters[i]);
        } else if (h.type == BDB_MQTT_PINGRESP) {
            *ping_out = 0;
        } else if (h.type == BDB_MQTT_CONNACK || h.type == BDB_MQTT_CONNECT) {
            return -1;
        } /* anything else a subscriber does not expect is ignored */
        consume(&g->rbuf, h.hdr_len + h.rem_len);
        if (g->wbuf.len && flush_out(g) != 0)
            return -1;
    }
}

/* One connection, until it fails or the gateway stops. Returns 0 when it got as far
 * as CONNACK (reset the backoff), -1 if not, 1 after a storage failure. */
static int session(bdb_mqtt_gw *g)
{
    g->fd = tcp_connect(g);
    if (g->fd < 0)
        return -1;
    bdb_buf_reset(&g->rbuf);
    bdb_buf_reset(&g->wbuf);
    g->skip = 0;
    const bdb_config *c = &g->s->cfg;
    int ret = -1;
    if (bdb_mqtt_encode_connect(&g->wbuf, c->mqtt_client_id, c->mqtt_username, c->mqtt_password,
                                KEEPALIVE_S, 0) != 0 ||
        flush_out(g) != 0)
        goto out;
    int state = ST_CONNACK, ping_out = 0;
    int64_t t0 = bdb_monotonic_ms(), ping_at = 0;
    uint8_t tmp[65536];
    while (!atomic_load(&g->stop)) {
        int64_t now = bdb_monotonic_ms();
        if (state == ST_CONNACK && now - t0 > 10000) {
            BDB_WARN("mqtt: no CONNACK from %s:%s", g->host, g->port);
            goto out;
        }
        if (state == ST_UP && !ping_out && now - g->last_sent >= KEEPALIVE_S * 1000 / 2) {
            bdb_mqtt_encode_pingreq(&g->wbuf);
            if (flush_out(g) != 0)
                goto out;
            ping_out = 1;
            ping_at = now;
        }
        if (ping_out && now - ping_at > KEEPALIVE_S * 1000) {
            BDB_WARN("mqtt: no PINGRESP from %s:%s within %d s", g->host, g->port, KEEPALIVE_S);
            goto out;
        }
        struct pollfd pf = {g->fd, POLLIN, 0};
        int pr = poll(&pf, 1, 200);
        if (pr < 0 && errno != EINTR)
            goto out;
        if (pr <= 0)
            continue;
        ssize_t n = recv(g->fd, tmp, sizeof tmp, 0);
        if (n == 0) {
            BDB_WARN("mqtt: broker %s:%s closed the connection", g->host, g->port);
            goto out;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                continue;
            goto out;
        }
        bdb_buf_append(&g->rbuf, tmp, (size_t)n);
        int r = process(g, &state, &ping_out);
        if (r != 0) {
            ret = r > 0 ? 1 : (state == ST_UP ? 0 : -1);
            goto out;
        }
        if (state == ST_UP)
            ret = 0;
    }
    if (state == ST_UP) {
        bdb_mqtt_encode_disconnect(&g->wbuf);
        flush_out(g);
    }
    ret = 0;
out:
    atomic_store(&g->connected, 0);
    close(g->fd);
    g->fd = -1;
    return ret;
}

static void *gw_main(void *arg)
{
    bdb_mqtt_gw *g = arg;
    int64_t backoff = BACKOFF_MIN_MS;
    while (!atomic_load(&g->stop)) {
        int r = session(g);
        if (atomic_load(&g->stop))
            break;
        if (r == 0) {
            backoff = BACKOFF_MIN_MS;
        } else {
            if (r < 0)
                atomic_fetch_add(&g->connect_failures, 1);
            if (r > 0 && backoff < WRITE_FAIL_BACKOFF_MS)
                backoff = WRITE_FAIL_BACKOFF_MS;
        }
        if (sleep_ms(g, backoff) != 0)
            break;
        if (r != 0 && backoff < BACKOFF_MAX_MS)
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* ------------------------------------------------------------ lifecycle */

static void free_gw(bdb_mqtt_gw *g)
{
    for (size_t i = 0; i < g->nfilters; i++)
        free(g->filters[i]);
    bdb_buf_free(&g->rbuf);
    bdb_buf_free(&g->wbuf);
    free(g);
}

int bdb_mqtt_gw_start(bdb_server *s, bdb_mqtt_gw **out)
{
    *out = NULL;
    const bdb_config *c = &s->cfg;
    if (!c->mqtt_broker[0])
        return BDB_OK;
    bdb_mqtt_gw *g = calloc(1, sizeof *g);
    if (!g)
        return BDB_ERR_NOMEM;
    g->s = s;
    g->fd = -1;
    bdb_buf_init(&g->rbuf);
    bdb_buf_init(&g->wbuf);
    /* host:port, [v6]:port */
    const char *colon = strrchr(c->mqtt_broker, ':');
    const char *h = c->mqtt_broker;
    size_t hl = colon ? (size_t)(colon - h) : strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : 1883;
    if (hl == 0 || hl >= sizeof g->host || (colon && (*end || port <= 0 || port > 65535))) {
        BDB_ERROR("mqtt_broker: expected host:port, got '%s'", c->mqtt_broker);
        free_gw(g);
        return BDB_ERR_INVALID;
    }
    memcpy(g->host, h, hl);
    g->host[hl] = '\0';
    snprintf(g->port, sizeof g->port, "%ld", port);
    if (!c->mqtt_client_id[0] || strlen(c->mqtt_client_id) > 23)
        BDB_WARN("mqtt_client_id '%s': MQTT 3.1.1 brokers need only accept 1..23 characters",
                 c->mqtt_client_id);
    const char *t = c->mqtt_topics;
    while (*t) {
        const char *e = strchr(t, ',');
        size_t n = e ? (size_t)(e - t) : strlen(t);
        while (n && (*t == ' ' || *t == '\t'))
            t++, n--;
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            n--;
        if (n) {
            char *f = strndup(t, n);
            if (!f || g->nfilters == MAX_FILTERS || !bdb_mqtt_filter_valid(f)) {
                BDB_ERROR("mqtt_topics: '%s' is not a valid topic filter (or more than %d)",
                          f ? f : "?", MAX_FILTERS);
                free(f);
                free_gw(g);
                return BDB_ERR_INVALID;
            }
            g->filters[g->nfilters++] = f;
        }
        if (!e)
            break;
        t = e + 1;
    }
    if (!g->nfilters) {
        BDB_ERROR("mqtt_topics: no topic filter");
        free_gw(g);
        return BDB_ERR_INVALID;
    }
    /* a message's payload may be as large as an HTTP body, plus topic and header */
    g->max_packet = c->max_body_bytes + 65536 + 16;
    if (pthread_create(&g->thread, NULL, gw_main, g) != 0) {
        free_gw(g);
        return BDB_ERR_NOMEM;
    }
    BDB_INFO("mqtt: consuming %s from %s:%s, client id '%s', QoS 1, persistent session",
             c->mqtt_topics, g->host, g->port, c->mqtt_client_id);
    *out = g;
    return BDB_OK;
}

void bdb_mqtt_gw_stop(bdb_mqtt_gw *g)
{
    if (!g)
        return;
    atomic_store(&g->stop, 1);
    pthread_join(g->thread, NULL);
    free_gw(g);
}

void bdb_mqtt_gw_metrics(bdb_mqtt_gw *g, bdb_buf *b)
{
    if (!g)
        return;
    bdb_buf_puts(b, "# HELP bucketdb_mqtt_messages_total MQTT messages consumed, by result.\n"
                    "# TYPE bucketdb_mqtt_messages_total counter\n");
    for (int i = 0; i < MR_N; i++)
        bdb_buf_printf(b, "bucketdb_mqtt_messages_total{result=\"%s\"} %llu\n", result_names[i],
                       (unsigned long long)atomic_load(&g->results[i]));
    unsigned long long samples = atomic_load(&g->samples);
    unsigned long long dups = atomic_load(&g->duplicates);
    unsigned long long conns = atomic_load(&g->connects);
    unsigned long long fails = atomic_load(&g->connect_failures);
    int up = atomic_load(&g->connected);
    unsigned long long paused = atomic_load(&g->quota_pauses);
    bdb_buf_printf(b,
                   "# HELP bucketdb_mqtt_samples_total Samples durably written from MQTT.\n"
                   "# TYPE bucketdb_mqtt_samples_total counter\n"
                   "bucketdb_mqtt_samples_total %llu\n"
                   "# HELP bucketdb_mqtt_redeliveries_total MQTT messages received with DUP set.\n"
                   "# TYPE bucketdb_mqtt_redeliveries_total counter\n"
                   "bucketdb_mqtt_redeliveries_total %llu\n"
                   "# HELP bucketdb_mqtt_connects_total Sessions established with the broker.\n"
                   "# TYPE bucketdb_mqtt_connects_total counter\n"
                   "bucketdb_mqtt_connects_total %llu\n"
                   "# HELP bucketdb_mqtt_connect_failures_total Failed connection attempts.\n"
                   "# TYPE bucketdb_mqtt_connect_failures_total counter\n"
                   "bucketdb_mqtt_connect_failures_total %llu\n"
                   "# HELP bucketdb_mqtt_connected 1 while connected to the broker.\n"
                   "# TYPE bucketdb_mqtt_connected gauge\n"
                   "bucketdb_mqtt_connected %d\n"
                   "# HELP bucketdb_mqtt_quota_pauses_total Waits of the consumer for a "
                   "tenant's write rate.\n"
                   "# TYPE bucketdb_mqtt_quota_pauses_total counter\n"
                   "bucketdb_mqtt_quota_pauses_total %llu\n",
                   samples, dups, conns, fails, up, paused);
}
