/* mqtt_codec: see mqtt_codec.h. Written from the MQTT 3.1.1 specification (OASIS
 * Standard, 29 October 2014), sections 2 (fixed header) and 3 (control packets), and
 * the MQTT 5.0 specification (OASIS Standard, 7 March 2019), sections 2.2.2
 * (properties), 2.4 (reason codes), 3 and 4.8.2 (shared subscriptions). */
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

static void put_u32(bdb_buf *b, uint32_t v)
{
    put_u16(b, (uint16_t)(v >> 16));
    put_u16(b, (uint16_t)v);
}

int bdb_mqtt_encode_connect(bdb_buf *out, const char *client_id, const char *user, const char *pass,
                            uint16_t keepalive_s, int clean_session)
{
    bdb_mqtt_connect_opts o = {BDB_MQTT_V311, client_id, user, pass, keepalive_s,
                               clean_session, 0,         0,    0};
    return bdb_mqtt_encode_connect_opts(out, &o);
}

int bdb_mqtt_encode_connect_opts(bdb_buf *out, const bdb_mqtt_connect_opts *o)
{
    const char *client_id = o->client_id, *user = o->user, *pass = o->pass;
    size_t cl = client_id ? strlen(client_id) : 0;
    size_t ul = user ? strlen(user) : 0, pl = pass ? strlen(pass) : 0;
    int v5 = o->version == BDB_MQTT_V5;
    if (cl > 65535 || ul > 65535 || pl > 65535 || (pl && !ul && !v5))
        return -1; /* 3.1.1: a password needs a user name [MQTT-3.1.2-22]; 5 lifts it */
    if (o->version != BDB_MQTT_V311 && !v5)
        return -1;
    /* MQTT 5 properties: session expiry (5 bytes), receive maximum (3), maximum
     * packet size (5); Topic Alias Maximum is left at its default 0, so the broker
     * never replaces a topic by an alias. */
    size_t plen = 0;
    if (v5)
        plen = 5 + (o->receive_max ? 3 : 0) + (o->max_packet ? 5 : 0);
    uint8_t pl_enc[4];
    size_t plh = v5 ? bdb_mqtt_encode_remlen(pl_enc, plen) : 0;
    size_t rem = 10 + plh + plen + 2 + cl + (ul ? 2 + ul : 0) + (pl ? 2 + pl : 0);
    uint8_t flags = o->clean_start ? 0x02 : 0;
    if (ul)
        flags |= 0x80;
    if (pl)
        flags |= 0x40;
    put_header(out, BDB_MQTT_CONNECT << 4, rem);
    put_str(out, "MQTT", 4);
    bdb_buf_putc(out, (uint8_t)o->version);
    bdb_buf_putc(out, flags);
    put_u16(out, o->keepalive_s);
    if (v5) {
        bdb_buf_append(out, pl_enc, plh);
        bdb_buf_putc(out, 0x11);
        put_u32(out, o->session_expiry_s);
        if (o->receive_max) {
            bdb_buf_putc(out, 0x21);
            put_u16(out, o->receive_max);
        }
        if (o->max_packet) {
            bdb_buf_putc(out, 0x27);
            put_u32(out, o->max_packet);
        }
    }
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
    return bdb_mqtt_encode_subscribe_v(out, BDB_MQTT_V311, packet_id, filters, n, qos);
}

int bdb_mqtt_encode_subscribe_v(bdb_buf *out, int version, uint16_t packet_id,
                                const char *const *filters, size_t n, uint8_t qos)
{
    if (n == 0 || packet_id == 0 || qos > 2)
        return -1;
    int v5 = version == BDB_MQTT_V5;
    size_t rem = 2 + (v5 ? 1 : 0);
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
    if (v5)
        bdb_buf_putc(out, 0); /* no properties */
    for (size_t i = 0; i < n; i++) {
        put_str(out, filters[i], strlen(filters[i]));
        bdb_buf_putc(out, qos); /* MQTT 5: retain handling 0, no local 0, RAP 0 */
    }
    return 0;
}

int bdb_mqtt_encode_subscribe_id(bdb_buf *out, int version, uint16_t packet_id, const char *filter,
                                 uint8_t qos, uint32_t sub_id)
{
    int v5 = version == BDB_MQTT_V5;
    size_t l = strlen(filter);
    if (packet_id == 0 || qos > 2 || l == 0 || l > 65535 || sub_id > 268435455u)
        return -1;
    uint8_t props[6];
    size_t pn = 0;
    if (v5 && sub_id) {
        props[pn++] = 0x0b;
        for (uint32_t v = sub_id; v; v >>= 7) /* variable byte integer */
            props[pn++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
    }
    put_header(out, (BDB_MQTT_SUBSCRIBE << 4) | 0x02, 2 + (v5 ? 1 + pn : 0) + 2 + l + 1);
    put_u16(out, packet_id);
    if (v5) {
        bdb_buf_putc(out, (uint8_t)pn);
        bdb_buf_append(out, props, pn);
    }
    put_str(out, filter, l);
    bdb_buf_putc(out, qos);
    return 0;
}

void bdb_mqtt_encode_puback(bdb_buf *out, uint16_t packet_id)
{
    bdb_mqtt_encode_puback_v(out, BDB_MQTT_V311, packet_id, 0);
}

void bdb_mqtt_encode_puback_v(bdb_buf *out, int version, uint16_t packet_id, uint8_t reason)
{
    int with_reason = version == BDB_MQTT_V5 && reason != BDB_MQTT_RC_SUCCESS;
    bdb_buf_putc(out, BDB_MQTT_PUBACK << 4);
    bdb_buf_putc(out, with_reason ? 3 : 2); /* 3: reason code, no properties */
    put_u16(out, packet_id);
    if (with_reason)
        bdb_buf_putc(out, reason);
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

void bdb_mqtt_encode_disconnect_v(bdb_buf *out, int version)
{
    (void)version; /* MQTT 5: remaining length 0 = reason 0x00, no properties */
    bdb_mqtt_encode_disconnect(out);
}

int bdb_mqtt_encode_publish(bdb_buf *out, const char *topic, const void *payload, size_t len,
                            uint8_t qos, int dup, uint16_t packet_id)
{
    return bdb_mqtt_encode_publish_v(out, BDB_MQTT_V311, topic, payload, len, qos, dup, packet_id,
                                     NULL, 0);
}

int bdb_mqtt_encode_publish_v(bdb_buf *out, int version, const char *topic, const void *payload,
                              size_t len, uint8_t qos, int dup, uint16_t packet_id,
                              const bdb_mqtt_user_prop *props, size_t nprops)
{
    size_t tl = strlen(topic);
    if (tl == 0 || tl > 65535 || qos > 1 || (qos && !packet_id))
        return -1;
    int v5 = version == BDB_MQTT_V5;
    size_t plen = 0;
    for (size_t i = 0; v5 && i < nprops; i++) {
        size_t kl = strlen(props[i].key), vl = strlen(props[i].value);
        if (kl > 65535 || vl > 65535)
            return -1;
        plen += 1 + 2 + kl + 2 + vl;
    }
    if (plen > BDB_MQTT_MAX_REMLEN)
        return -1;
    uint8_t pl_enc[4];
    size_t plh = v5 ? bdb_mqtt_encode_remlen(pl_enc, plen) : 0;
    size_t rem = 2 + tl + (qos ? 2 : 0) + plh + plen;
    if (len > BDB_MQTT_MAX_REMLEN || rem > BDB_MQTT_MAX_REMLEN - len)
        return -1;
    rem += len;
    put_header(out, (uint8_t)((BDB_MQTT_PUBLISH << 4) | (dup ? 0x08 : 0) | (qos << 1)), rem);
    put_str(out, topic, tl);
    if (qos)
        put_u16(out, packet_id);
    if (v5) {
        bdb_buf_append(out, pl_enc, plh);
        for (size_t i = 0; i < nprops; i++) {
            bdb_buf_putc(out, 0x26);
            put_str(out, props[i].key, strlen(props[i].key));
            put_str(out, props[i].value, strlen(props[i].value));
        }
    }
    if (payload)
        bdb_buf_append(out, payload, len);
    return 0;
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

/* Variable byte integer at p[0..len): 0 with *v and *n (1..4 bytes), -1 if it is
 * cut, longer than 4 bytes or not minimal. */
static int get_varint(const uint8_t *p, size_t len, uint32_t *v, size_t *n)
{
    uint32_t value = 0, mult = 1;
    for (size_t i = 0; i < 4; i++) {
        if (i >= len)
            return -1;
        value += (uint32_t)(p[i] & 0x7f) * mult;
        if (!(p[i] & 0x80)) {
            if (i > 0 && p[i] == 0)
                return -1;
            *v = value;
            *n = i + 1;
            return 0;
        }
        mult *= 128;
    }
    return -1;
}

static uint32_t get_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Property types (spec 2.2.2.2). */
enum { PT_BAD, PT_BYTE, PT_U16, PT_U32, PT_VARINT, PT_STR, PT_BIN, PT_PAIR };

static int prop_type(uint8_t id)
{
    switch (id) {
    case 0x01: /* payload format indicator */
    case 0x17: /* request problem information */
    case 0x19: /* request response information */
    case 0x24: /* maximum QoS */
    case 0x25: /* retain available */
    case 0x28: /* wildcard subscription available */
    case 0x29: /* subscription identifiers available */
    case 0x2a: /* shared subscription available */
        return PT_BYTE;
    case 0x13: /* server keep alive */
    case 0x21: /* receive maximum */
    case 0x22: /* topic alias maximum */
    case 0x23: /* topic alias */
        return PT_U16;
    case 0x02: /* message expiry interval */
    case 0x11: /* session expiry interval */
    case 0x18: /* will delay interval */
    case 0x27: /* maximum packet size */
        return PT_U32;
    case 0x0b: /* subscription identifier */
        return PT_VARINT;
    case 0x03: /* content type */
    case 0x08: /* response topic */
    case 0x12: /* assigned client identifier */
    case 0x15: /* authentication method */
    case 0x1a: /* response information */
    case 0x1c: /* server reference */
    case 0x1f: /* reason string */
        return PT_STR;
    case 0x09: /* correlation data */
    case 0x16: /* authentication data */
        return PT_BIN;
    case 0x26: /* user property */
        return PT_PAIR;
    default:
        return PT_BAD;
    }
}

int bdb_mqtt_parse_props(const uint8_t *buf, size_t len, size_t *used, bdb_mqtt_props *props)
{
    bdb_mqtt_props scratch;
    if (!props)
        props = &scratch;
    memset(props, 0, sizeof *props);
    uint32_t plen;
    size_t n;
    if (get_varint(buf, len, &plen, &n) != 0 || plen > len - n)
        return -1;
    const uint8_t *p = buf + n, *end = buf + n + plen;
    uint64_t seen[4] = {0, 0, 0, 0}; /* identifiers seen, to refuse a repeat */
    while (p < end) {
        uint8_t id = *p++;
        int t = prop_type(id);
        if (t == PT_BAD)
            return -1;
        if (id != 0x26 && id != 0x0b) { /* only these two may repeat */
            if (seen[id >> 6] >> (id & 63) & 1)
                return -1;
            seen[id >> 6] |= UINT64_C(1) << (id & 63);
        }
        size_t left = (size_t)(end - p);
        uint32_t v = 0;
        const uint8_t *str = NULL;
        size_t sl = 0;
        switch (t) {
        case PT_BYTE:
            if (left < 1)
                return -1;
            v = *p++;
            break;
        case PT_U16:
            if (left < 2)
                return -1;
            v = get_u16(p);
            p += 2;
            break;
        case PT_U32:
            if (left < 4)
                return -1;
            v = get_u32(p);
            p += 4;
            break;
        case PT_VARINT: {
            size_t vn;
            if (get_varint(p, left, &v, &vn) != 0 || v == 0)
                return -1;
            p += vn;
            break;
        }
        case PT_STR:
        case PT_BIN:
            if (left < 2 || get_u16(p) > left - 2)
                return -1;
            sl = get_u16(p);
            str = p + 2;
            p += 2 + sl;
            if (t == PT_STR && memchr(str, 0, sl))
                return -1; /* [MQTT-1.5.4-2] */
            break;
        case PT_PAIR:
            for (int k = 0; k < 2; k++) {
                left = (size_t)(end - p);
                if (left < 2 || get_u16(p) > left - 2 || memchr(p + 2, 0, get_u16(p)))
                    return -1;
                p += 2 + get_u16(p);
            }
            props->user_props++;
            break;
        }
        switch (id) {
        case 0x01:
            if (v > 1)
                return -1;
            props->payload_format = (uint8_t)v;
            props->present |= 1u << BDB_MQTT_P_PAYLOAD_FORMAT;
            break;
        case 0x03:
            props->content_type = (const char *)str;
            props->content_type_len = sl;
            props->present |= 1u << BDB_MQTT_P_CONTENT_TYPE;
            break;
        case 0x11:
            props->session_expiry = v;
            props->present |= 1u << BDB_MQTT_P_SESSION_EXPIRY;
            break;
        case 0x12:
            props->assigned_id = (const char *)str;
            props->assigned_id_len = sl;
            props->present |= 1u << BDB_MQTT_P_ASSIGNED_ID;
            break;
        case 0x13:
            props->server_keepalive = (uint16_t)v;
            props->present |= 1u << BDB_MQTT_P_SERVER_KEEPALIVE;
            break;
        case 0x1f:
            props->reason = (const char *)str;
            props->reason_len = sl;
            props->present |= 1u << BDB_MQTT_P_REASON;
            break;
        case 0x21:
            if (v == 0)
                return -1; /* a receive maximum of 0 is a protocol error */
            props->receive_max = (uint16_t)v;
            props->present |= 1u << BDB_MQTT_P_RECEIVE_MAX;
            break;
        case 0x22:
            props->topic_alias_max = (uint16_t)v;
            props->present |= 1u << BDB_MQTT_P_TOPIC_ALIAS_MAX;
            break;
        case 0x23:
            props->topic_alias = (uint16_t)v;
            props->present |= 1u << BDB_MQTT_P_TOPIC_ALIAS;
            break;
        case 0x24:
            if (v > 1)
                return -1;
            props->max_qos = (uint8_t)v;
            props->present |= 1u << BDB_MQTT_P_MAX_QOS;
            break;
        case 0x27:
            if (v == 0)
                return -1;
            props->max_packet = v;
            props->present |= 1u << BDB_MQTT_P_MAX_PACKET;
            break;
        case 0x0b:
            if (!BDB_MQTT_HAS(props, BDB_MQTT_P_SUB_ID) || v < props->sub_id)
                props->sub_id = v;
            props->present |= 1u << BDB_MQTT_P_SUB_ID;
            break;
        case 0x29:
            if (v > 1)
                return -1;
            props->sub_id_ok = (uint8_t)v;
            props->present |= 1u << BDB_MQTT_P_SUB_ID_OK;
            break;
        case 0x17:
        case 0x19:
        case 0x25:
        case 0x28:
        case 0x2a:
            if (v > 1)
                return -1;
            break;
        default:
            break;
        }
    }
    *used = n + plen;
    return 0;
}

int bdb_mqtt_parse_publish(uint8_t flags, const uint8_t *body, size_t len, bdb_mqtt_publish *p)
{
    return bdb_mqtt_parse_publish_v(BDB_MQTT_V311, flags, body, len, p, NULL);
}

int bdb_mqtt_parse_publish_v(int version, uint8_t flags, const uint8_t *body, size_t len,
                             bdb_mqtt_publish *p, bdb_mqtt_props *props)
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
        return -1; /* MQTT 5: an empty topic needs a topic alias, which we never allow */
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
    if (version == BDB_MQTT_V5) {
        bdb_mqtt_props scratch;
        if (!props)
            props = &scratch;
        size_t used;
        if (bdb_mqtt_parse_props(body + off, len - off, &used, props) != 0)
            return -1;
        if (BDB_MQTT_HAS(props, BDB_MQTT_P_TOPIC_ALIAS))
            return -1; /* we announced a Topic Alias Maximum of 0 [MQTT-3.3.2-9] */
        off += used;
    }
    p->topic = t;
    p->topic_len = tl;
    p->payload = body + off;
    p->payload_len = len - off;
    return 0;
}

int bdb_mqtt_parse_connack(const uint8_t *body, size_t len, int *session_present, int *return_code)
{
    return bdb_mqtt_parse_connack_v(BDB_MQTT_V311, body, len, session_present, return_code, NULL);
}

int bdb_mqtt_parse_connack_v(int version, const uint8_t *body, size_t len, int *session_present,
                             int *return_code, bdb_mqtt_props *props)
{
    if (version != BDB_MQTT_V5) {
        if (len != 2 || (body[0] & 0xfe))
            return -1;
        *session_present = body[0] & 1;
        *return_code = body[1];
        return 0;
    }
    if (len < 2 || (body[0] & 0xfe))
        return -1;
    *session_present = body[0] & 1;
    *return_code = body[1];
    size_t used;
    if (len == 2) { /* tolerated: some brokers leave out an empty property block */
        if (props)
            memset(props, 0, sizeof *props);
        return 0;
    }
    if (bdb_mqtt_parse_props(body + 2, len - 2, &used, props) != 0 || 2 + used != len)
        return -1;
    return 0;
}

int bdb_mqtt_parse_suback(const uint8_t *body, size_t len, uint16_t *packet_id, uint8_t *codes,
                          size_t max, size_t *n)
{
    return bdb_mqtt_parse_suback_v(BDB_MQTT_V311, body, len, packet_id, codes, max, n, NULL);
}

static int suback_code_ok(int version, uint8_t c)
{
    static const uint8_t v5_failures[] = {0x80, 0x83, 0x87, 0x8f, 0x91, 0x97, 0x9e, 0xa1, 0xa2};
    if (c <= 2)
        return 1;
    if (version != BDB_MQTT_V5)
        return c == 0x80;
    return memchr(v5_failures, c, sizeof v5_failures) != NULL;
}

int bdb_mqtt_parse_suback_v(int version, const uint8_t *body, size_t len, uint16_t *packet_id,
                            uint8_t *codes, size_t max, size_t *n, bdb_mqtt_props *props)
{
    if (len < 3)
        return -1;
    *packet_id = get_u16(body);
    *n = 0;
    size_t off = 2;
    if (version == BDB_MQTT_V5) {
        size_t used;
        if (bdb_mqtt_parse_props(body + 2, len - 2, &used, props) != 0)
            return -1;
        off += used;
        if (off >= len)
            return -1; /* at least one reason code */
    }
    for (size_t i = off; i < len; i++) {
        uint8_t c = body[i];
        if (!suback_code_ok(version, c))
            return -1;
        if (*n < max)
            codes[(*n)++] = c;
    }
    return 0;
}

int bdb_mqtt_parse_puback(int version, const uint8_t *body, size_t len, uint16_t *packet_id,
                          int *reason, bdb_mqtt_props *props)
{
    if (props)
        memset(props, 0, sizeof *props);
    *reason = 0;
    if (len < 2 || (version != BDB_MQTT_V5 && len != 2))
        return -1;
    *packet_id = get_u16(body);
    if (!*packet_id)
        return -1;
    if (len == 2)
        return 0;
    *reason = body[2];
    if (len == 3)
        return 0;
    size_t used;
    if (bdb_mqtt_parse_props(body + 3, len - 3, &used, props) != 0 || 3 + used != len)
        return -1;
    return 0;
}

int bdb_mqtt_parse_disconnect(const uint8_t *body, size_t len, int *reason, bdb_mqtt_props *props)
{
    if (props)
        memset(props, 0, sizeof *props);
    *reason = len ? body[0] : 0;
    if (len <= 1)
        return 0;
    size_t used;
    if (bdb_mqtt_parse_props(body + 1, len - 1, &used, props) != 0 || 1 + used != len)
        return -1;
    return 0;
}

int bdb_mqtt_filter_shared(const char *f, const char **inner)
{
    if (strncmp(f, "$share/", 7) != 0)
        return 0;
    const char *g = f + 7, *slash = strchr(g, '/');
    if (!slash || slash == g)
        return -1; /* [MQTT-4.8.2-1]: a group name and a filter */
    for (const char *c = g; c < slash; c++)
        if (*c == '+' || *c == '#')
            return -1; /* [MQTT-4.8.2-2] */
    if (!bdb_mqtt_filter_valid(slash + 1))
        return -1;
    *inner = slash + 1;
    return 1;
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

static const struct {
    uint8_t code;
    const char *name;
} reason_names[] = {
    {0x00, "success"},
    {0x01, "granted QoS 1"},
    {0x02, "granted QoS 2"},
    {0x04, "disconnect with will message"},
    {0x10, "no matching subscribers"},
    {0x80, "unspecified error"},
    {0x81, "malformed packet"},
    {0x82, "protocol error"},
    {0x83, "implementation specific error"},
    {0x84, "unsupported protocol version"},
    {0x85, "client identifier not valid"},
    {0x86, "bad user name or password"},
    {0x87, "not authorized"},
    {0x88, "server unavailable"},
    {0x89, "server busy"},
    {0x8a, "banned"},
    {0x8b, "server shutting down"},
    {0x8c, "bad authentication method"},
    {0x8d, "keep alive timeout"},
    {0x8e, "session taken over"},
    {0x8f, "topic filter invalid"},
    {0x90, "topic name invalid"},
    {0x91, "packet identifier in use"},
    {0x93, "receive maximum exceeded"},
    {0x94, "topic alias invalid"},
    {0x95, "packet too large"},
    {0x97, "quota exceeded"},
    {0x98, "administrative action"},
    {0x99, "payload format invalid"},
    {0x9a, "retain not supported"},
    {0x9b, "QoS not supported"},
    {0x9c, "use another server"},
    {0x9d, "server moved"},
    {0x9e, "shared subscriptions not supported"},
    {0x9f, "connection rate exceeded"},
    {0xa0, "maximum connect time"},
    {0xa1, "subscription identifiers not supported"},
    {0xa2, "wildcard subscriptions not supported"},
};

const char *bdb_mqtt_reason_str(int rc)
{
    for (size_t i = 0; i < sizeof reason_names / sizeof reason_names[0]; i++)
        if (reason_names[i].code == rc)
            return reason_names[i].name;
    return "unknown reason code";
}
