/* mqtt_msg: one MQTT message from topic to durable samples, through the admission of
 * HTTP writes (admit.h, docs/MQTT.md#delivery-guarantee):
 *
 *   1. topic -> tenant and device (the topic scheme); a topic that does not fit is
 *      rejected;
 *   2. the reservation (bdb_admit_reserve: head guard, in-flight budgets): when
 *      refused the gateway pauses (stops reading, the broker holds the stream) and
 *      tries again, it never drops;
 *   3. payload -> batch (the format of the topic's pattern);
 *   4. bdb_admit_batch: the head guard or the tenant's write rate pause as in 2;
 *      every other refusal (storage quota, device quota, a message over the burst,
 *      max_rps, a hot partition's rate limit) rejects it, since waiting would not
 *      help or would stall every other tenant behind one; a hot partition's sample
 *      policy stores only the kept reports;
 *   5. bdb_db_write; a storage failure is never acknowledged.
 *
 * A rejected message is counted, logged with topic and reason, published to the
 * dead-letter topic when one is configured (QoS 1, acknowledged by the broker
 * before the original is), and acknowledged. */
#include "server/mqtt/mqtt_gw_int.h"

#include "ingest/devrule.h"
#include "bucketdb/bdb.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "server/admission/admit.h"
#include "server/server_int.h"
#include "server/tenants/tenants.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAUSE_STEP_MS 50

/* Replaces control characters (C0, DEL, C1) and bytes that are not UTF-8 with '?', in
 * place, so a topic or reason built from untrusted bytes is a valid MQTT 5 user
 * property (well-formed UTF-8; brokers refuse control characters) and one line in the
 * log, while a topic like "fabrik/K\u00f6ln/..." stays as it was. */
static void sanitize(char *s)
{
    unsigned char *p = (unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t l = p[i] < 0x80 ? 1 : bdb_utf8_seq(p + i, n - i);
        if (!l || p[i] < 0x20 || p[i] == 0x7f || (p[i] == 0xc2 && p[i + 1] < 0xa0)) {
            p[i++] = '?'; /* one byte at a time: what follows may be well-formed */
            continue;
        }
        i += l;
    }
}

/* The topic as a NUL-terminated string for logs and dead letters: whole (up to the
 * 65,535 bytes MQTT allows), sanitized; NULL when memory runs out. */
static char *topic_copy(const char *t, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++)
        s[i] = t[i] ? t[i] : '?'; /* MQTT forbids NUL in topics; a broker might not */
    s[n] = '\0';
    sanitize(s);
    return s;
}

/* ------------------------------------------------------------ dead letters */

static void remove_bytes(bdb_buf *b, size_t off, size_t n)
{
    memmove(b->data + off, b->data + off + n, b->len - off - n);
    b->len -= n;
}

/* Waits for the broker's PUBACK of our packet pid. Packets after the message being
 * handled (which starts rbuf and ends at `from`) are left in place, except PUBACKs
 * and PINGRESPs, which are taken out. 0 with *reason, or -1 (connection failed,
 * timeout, stop). */
static int await_puback(mq_client *c, size_t from, uint16_t pid, int *reason)
{
    bdb_mqtt_gw *g = c->g;
    int64_t deadline = bdb_monotonic_ms() + MQ_DEAD_LETTER_WAIT_MS;
    for (;;) {
        size_t off = from;
        for (;;) {
            bdb_mqtt_hdr h;
            if (bdb_mqtt_decode_header(c->rbuf.data + off, c->rbuf.len - off, g->max_packet, &h) !=
                    BDB_MQTT_COMPLETE ||
                c->rbuf.len - off < h.hdr_len + h.rem_len)
                break;
            size_t size = h.hdr_len + h.rem_len;
            if (h.type == BDB_MQTT_PUBACK) {
                uint16_t id;
                int rc;
                if (bdb_mqtt_parse_puback(g->version, c->rbuf.data + off + h.hdr_len, h.rem_len,
                                          &id, &rc, NULL) != 0)
                    return -1;
                remove_bytes(&c->rbuf, off, size);
                if (id == pid) {
                    *reason = rc;
                    return 0;
                }
                continue; /* an acknowledgement of an earlier connection's message */
            }
            if (h.type == BDB_MQTT_PINGRESP) {
                remove_bytes(&c->rbuf, off, size);
                c->ping_out = 0;
                continue;
            }
            off += size;
        }
        if (bdb_monotonic_ms() > deadline) {
            BDB_WARN("mqtt: no PUBACK from %s for the dead-letter message within %d s", c->name,
                     MQ_DEAD_LETTER_WAIT_MS / 1000);
            return -1;
        }
        if (atomic_load(&g->stop) || mq_keepalive(c) != 0 || mq_read(c, 200) < 0)
            return -1;
    }
}

static uint16_t dead_letter_pid(mq_client *c)
{
    if (++c->next_pid <= MQ_MAX_FILTERS) /* 1..MQ_MAX_FILTERS are the SUBSCRIBEs' */
        c->next_pid = MQ_MAX_FILTERS + 1;
    return c->next_pid;
}

/* The 3.1.1 envelope up to the base64 of the payload; "\"}" closes it. */
static void envelope_head(bdb_buf *env, const char *topic, const char *why)
{
    bdb_buf_puts(env, "{\"topic\":\"");
    bdb_buf_json_str(env, topic, strlen(topic));
    bdb_buf_puts(env, "\",\"reason\":\"");
    bdb_buf_json_str(env, why, strlen(why));
    bdb_buf_puts(env, "\",\"payload_base64\":\"");
}

static void put_base64(bdb_buf *b, const uint8_t *p, size_t n)
{
    bdb_buf_reserve(b, 4 * ((n + 2) / 3) + 1);
    b->len += (size_t)EVP_EncodeBlock(b->data + b->len, p, (int)n);
}

/* A dead letter that does not fit the broker's maximum packet size: counted, logged,
 * and the original acknowledged anyway (it could never be dead-lettered). */
static void dead_letter_too_large(mq_client *c, const char *topic)
{
    bdb_buf_reset(&c->wbuf);
    atomic_fetch_add(&c->g->dead_letter_failures, 1);
    BDB_ERROR("mqtt: message on '%s' too large for the dead-letter topic '%s'; dropped", topic,
              c->g->s->cfg.mqtt_dead_letter_topic);
}

/* After the dead letter pid was sent: waits for the broker's PUBACK and counts the
 * outcome. 0 (the original may be acknowledged), -1 to reconnect. */
static int dead_letter_outcome(mq_client *c, uint16_t pid, size_t end, const char *topic)
{
    bdb_mqtt_gw *g = c->g;
    int reason = 0;
    if (await_puback(c, end, pid, &reason) != 0)
        return -1;
    if (reason >= 0x80) {
        atomic_fetch_add(&g->dead_letter_failures, 1);
        BDB_ERROR("mqtt: broker %s refused the dead-letter message for '%s' on '%s': %s; the "
                  "message is dropped",
                  c->name, topic, g->s->cfg.mqtt_dead_letter_topic, bdb_mqtt_reason_str(reason));
        return 0;
    }
    atomic_fetch_add(&g->dead_letters, 1);
    return 0;
}

/* Publishes a rejected message to the dead-letter topic and waits for the broker to
 * have it. MQTT 5: the original payload with user properties reason and topic; 3.1.1:
 * a JSON envelope {"topic","reason","payload_base64"}. Returns 0 when the original
 * may be acknowledged (also when the broker refused the dead letter: logged and
 * counted, the consumer must not stall), -1 to reconnect. */
static int dead_letter(mq_client *c, const bdb_mqtt_publish *p, const char *topic, const char *why,
                       size_t end)
{
    bdb_mqtt_gw *g = c->g;
    const char *dl = g->s->cfg.mqtt_dead_letter_topic;
    uint16_t pid = dead_letter_pid(c);
    int rc;
    if (g->version == BDB_MQTT_V5) {
        bdb_mqtt_user_prop props[] = {{"reason", why}, {"topic", topic}};
        rc = bdb_mqtt_encode_publish_v(&c->wbuf, g->version, dl, p->payload, p->payload_len, 1, 0,
                                       pid, props, 2);
    } else {
        bdb_buf env;
        bdb_buf_init(&env);
        envelope_head(&env, topic, why);
        put_base64(&env, p->payload, p->payload_len);
        bdb_buf_puts(&env, "\"}");
        rc = bdb_mqtt_encode_publish_v(&c->wbuf, g->version, dl, env.data, env.len, 1, 0, pid, NULL,
                                       0);
        bdb_buf_free(&env);
    }
    if (rc != 0 || (c->broker_max_pkt && c->wbuf.len > c->broker_max_pkt)) {
        dead_letter_too_large(c, topic);
        return 0;
    }
    if (mq_flush(c) != 0)
        return -1;
    return dead_letter_outcome(c, pid, end, topic);
}

/* Sends n bytes of an oversized message's payload as part of the dead letter being
 * streamed: as they are (MQTT 5) or as base64 (3.1.1), keeping up to 2 bytes in
 * carry for the next call unless last. 0, or -1 (connection failed). */
static int stream_chunk(mq_client *c, int b64, uint8_t carry[3], size_t *ncarry, const uint8_t *p,
                        size_t n, int last)
{
    if (!b64) {
        bdb_buf_append(&c->wbuf, p, n);
        return mq_flush(c);
    }
    while (n && *ncarry && *ncarry < 3) {
        carry[(*ncarry)++] = *p++;
        n--;
    }
    if (*ncarry == 3 || (last && *ncarry)) {
        put_base64(&c->wbuf, carry, *ncarry);
        *ncarry = 0;
    }
    size_t whole = last ? n : n - n % 3;
    put_base64(&c->wbuf, p, whole);
    memcpy(carry, p + whole, n - whole);
    *ncarry += n - whole;
    return mq_flush(c);
}

static int dead_letter_large_named(mq_client *c, const bdb_mqtt_hdr *h, const bdb_mqtt_publish *pp,
                                   const char *topic);

int mq_dead_letter_large(mq_client *c, const bdb_mqtt_hdr *h, size_t prefix)
{
    bdb_mqtt_gw *g = c->g;
    bdb_mqtt_publish p;
    bdb_mqtt_props props;
    if (bdb_mqtt_parse_publish_v(g->version, h->flags, c->rbuf.data + h->hdr_len, prefix, &p,
                                 &props) != 0)
        return 1; /* e.g. MQTT 5 properties longer than the prefix read */
    char *topic = topic_copy(p.topic, p.topic_len);
    if (!topic)
        return -1; /* out of memory: reconnect; the broker redelivers it */
    int ret = dead_letter_large_named(c, h, &p, topic);
    free(topic);
    return ret;
}

static int dead_letter_large_named(mq_client *c, const bdb_mqtt_hdr *h, const bdb_mqtt_publish *pp,
                                   const char *topic)
{
    bdb_mqtt_gw *g = c->g;
    const char *dl = g->s->cfg.mqtt_dead_letter_topic;
    bdb_mqtt_publish p = *pp;
    char why[200];
    size_t end = h->hdr_len + h->rem_len, off = (size_t)(p.payload - c->rbuf.data);
    size_t total = end - off;
    snprintf(why, sizeof why, "too large: %zu bytes, more than max_body_bytes + 64 KiB (%zu)",
             total, g->max_packet);
    uint16_t pid = dead_letter_pid(c);
    int b64 = g->version != BDB_MQTT_V5;
    int rc;
    if (!b64) {
        bdb_mqtt_user_prop up[] = {{"reason", why}, {"topic", topic}};
        rc = bdb_mqtt_encode_publish_v(&c->wbuf, g->version, dl, NULL, total, 1, 0, pid, up, 2);
    } else {
        bdb_buf env;
        bdb_buf_init(&env);
        envelope_head(&env, topic, why);
        rc = bdb_mqtt_encode_publish_v(&c->wbuf, g->version, dl, NULL,
                                       env.len + 4 * ((total + 2) / 3) + 2, 1, 0, pid, NULL, 0);
        if (rc == 0)
            bdb_buf_append(&c->wbuf, env.data, env.len);
        bdb_buf_free(&env);
    }
    uint64_t size = c->wbuf.len + (b64 ? 4 * ((total + 2) / 3) + 2 : total);
    if (rc != 0 || (c->broker_max_pkt && size > c->broker_max_pkt)) {
        dead_letter_too_large(c, topic);
        return 1;
    }
    atomic_fetch_add(&g->results[MR_BAD], 1);
    BDB_WARN("mqtt: dead-lettered message on '%s': %s", topic, why);
    /* The head, what of the payload is here, then the rest as it arrives: memory stays
     * bounded by a read (64 KiB) whatever the message's size. */
    uint8_t carry[3];
    size_t ncarry = 0, have = (c->rbuf.len < end ? c->rbuf.len : end) - off;
    if (mq_flush(c) != 0 ||
        stream_chunk(c, b64, carry, &ncarry, c->rbuf.data + off, have, have == total) != 0)
        return -1;
    remove_bytes(&c->rbuf, 0, off + have);
    size_t left = total - have;
    int64_t deadline = bdb_monotonic_ms() + MQ_DEAD_LETTER_WAIT_MS;
    while (left) {
        if (atomic_load(&g->stop) || bdb_monotonic_ms() > deadline)
            return -1;
        int r = mq_read(c, 200);
        if (r < 0)
            return -1;
        size_t take = c->rbuf.len < left ? c->rbuf.len : left;
        if (!take)
            continue;
        if (stream_chunk(c, b64, carry, &ncarry, c->rbuf.data, take, take == left) != 0)
            return -1;
        remove_bytes(&c->rbuf, 0, take);
        left -= take;
        deadline = bdb_monotonic_ms() + MQ_DEAD_LETTER_WAIT_MS; /* progress */
    }
    if (b64) {
        bdb_buf_puts(&c->wbuf, "\"}");
        if (mq_flush(c) != 0)
            return -1;
    }
    return dead_letter_outcome(c, pid, 0, topic);
}

/* Counts and logs a rejected message, dead-letters it when configured. */
static int reject(mq_client *c, const bdb_mqtt_publish *p, int too_large, const char *topic,
                  int result, char *why, uint8_t code, uint8_t *reason)
{
    bdb_mqtt_gw *g = c->g;
    sanitize(why);
    atomic_fetch_add(&g->results[result], 1);
    int dl = g->s->cfg.mqtt_dead_letter_topic[0] && !too_large;
    BDB_WARN("mqtt: %s message on '%s': %s", dl ? "dead-lettered" : "dropped", topic, why);
    *reason = code;
    if (!dl)
        return 0;
    *reason = BDB_MQTT_RC_SUCCESS; /* handled: it is in the dead-letter topic */
    size_t end = (size_t)(p->payload + p->payload_len - c->rbuf.data);
    return dead_letter(c, p, topic, why, end);
}

/* ------------------------------------------------------------ admission */

/* Pauses while the server refuses the message's in-flight reservation or the head
 * is over its bound. 1 admitted (*t holds the reservation), -1 stopping or the
 * connection failed while pausing. */
static int admit_bp(mq_client *c, const char *tenant, uint64_t bytes, bdb_admit_ticket *t,
                    const char *topic)
{
    bdb_server *s = c->g->s;
    int logged = 0;
    for (;;) {
        enum bdb_bp_reason why = bdb_admit_reserve(s->admit, t, tenant, bytes);
        if (why == BDB_BP_NONE)
            return 1;
        atomic_fetch_add(&c->g->bp_pauses, 1);
        if (!logged++)
            BDB_WARN("mqtt: server saturated (%s); consumption from %s paused (message on '%s' "
                     "not yet acknowledged)",
                     bdb_bp_reason_name(why), c->name, topic);
        if (mq_keepalive(c) != 0 || mq_sleep(c->g, PAUSE_STEP_MS) != 0)
            return -1;
    }
}

/* The admission of a parsed message (admit.h), pausing while the head is over its
 * bound or the tenant over its write rate, since waiting lets those pass: the verdict
 * (OK or a refusal that waiting cannot lift), or -1 stopping or the connection failed
 * while pausing. */
static int admit_message(mq_client *c, bdb_admit_ticket *t, const char *tenant, const bdb_batch *b,
                         const char *topic, bdb_admit_result *ar)
{
    bdb_mqtt_gw *g = c->g;
    int logged = 0;
    for (;;) {
        enum bdb_admit_verdict v =
            bdb_admit_batch(g->s->admit, t, tenant, b, "message", bdb_monotonic_ms(), ar);
        if (v != BDB_ADMIT_HEAD && v != BDB_ADMIT_RATE)
            return v;
        atomic_fetch_add(v == BDB_ADMIT_RATE ? &g->quota_pauses : &g->bp_pauses, 1);
        if (!logged++ && v == BDB_ADMIT_RATE)
            BDB_WARN("mqtt: tenant '%s' is over its write rate of %llu samples/s; consumption "
                     "paused (message on '%s' not yet acknowledged)",
                     tenant, (unsigned long long)ar->limit, topic);
        else if (logged == 1)
            BDB_WARN("mqtt: server saturated (%s); consumption from %s paused (message on '%s' "
                     "not yet acknowledged)",
                     bdb_admit_limit_name(v), c->name, topic);
        if (mq_keepalive(c) != 0 || mq_sleep(g, v == BDB_ADMIT_RATE ? 250 : PAUSE_STEP_MS) != 0)
            return -1;
    }
}

/* The counter of a refusal that waiting cannot lift. */
static int refused_result(enum bdb_admit_verdict v)
{
    switch (v) {
    case BDB_ADMIT_STORAGE:
        return MR_STORAGE_QUOTA;
    case BDB_ADMIT_DEVICES:
        return MR_DEVICE_QUOTA;
    case BDB_ADMIT_BURST:
        return MR_OVER_BURST;
    case BDB_ADMIT_DEVICE_RATE:
        return MR_DEVICE_RATE;
    default:
        return MR_HOT;
    }
}

/* ------------------------------------------------------------ one message */

/* The format a payload was read as, for the log. */
static const char *shape_name(int shape)
{
    return shape == BDB_MQTT_FMT_LP ? "line-protocol" : bdb_mqtt_format_name(shape);
}

static int handle_message(mq_client *c, const bdb_mqtt_publish *p, int too_large, uint32_t sub_id,
                          uint8_t *reason, const char *topic, char *device);

const bdb_mqtt_route *mq_route_of(const bdb_mqtt_gw *g, uint32_t sub_id, const char *topic,
                                  size_t len)
{
    if (!g->by_route) /* the single-setting form: as cheap as before routes existed */
        return &g->routes[0];
    /* The persistent session may still hold subscriptions of an earlier configuration
     * (removed or renumbered routes): an identifier counts only when its route's
     * filter matches the topic. */
    if (sub_id >= 1 && sub_id <= g->nroutes &&
        bdb_mqtt_route_matches(&g->routes[sub_id - 1], topic, len))
        return &g->routes[sub_id - 1];
    for (size_t i = 0; i < g->nroutes; i++)
        if (bdb_mqtt_route_matches(&g->routes[i], topic, len))
            return &g->routes[i];
    return NULL;
}

int mq_handle_message(mq_client *c, const bdb_mqtt_publish *p, int too_large, uint32_t sub_id,
                      uint8_t *reason)
{
    /* the device level is part of the topic, so the topic's length bounds it */
    char *topic = topic_copy(p->topic, p->topic_len), *device = malloc(p->topic_len + 1);
    int ret = -1; /* out of memory: not acknowledged, the broker redelivers it */
    if (topic && device)
        ret = handle_message(c, p, too_large, sub_id, reason, topic, device);
    free(topic);
    free(device);
    return ret;
}

static int handle_message(mq_client *c, const bdb_mqtt_publish *p, int too_large, uint32_t sub_id,
                          uint8_t *reason, const char *topic, char *device)
{
    bdb_mqtt_gw *g = c->g;
    bdb_server *s = g->s;
    char why[700], tenant[BDB_TENANT_KEY_MAX + 1], tname[BDB_TENANT_NAME_MAX + 1];
    *reason = BDB_MQTT_RC_SUCCESS;
    if (p->dup)
        atomic_fetch_add(&g->duplicates, 1);
    if (too_large) {
        snprintf(why, sizeof why, "larger than %zu bytes (max_body_bytes)", g->max_packet);
        return reject(c, p, 1, topic, MR_BAD, why, BDB_MQTT_RC_PAYLOAD_INVALID, reason);
    }
    const bdb_mqtt_route *rt = mq_route_of(g, sub_id, p->topic, p->topic_len);
    if (!rt)
        return reject(c, p, 0, topic, MR_BAD, "topic matches no mqtt_route filter",
                      BDB_MQTT_RC_TOPIC_INVALID, reason);
    size_t dcap = s->cfg.max_key_bytes < p->topic_len ? s->cfg.max_key_bytes + 1 : p->topic_len + 1;
    if (bdb_mqtt_topic_names(&rt->scheme, rt->tenant[0] ? rt->tenant : s->cfg.default_tenant,
                             p->topic, p->topic_len, tname, sizeof tname, device, dcap, why,
                             sizeof why) != 0)
        return reject(c, p, 0, topic, MR_BAD, why, BDB_MQTT_RC_TOPIC_INVALID, reason);
    /* as HTTP writes: a deleted tenant's data stays out of reach (req_tenant) */
    bdb_tenants_storage_key(s->tenants, tname, tenant, sizeof tenant);

    bdb_admit_ticket ticket = BDB_ADMIT_TICKET_INIT;
    if (admit_bp(c, tenant, p->payload_len, &ticket, topic) < 0)
        return -1;
    int ret = -1, rc = BDB_ERR_INVALID; /* rc: nothing written */
    bdb_mqtt_in in = {0};
    if (g->by_route) {
        in.format = rt->format;
        in.metric_level = rt->level;
    } else {
        in.format = bdb_mqtt_format_match(&g->formats, p->topic, p->topic_len, &in.metric_level);
    }
    in.topic = p->topic;
    in.topic_len = p->topic_len;
    in.max_age_ms = bdb_db_retention_ms(s->db, tenant);
    bdb_devrule rule;
    server_device_rule(s, tenant, &rule);
    in.rule = &rule;
    bdb_batch *b = bdb_batch_new();
    char pwhy[600];
    int pr = !b ? BDB_MQTT_BAD
                : bdb_mqtt_payload_parse_in(&s->cfg, &in, (const char *)p->payload, p->payload_len,
                                            device, bdb_now_ms(), b, pwhy, sizeof pwhy);
    if (pr == BDB_MQTT_BAD) {
        snprintf(why, sizeof why, "malformed %s payload%s: %s", !b ? "" : shape_name(in.shape),
                 in.format == BDB_MQTT_FMT_AUTO ? " (format recognised from the payload)" : "",
                 pwhy);
        ret = reject(c, p, 0, topic, MR_BAD, why, BDB_MQTT_RC_PAYLOAD_INVALID, reason);
        goto out;
    }
    bdb_admit_result ar;
    int v = admit_message(c, &ticket, tenant, b, topic, &ar);
    if (v < 0)
        goto out; /* not acknowledged: the broker re-sends it */
    if (v != BDB_ADMIT_OK) {
        snprintf(why, sizeof why, "%s", ar.msg);
        ret = reject(c, p, 0, topic, refused_result(v), why, BDB_MQTT_RC_QUOTA_EXCEEDED, reason);
        goto out;
    }
    /* ar.batch: with the hot sample policy, the kept reports */
    rc = bdb_db_write(s->db, tenant, ar.batch);
    size_t n = bdb_batch_samples(ar.batch);
    /* released before anything below may wait for the broker (a dead letter) */
    bdb_admit_done(s->admit, &ticket, rc);
    if (rc == BDB_ERR_LIMIT || rc == BDB_ERR_INVALID) {
        /* a property of the message (e.g. too many metrics in one report): retrying
         * cannot help, so it is rejected like any malformed message */
        snprintf(why, sizeof why, "%s", bdb_strerror(rc));
        ret = reject(c, p, 0, topic, MR_BAD, why, BDB_MQTT_RC_PAYLOAD_INVALID, reason);
        goto written;
    }
    if (rc != BDB_OK) {
        atomic_fetch_add(&g->results[MR_WRITE_FAILED], 1);
        atomic_fetch_add(&s->write_failures, 1);
        BDB_ERROR("mqtt: cannot store message on '%s': %s; not acknowledged, the broker keeps "
                  "it; reconnecting later",
                  topic, bdb_strerror(rc));
        goto written;
    }
    atomic_fetch_add(&g->samples, n);
    if (in.strings_skipped)
        atomic_fetch_add(&g->strings_skipped, in.strings_skipped);
    hist_observe(&s->batch_size, n);
    count_ingest(s, tenant, n);
    if (pr == BDB_MQTT_PARTIAL) {
        atomic_fetch_add(&g->results[MR_PARTIAL], 1);
        sanitize(pwhy);
        BDB_WARN("mqtt: partly stored message on '%s': %s", topic, pwhy);
    } else {
        atomic_fetch_add(&g->results[MR_OK], 1);
    }
    ret = 0;
    goto written;
out: /* before the write: the ticket is released here, once */
    bdb_admit_done(s->admit, &ticket, rc);
written:
    bdb_batch_free(b);
    return ret;
}
