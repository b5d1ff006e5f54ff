/* mqtt_gw: see mqtt_gw.h and docs/MQTT.md. This file: configuration, one thread per
 * broker with its reconnect loop, the packet loop of a session, /metrics. */
#include "server/mqtt/mqtt_gw_int.h"

#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "server/server_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define WRITE_FAIL_BACKOFF_MS 2000
#define CONNACK_TIMEOUT_MS 10000

static const char *const result_names[MR_N] = {"accepted",     "partial",       "malformed",
                                               "write_failed", "over_burst",    "device_rate",
                                               "device_quota", "storage_quota", "hot_partition"};

static void consume(bdb_buf *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
}

enum { ST_CONNACK, ST_UP };

static void on_connack(mq_client *c, int sp, const bdb_mqtt_props *props)
{
    bdb_mqtt_gw *g = c->g;
    const bdb_config *cfg = &g->s->cfg;
    c->broker_max_pkt = 0;
    c->no_sub_ids = 0;
    if (g->version == BDB_MQTT_V5) {
        /* a SUBSCRIBE with an identifier such a broker would answer with DISCONNECT */
        c->no_sub_ids = BDB_MQTT_HAS(props, BDB_MQTT_P_SUB_ID_OK) && !props->sub_id_ok;
        if (c->no_sub_ids && g->by_route)
            BDB_WARN("mqtt: broker %s has no subscription identifiers: messages take the first "
                     "route whose filter matches their topic",
                     c->name);
        if (BDB_MQTT_HAS(props, BDB_MQTT_P_MAX_PACKET))
            c->broker_max_pkt = props->max_packet;
        if (BDB_MQTT_HAS(props, BDB_MQTT_P_MAX_QOS) && props->max_qos < 1)
            BDB_ERROR("mqtt: broker %s supports QoS 0 only: messages may be lost", c->name);
        if (BDB_MQTT_HAS(props, BDB_MQTT_P_SESSION_EXPIRY) &&
            props->session_expiry * 1000ull < (uint64_t)cfg->mqtt_session_expiry)
            BDB_WARN("mqtt: broker %s shortened the session expiry to %u s", c->name,
                     props->session_expiry);
    }
    BDB_INFO("mqtt: connected to %s as '%s' with MQTT %s (session %s)", c->name,
             cfg->mqtt_client_id, g->version == BDB_MQTT_V5 ? "5" : "3.1.1",
             sp ? "resumed" : "new");
}

static void on_suback(mq_client *c, uint16_t pid, const uint8_t *codes, size_t n)
{
    bdb_mqtt_gw *g = c->g;
    /* routes are subscribed one SUBSCRIBE each, packet id = route number */
    size_t base = g->by_route && pid >= 1 ? (size_t)pid - 1 : 0;
    if (!g->by_route || base + n >= g->nfilters) { /* the last SUBACK: consuming */
        atomic_store(&c->connected, 1);
        atomic_fetch_add(&g->connects, 1);
    }
    for (size_t i = 0; i < n && base + i < g->nfilters; i++) {
        const char *f = g->filters[base + i];
        int want = g->by_route ? g->routes[base + i].qos : 1;
        if (codes[i] >= 0x80)
            BDB_ERROR("mqtt: broker %s refused the subscription to '%s': %s", c->name, f,
                      g->version == BDB_MQTT_V5 ? bdb_mqtt_reason_str(codes[i]) : "failure");
        else if (codes[i] < want)
            BDB_WARN("mqtt: subscription to '%s' granted at QoS 0 only: messages may be lost", f);
    }
}

/* SUBSCRIBE, every time a session starts: a session the broker lost must come back. */
static int subscribe(mq_client *c)
{
    bdb_mqtt_gw *g = c->g;
    if (!g->by_route) /* one packet, as before routes existed */
        return bdb_mqtt_encode_subscribe_v(&c->wbuf, g->version, 1, (const char *const *)g->filters,
                                           g->nfilters, 1);
    for (size_t i = 0; i < g->nroutes; i++)
        if (bdb_mqtt_encode_subscribe_id(
                &c->wbuf, g->version, (uint16_t)(i + 1), g->routes[i].filter,
                (uint8_t)g->routes[i].qos,
                g->version == BDB_MQTT_V5 && !c->no_sub_ids ? (uint32_t)(i + 1) : 0) != 0)
            return -1;
    return 0;
}

/* Processes the complete packets in rbuf. Returns 0, 1 (storage failed: back off
 * and reconnect) or -1 (protocol or connection error: reconnect). */
static int process(mq_client *c, int *state)
{
    bdb_mqtt_gw *g = c->g;
    int v = g->version;
    for (;;) {
        if (c->skip) {
            size_t n = c->skip < c->rbuf.len ? c->skip : c->rbuf.len;
            consume(&c->rbuf, n);
            c->skip -= n;
            if (c->skip)
                return 0;
        }
        bdb_mqtt_hdr h;
        int hr = bdb_mqtt_decode_header(c->rbuf.data, c->rbuf.len, g->max_packet, &h);
        if (hr == BDB_MQTT_NEED_MORE)
            return 0;
        if (hr == BDB_MQTT_MALFORMED) {
            BDB_WARN("mqtt: malformed packet from %s (remaining length)", c->name);
            return -1;
        }
        if (hr == BDB_MQTT_TOO_LARGE) {
            if (h.type != BDB_MQTT_PUBLISH || *state != ST_UP) {
                BDB_WARN("mqtt: packet type %d of %zu bytes from %s is too large", h.type,
                         h.rem_len, c->name);
                return -1;
            }
            /* Read the topic and packet id, acknowledge, discard the rest (MQTT 5
             * properties are not parsed: they may extend past the prefix). */
            size_t prefix = h.rem_len < 65539 ? h.rem_len : 65539;
            if (c->rbuf.len < h.hdr_len + prefix)
                return 0;
            bdb_mqtt_publish p;
            uint8_t reason;
            if (bdb_mqtt_parse_publish(h.flags, c->rbuf.data + h.hdr_len, prefix, &p) != 0 ||
                p.qos > 1)
                return -1;
            if (g->s->cfg.mqtt_dead_letter_topic[0]) {
                uint16_t pid = p.packet_id;
                int qos = p.qos, r = mq_dead_letter_large(c, &h, prefix);
                if (r < 0)
                    return -1;
                if (r == 0) { /* consumed and dead-lettered: p is stale */
                    if (qos == 1)
                        bdb_mqtt_encode_puback_v(&c->wbuf, v, pid, BDB_MQTT_RC_SUCCESS);
                    if (mq_flush(c) != 0)
                        return -1;
                    continue;
                }
            }
            mq_handle_message(c, &p, 1, 0, &reason);
            if (p.qos == 1)
                bdb_mqtt_encode_puback_v(&c->wbuf, v, p.packet_id, reason);
            c->skip = h.hdr_len + h.rem_len;
            if (mq_flush(c) != 0)
                return -1;
            continue;
        }
        if (c->rbuf.len < h.hdr_len + h.rem_len)
            return 0;
        size_t size = h.hdr_len + h.rem_len;
        const uint8_t *body = c->rbuf.data + h.hdr_len;
        bdb_mqtt_props props;
        if (*state == ST_CONNACK) {
            int sp, rc;
            if (h.type != BDB_MQTT_CONNACK ||
                bdb_mqtt_parse_connack_v(v, body, h.rem_len, &sp, &rc, &props) != 0) {
                BDB_WARN("mqtt: expected a CONNACK from %s", c->name);
                return -1;
            }
            if (rc != 0) {
                if (v == BDB_MQTT_V5)
                    BDB_ERROR("mqtt: broker %s refused the connection: %s%s%.*s", c->name,
                              bdb_mqtt_reason_str(rc), props.reason_len ? ": " : "",
                              (int)props.reason_len, props.reason ? props.reason : "");
                else
                    BDB_ERROR("mqtt: broker %s refused the connection: %s", c->name,
                              bdb_mqtt_connack_str(rc));
                return -1;
            }
            on_connack(c, sp, &props);
            *state = ST_UP;
            if (subscribe(c) != 0)
                return -1;
        } else if (h.type == BDB_MQTT_PUBLISH) {
            bdb_mqtt_publish p;
            if (bdb_mqtt_parse_publish_v(v, h.flags, body, h.rem_len, &p, &props) != 0 ||
                p.qos > 1) {
                BDB_WARN("mqtt: malformed PUBLISH from %s", c->name);
                return -1;
            }
            uint8_t reason;
            uint32_t sub_id =
                v == BDB_MQTT_V5 && BDB_MQTT_HAS(&props, BDB_MQTT_P_SUB_ID) ? props.sub_id : 0;
            if (mq_handle_message(c, &p, 0, sub_id, &reason) != 0)
                return atomic_load(&g->stop) ? -1 : 1;
            /* p's pointers may be stale now (a dead letter reads more into rbuf) */
            if (p.qos == 1)
                bdb_mqtt_encode_puback_v(&c->wbuf, v, p.packet_id, reason);
        } else if (h.type == BDB_MQTT_SUBACK) {
            uint16_t pid;
            uint8_t codes[MQ_MAX_FILTERS];
            size_t n;
            if (bdb_mqtt_parse_suback_v(v, body, h.rem_len, &pid, codes, MQ_MAX_FILTERS, &n,
                                        &props) != 0)
                return -1;
            on_suback(c, pid, codes, n);
        } else if (h.type == BDB_MQTT_PINGRESP) {
            c->ping_out = 0;
        } else if (h.type == BDB_MQTT_DISCONNECT && v == BDB_MQTT_V5) {
            int rc = 0;
            if (bdb_mqtt_parse_disconnect(body, h.rem_len, &rc, &props) == 0)
                BDB_WARN("mqtt: broker %s disconnected: %s%s%.*s", c->name, bdb_mqtt_reason_str(rc),
                         props.reason_len ? ": " : "", (int)props.reason_len,
                         props.reason ? props.reason : "");
            return -1;
        } else if (h.type == BDB_MQTT_CONNACK || h.type == BDB_MQTT_CONNECT ||
                   h.type == BDB_MQTT_AUTH) {
            BDB_WARN("mqtt: unexpected packet type %d from %s", h.type, c->name);
            return -1;
        } /* anything else a subscriber does not expect (a late PUBACK) is ignored */
        consume(&c->rbuf, size);
        if (c->wbuf.len && mq_flush(c) != 0)
            return -1;
    }
}

/* One connection, until it fails or the gateway stops. Returns 0 when it got as far
 * as CONNACK (reset the backoff), -1 if not, 1 after a storage failure. */
static int session(mq_client *c)
{
    bdb_mqtt_gw *g = c->g;
    if (mq_connect(c) != 0)
        return -1;
    bdb_buf_reset(&c->rbuf);
    bdb_buf_reset(&c->wbuf);
    c->skip = 0;
    c->ping_out = 0;
    const bdb_config *cfg = &g->s->cfg;
    int ret = -1;
    uint64_t expiry_s = cfg->mqtt_session_expiry ? (uint64_t)cfg->mqtt_session_expiry / 1000 : 0;
    bdb_mqtt_connect_opts o = {
        .version = g->version,
        .client_id = cfg->mqtt_client_id,
        .user = cfg->mqtt_username,
        .pass = cfg->mqtt_password,
        .keepalive_s = MQ_KEEPALIVE_S,
        .clean_start = 0,
        /* 0 = never: 0xffffffff is "does not expire" in MQTT 5 */
        .session_expiry_s = !expiry_s || expiry_s >= 0xffffffffu ? 0xffffffffu : (uint32_t)expiry_s,
        .receive_max = (uint16_t)cfg->mqtt_receive_max,
        /* no maximum packet size: a broker would silently drop larger messages
         * instead of sending them; here they are counted and logged */
        .max_packet = 0,
    };
    if (bdb_mqtt_encode_connect_opts(&c->wbuf, &o) != 0 || mq_flush(c) != 0)
        goto out;
    int state = ST_CONNACK;
    int64_t t0 = bdb_monotonic_ms(), ping_at = 0;
    while (!atomic_load(&g->stop)) {
        int64_t now = bdb_monotonic_ms();
        if (state == ST_CONNACK && now - t0 > CONNACK_TIMEOUT_MS) {
            BDB_WARN("mqtt: no CONNACK from %s", c->name);
            goto out;
        }
        if (state == ST_UP && !c->ping_out && now - c->last_sent >= MQ_KEEPALIVE_S * 1000 / 2) {
            bdb_mqtt_encode_pingreq(&c->wbuf);
            if (mq_flush(c) != 0)
                goto out;
            c->ping_out = 1;
            ping_at = now;
        }
        if (c->ping_out && now - ping_at > MQ_KEEPALIVE_S * 1000) {
            BDB_WARN("mqtt: no PINGRESP from %s within %d s", c->name, MQ_KEEPALIVE_S);
            goto out;
        }
        int r = mq_read(c, 200);
        if (r < 0)
            goto out;
        if (r == 0 && !c->rbuf.len)
            continue;
        r = process(c, &state);
        if (r != 0) {
            ret = r > 0 ? 1 : (state == ST_UP ? 0 : -1);
            goto out;
        }
        if (state == ST_UP)
            ret = 0;
    }
    if (state == ST_UP) {
        bdb_mqtt_encode_disconnect_v(&c->wbuf, g->version);
        mq_flush(c);
    }
    ret = 0;
out:
    atomic_store(&c->connected, 0);
    mq_close(c);
    return ret;
}

static void *client_main(void *arg)
{
    mq_client *c = arg;
    bdb_mqtt_gw *g = c->g;
    int64_t backoff = BACKOFF_MIN_MS;
    while (!atomic_load(&g->stop)) {
        int r = session(c);
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
        if (mq_sleep(g, backoff) != 0)
            break;
        if (r != 0 && backoff < BACKOFF_MAX_MS)
            backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    return NULL;
}

/* ------------------------------------------------------------ configuration */

static void free_gw(bdb_mqtt_gw *g)
{
    for (size_t i = 0; i < g->nfilters; i++)
        free(g->filters[i]);
    free(g->routes);
    for (size_t i = 0; i < g->nclients; i++) {
        bdb_buf_free(&g->clients[i].rbuf);
        bdb_buf_free(&g->clients[i].wbuf);
    }
    mq_tls_free(g);
    free(g);
}

/* One broker: host:port, [v6]:port, mqtt://host:port or mqtts://host:port (port
 * 1883, or 8883 with TLS, when left out). */
static int parse_broker(mq_client *c, const char *spec)
{
    snprintf(c->name, sizeof c->name, "%s", spec);
    const char *h = spec;
    long def = 1883;
    if (!strncmp(h, "mqtts://", 8)) {
        c->tls = 1;
        def = 8883;
        h += 8;
    } else if (!strncmp(h, "mqtt://", 7)) {
        h += 7;
    }
    const char *colon = strrchr(h, ':');
    if (colon && h[0] == '[' && colon < strchr(h, ']'))
        colon = NULL; /* [v6] without a port */
    size_t hl = colon ? (size_t)(colon - h) : strlen(h);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    char *end = NULL;
    long port = colon ? strtol(colon + 1, &end, 10) : def;
    if (hl == 0 || hl >= sizeof c->host || (colon && (*end || port <= 0 || port > 65535))) {
        BDB_ERROR("mqtt_broker: expected host:port or mqtts://host:port, got '%s'", spec);
        return -1;
    }
    memcpy(c->host, h, hl);
    c->host[hl] = '\0';
    snprintf(c->port, sizeof c->port, "%ld", port);
    return 0;
}

/* Calls fn on every trimmed, non-empty item of a comma-separated list. */
static int each_item(const char *list, int (*fn)(bdb_mqtt_gw *, const char *), bdb_mqtt_gw *g)
{
    const char *t = list;
    while (*t) {
        const char *e = strchr(t, ',');
        size_t n = e ? (size_t)(e - t) : strlen(t);
        while (n && (*t == ' ' || *t == '\t'))
            t++, n--;
        while (n && (t[n - 1] == ' ' || t[n - 1] == '\t'))
            n--;
        if (n) {
            char item[1024];
            snprintf(item, sizeof item, "%.*s", (int)n, t);
            if (fn(g, item) != 0)
                return -1;
        }
        if (!e)
            break;
        t = e + 1;
    }
    return 0;
}

static int add_broker(bdb_mqtt_gw *g, const char *spec)
{
    if (g->nclients == MQ_MAX_BROKERS) {
        BDB_ERROR("mqtt_broker: more than %d brokers", MQ_MAX_BROKERS);
        return -1;
    }
    mq_client *c = &g->clients[g->nclients];
    c->g = g;
    c->fd = -1;
    bdb_buf_init(&c->rbuf);
    bdb_buf_init(&c->wbuf);
    g->nclients++;
    return parse_broker(c, spec);
}

static int add_filter(bdb_mqtt_gw *g, const char *f)
{
    const char *inner = f;
    int shared = bdb_mqtt_filter_shared(f, &inner);
    if (g->nfilters == MQ_MAX_FILTERS || shared < 0 || !bdb_mqtt_filter_valid(f)) {
        BDB_ERROR("mqtt_topics: '%s' is not a valid topic filter%s (or more than %d)", f,
                  shared < 0 ? " ($share/<group>/<filter>)" : "", MQ_MAX_FILTERS);
        return -1;
    }
    if (shared && g->version != BDB_MQTT_V5) {
        BDB_ERROR("mqtt_topics: '%s' is a shared subscription, which needs mqtt_version = 5", f);
        return -1;
    }
    const char *dl = g->s->cfg.mqtt_dead_letter_topic;
    if (dl[0] && bdb_mqtt_topic_match(inner, dl, strlen(dl))) {
        BDB_ERROR("mqtt_dead_letter_topic '%s' matches the subscription '%s': rejected messages "
                  "would come back forever",
                  dl, f);
        return -1;
    }
    g->filters[g->nfilters++] = strdup(f);
    return 0;
}

/* mqtt_route lines (bdb_config_check has already refused bad ones; the errors are
 * repeated here for callers that skip it). */
static int add_routes(bdb_mqtt_gw *g)
{
    const char *list = g->s->cfg.mqtt_route;
    size_t n = 1;
    for (const char *q = list; *q; q++)
        n += *q == '\n';
    if (n > BDB_MQTT_ROUTES_MAX) {
        BDB_ERROR("mqtt_route: more than %d routes", BDB_MQTT_ROUTES_MAX);
        return -1;
    }
    g->routes = calloc(n, sizeof *g->routes);
    if (!g->routes)
        return -1;
    g->by_route = 1;
    for (const char *l = list; *l;) {
        size_t len = strcspn(l, "\n");
        char line[sizeof g->s->cfg.mqtt_route], why[600];
        snprintf(line, sizeof line, "%.*s", (int)len, l);
        l += len + (l[len] == '\n');
        bdb_mqtt_route *r = &g->routes[g->nroutes];
        if (bdb_mqtt_route_parse(line, r, why, sizeof why) != 0) {
            BDB_ERROR("mqtt_route %zu ('%s'): %s", g->nroutes + 1, line, why);
            return -1;
        }
        g->nroutes++;
        if (add_filter(g, r->filter) != 0)
            return -1;
        BDB_INFO("mqtt: route %zu: %s (tenant: %s, QoS %d)", g->nroutes, line,
                 r->tenant[0]            ? r->tenant
                 : r->scheme.tenant >= 0 ? "{tenant} level"
                                         : "default_tenant",
                 r->qos);
    }
    return 0;
}

static int configure(bdb_mqtt_gw *g)
{
    const bdb_config *cfg = &g->s->cfg;
    char err[512];
    g->version = !strcmp(cfg->mqtt_version, "3.1.1") ? BDB_MQTT_V311 : BDB_MQTT_V5;
    const char *dl = cfg->mqtt_dead_letter_topic;
    if (dl[0] && (strpbrk(dl, "+#") || strlen(dl) > 65535)) {
        BDB_ERROR("mqtt_dead_letter_topic '%s': a topic name, without wildcards", dl);
        return -1;
    }
    if (each_item(cfg->mqtt_broker, add_broker, g) != 0)
        return -1;
    if (cfg->mqtt_route[0]) {
        if (add_routes(g) != 0)
            return -1;
    } else {
        g->routes = calloc(1, sizeof *g->routes);
        g->nroutes = 1;
        if (!g->routes || each_item(cfg->mqtt_topics, add_filter, g) != 0)
            return -1;
        if (bdb_mqtt_scheme_parse(cfg->mqtt_topic_scheme, &g->routes[0].scheme, err, sizeof err) !=
                0 ||
            bdb_mqtt_formats_parse(cfg->mqtt_formats, &g->formats, err, sizeof err) != 0) {
            BDB_ERROR("%s", err);
            return -1;
        }
    }
    if (!g->nclients || !g->nfilters) {
        BDB_ERROR("mqtt: %s", g->nclients ? "mqtt_topics: no topic filter" : "no broker");
        return -1;
    }
    if (g->version == BDB_MQTT_V311 && strlen(cfg->mqtt_client_id) > 23)
        BDB_WARN("mqtt_client_id '%s': MQTT 3.1.1 brokers need only accept 1..23 characters",
                 cfg->mqtt_client_id);
    if (!cfg->mqtt_client_id[0]) {
        BDB_ERROR("mqtt_client_id: must not be empty (the persistent session is named by it)");
        return -1;
    }
    for (size_t i = 0; i < g->nclients; i++)
        if (g->clients[i].tls && !g->ssl_ctx && mq_tls_init(g) != 0)
            return -1;
    return 0;
}

int bdb_mqtt_gw_start(bdb_server *s, bdb_mqtt_gw **out)
{
    const bdb_config *cfg = &s->cfg;
    /* *out is left alone without a broker: HTTP threads already read it (/metrics)
     * and a store of the NULL it holds would race them (ThreadSanitizer) */
    if (!cfg->mqtt_broker[0])
        return BDB_OK;
    *out = NULL;
    bdb_mqtt_gw *g = calloc(1, sizeof *g);
    if (!g)
        return BDB_ERR_NOMEM;
    g->s = s;
    /* a message's payload may be as large as an HTTP body, plus topic and header */
    g->max_packet = cfg->max_body_bytes + 65536 + 16;
    if (configure(g) != 0) {
        free_gw(g);
        return BDB_ERR_INVALID;
    }
    for (size_t i = 0; i < g->nclients; i++) {
        mq_client *c = &g->clients[i];
        if (pthread_create(&c->thread, NULL, client_main, c) != 0) {
            bdb_mqtt_gw_stop(g);
            return BDB_ERR_NOMEM;
        }
        c->started = 1;
        BDB_INFO("mqtt: consuming %s from %s%s, client id '%s', MQTT %s, persistent session",
                 g->by_route ? "the routes" : cfg->mqtt_topics, c->name, c->tls ? " (TLS)" : "",
                 cfg->mqtt_client_id, g->version == BDB_MQTT_V5 ? "5" : "3.1.1");
    }
    *out = g;
    return BDB_OK;
}

void bdb_mqtt_gw_stop(bdb_mqtt_gw *g)
{
    if (!g)
        return;
    atomic_store(&g->stop, 1);
    for (size_t i = 0; i < g->nclients; i++)
        if (g->clients[i].started)
            pthread_join(g->clients[i].thread, NULL);
    free_gw(g);
}

/* ------------------------------------------------------------ metrics */

static void counter(bdb_buf *b, const char *name, const char *help, uint64_t v)
{
    bdb_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
                   (unsigned long long)v);
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
    counter(b, "bucketdb_mqtt_samples_total", "Samples durably written from MQTT.",
            atomic_load(&g->samples));
    counter(b, "bucketdb_mqtt_string_fields_not_stored_total",
            "String fields other than state in stored MQTT messages, not stored.",
            atomic_load(&g->strings_skipped));
    counter(b, "bucketdb_mqtt_redeliveries_total", "MQTT messages received with DUP set.",
            atomic_load(&g->duplicates));
    counter(b, "bucketdb_mqtt_connects_total", "Sessions established with a broker.",
            atomic_load(&g->connects));
    counter(b, "bucketdb_mqtt_connect_failures_total", "Failed connection attempts.",
            atomic_load(&g->connect_failures));
    counter(b, "bucketdb_mqtt_quota_pauses_total",
            "Waits of the consumer for a tenant's write rate.", atomic_load(&g->quota_pauses));
    counter(b, "bucketdb_mqtt_backpressure_pauses_total",
            "Waits of the consumer for in-flight budgets or the head guard.",
            atomic_load(&g->bp_pauses));
    counter(b, "bucketdb_mqtt_dead_letters_total",
            "Rejected MQTT messages published to the dead-letter topic.",
            atomic_load(&g->dead_letters));
    counter(b, "bucketdb_mqtt_dead_letter_failures_total",
            "Rejected MQTT messages the dead-letter topic did not take (dropped).",
            atomic_load(&g->dead_letter_failures));
    int up = 0;
    for (size_t i = 0; i < g->nclients; i++)
        up += atomic_load(&g->clients[i].connected);
    bdb_buf_printf(b,
                   "# HELP bucketdb_mqtt_connected Brokers connected and subscribed.\n"
                   "# TYPE bucketdb_mqtt_connected gauge\n"
                   "bucketdb_mqtt_connected %d\n"
                   "# HELP bucketdb_mqtt_broker_connected 1 while connected to this broker.\n"
                   "# TYPE bucketdb_mqtt_broker_connected gauge\n",
                   up);
    for (size_t i = 0; i < g->nclients; i++) {
        bdb_buf_puts(b, "bucketdb_mqtt_broker_connected{broker=\"");
        bdb_buf_json_str(b, g->clients[i].name, strlen(g->clients[i].name));
        bdb_buf_printf(b, "\"} %d\n", atomic_load(&g->clients[i].connected));
    }
}
