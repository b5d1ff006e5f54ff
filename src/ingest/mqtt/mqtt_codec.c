/* mqtt_codec: see mqtt_codec.h. Written from the MQTT 3.1.1 specification (OASIS
 * Standard, 29 October 2014), sections 2 (fixed header) and 3 (control packets). */
#include "ingest/mqtt/mqtt_codec.h"

#include <string.h>

int bdb_mqtt_decode_header(const uint8_t *buf, size_t len, size_t max_packet, bdb_mqtt_hdr *h)
{
    if (len < 2)
        return BDB_MQTT_NEED_MORE;
    size_t value = 0, mult = 1;
    for (size_t i = 1; i <= 4; i++) {
        if (i >= len)
            return BDB_MQTT_NEED_MORE;
        uint8_t b = buf[i];
        value += (size_t)(b & 0x7f) * mult;
        if (!(b & 0x80)) {
            /* the shortest encoding is required: a trailing zero byte after a
             * continuation is a non-minimal (malformed) length */
            if (i > 1 && b == 0)
                return BDB_MQTT_MALFORMED;
            h->type = buf[0] >> 4;
            h->flags = buf[0] & 0x0f;
            h->rem_len = value;
            h->hdr_len = i + 1;
            if (max_packet && h->hdr_len + value > max_packet)
                return BDB_MQTT_TOO_LARGE;
            return BDB_MQTT_COMPLETE;
        }
        mult *= 128;
    }
    return BDB_MQTT_MALFORMED; /* a fifth length byte */
}

size_t bdb_mqtt_encode_remlen(uint8_t out[4], size_t n)
{
    if (n > BDB_MQTT_MAX_REMLEN)
        return 0;
    size_t i = 0;
    do {
        uint8_t b = n % 128;
        n /= 128;
        if (n)
            b |= 0x80;
        out[i++] = b;
    } while (n);
    return i;
}

static void put_u16(bdb_buf *b, uint16_t v)
{
    bdb_buf_putc(b, (uint8_t)(v >> 8));
    bdb_buf_putc(b, (uint8_t)v);
}

static void put_str(bdb_buf *b, const char *s, size_t n)
{
    put_u16(b, (uint16_t)n);
    bdb_buf_append(b, s, n);
}

static void put_header(bdb_buf *b, uint8_t first, size_t rem)
{
    uint8_t l[4];
    size_t n = bdb_mqtt_encode_remlen(l, rem);
    bdb_buf_putc(b, first);
    bdb_buf_append(b, l, n);
}

int bdb_mqtt_encode_connect(bdb_buf *out, const char *client_id, const char *user, const char *pass,
                            uint16_t keepalive_s, int clean_session)
{
    size_t cl = client_id ? strlen(client_id) : 0;
    size_t ul = user ? strlen(user) : 0, pl = pass ? strlen(pass) : 0;
    if (cl > 65535 || ul > 65535 || pl > 65535 || (pl && !ul))
        return -1; /* a password needs a user name [MQTT-3.1.2-22] */
    size_t rem = 10 + 2 + cl + (ul ? 2 + ul : 0) + (pl ? 2 + pl : 0);
    uint8_t flags = clean_session ? 0x02 : 0;
    if (ul)
        flags |= 0x80;
    if (pl)
        flags |= 0x40;
    put_header(out, BDB_MQTT_CONNECT << 4, rem);
    put_str(out, "MQTT", 4);
    bdb_buf_putc(out, 4); /* protocol level 3.1.1 */
    bdb_buf_putc(out, flags);
    put_u16(out, keepalive_s);
    put_str(out, client_id ? client_id : "", cl);
    if (ul)
        put_str(out, user, ul);
    if (pl)
        put_str(out, pass, pl);
    return 0;
}

int bdb_mqtt_encode_subscribe(bdb_buf *out, uint16_t packet_id, const char *const *filters,
                              size_t n, uint8_t qos)
{
    if (n == 0 || packet_id == 0 || qos > 2)
        return -1;
    size_t rem = 2;
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(filters[i]);
        if (l == 0 || l > 65535)
            return -1;
        rem += 2 + l + 1;
    }
    if (rem > BDB_MQTT_MAX_REMLEN)
        return -1;
    put_header(out, (BDB_MQTT_SUBSCRIBE << 4) | 0x02, rem);
    put_u16(out, packet_id);
    for (size_t i = 0; i < n; i++) {
        put_str(out, filters[i], strlen(filters[i]));
        bdb_buf_putc(out, qos);
    }
    return 0;
}

void bdb_mqtt_encode_puback(bdb_buf *out, uint16_t packet_id)
{
    bdb_buf_putc(out, BDB_MQTT_PUBACK << 4);
    bdb_buf_putc(out, 2);
    put_u16(out, packet_id);
}

void bdb_mqtt_encode_pingreq(bdb_buf *out)
{
    bdb_buf_putc(out, BDB_MQTT_PINGREQ << 4);
    bdb_buf_putc(out, 0);
}

void bdb_mqtt_encode_disconnect(bdb_buf *out)
{
    bdb_buf_putc(out, BDB_MQTT_DISCONNECT << 4);
    bdb_buf_putc(out, 0);
}

int bdb_mqtt_encode_publish(bdb_buf *out, const char *topic, const void *payload, size_t len,
                            uint8_t qos, int dup, uint16_t packet_id)
{
    size_t tl = strlen(topic);
    if (tl == 0 || tl > 65535 || qos > 1 || (qos && !packet_id))
        return -1;
    size_t rem = 2 + tl + (qos ? 2 : 0) + len;
    if (rem > BDB_MQTT_MAX_REMLEN)
        return -1;
    put_header(out, (uint8_t)((BDB_MQTT_PUBLISH << 4) | (dup ? 0x08 : 0) | (qos << 1)), rem);
    put_str(out, topic, tl);
    if (qos)
        put_u16(out, packet_id);
    bdb_buf_append(out, payload, len);
    return 0;
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

int bdb_mqtt_parse_publish(uint8_t flags, const uint8_t *body, size_t len, bdb_mqtt_publish *p)
{
    memset(p, 0, sizeof *p);
    p->dup = (flags >> 3) & 1;
    p->qos = (flags >> 1) & 3;
    p->retain = flags & 1;
    if (p->qos == 3 || (p->qos == 0 && p->dup))
        return -1; /* [MQTT-3.3.1-4], [MQTT-3.3.1-2] */
    if (len < 2)
        return -1;
    size_t tl = get_u16(body);
    if (tl == 0 || tl > len - 2)
        return -1;
    const char *t = (const char *)body + 2;
    for (size_t i = 0; i < tl; i++)
        if (t[i] == '+' || t[i] == '#' || t[i] == '\0')
            return -1; /* [MQTT-3.3.2-2], [MQTT-1.5.3-2] */
    size_t off = 2 + tl;
    if (p->qos) {
        if (len - off < 2)
            return -1;
        p->packet_id = get_u16(body + off);
        if (!p->packet_id)
            return -1;
        off += 2;
    }
    p->topic = t;
    p->topic_len = tl;
    p->payload = body + off;
    p->payload_len = len - off;
    return 0;
}

int bdb_mqtt_parse_connack(const uint8_t *body, size_t len, int *session_present, int *return_code)
{
    if (len != 2 || (body[0] & 0xfe))
        return -1;
    *session_present = body[0] & 1;
    *return_code = body[1];
    return 0;
}

int bdb_mqtt_parse_suback(const uint8_t *body, size_t len, uint16_t *packet_id, uint8_t *codes,
                          size_t max, size_t *n)
{
    if (len < 3)
        return -1;
    *packet_id = get_u16(body);
    *n = 0;
    for (size_t i = 2; i < len; i++) {
        uint8_t c = body[i];
        if (c > 2 && c != 0x80)
            return -1;
        if (*n < max)
            codes[(*n)++] = c;
    }
    return 0;
}

int bdb_mqtt_filter_valid(const char *f)
{
    size_t n = strlen(f);
    if (n == 0 || n > 65535)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int start = i == 0 || f[i - 1] == '/';
        int end = i + 1 == n || f[i + 1] == '/';
        if (f[i] == '+' && !(start && end))
            return 0;
        if (f[i] == '#' && !(start && i + 1 == n))
            return 0;
    }
    return 1;
}

int bdb_mqtt_topic_match(const char *f, const char *t, size_t tl)
{
    if (tl && t[0] == '$' && (f[0] == '+' || f[0] == '#'))
        return 0; /* [MQTT-4.7.2-1] */
    size_t ti = 0;
    for (;;) {
        if (f[0] == '#')
            return 1; /* the rest, including the parent level itself */
        /* the filter's level */
        const char *fe = strchr(f, '/');
        size_t fl = fe ? (size_t)(fe - f) : strlen(f);
        /* the topic's level */
        size_t te = ti;
        while (te < tl && t[te] != '/')
            te++;
        if (ti > tl)
            return 0; /* the topic has no more levels */
        if (!(fl == 1 && f[0] == '+') && (fl != te - ti || memcmp(f, t + ti, fl) != 0))
            return 0;
        int t_more = te < tl; /* a '/' follows in the topic */
        if (!fe)              /* the filter ends */
            return !t_more;
        f = fe + 1;
        if (!t_more) /* "a/b" vs "a/b/#" matches; anything else needs more levels */
            return f[0] == '#' && f[1] == '\0';
        ti = te + 1;
    }
}

const char *bdb_mqtt_connack_str(int rc)
{
    switch (rc) {
    case 0:
        return "accepted";
    case 1:
        return "unacceptable protocol version";
    case 2:
        return "identifier rejected";
    case 3:
        return "server unavailable";
    case 4:
        return "bad user name or password";
    case 5:
        return "not authorized";
    default:
        return "unknown return code";
    }
}
