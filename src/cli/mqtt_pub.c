/* mqtt_pub: see mqtt_pub.h. MQTT 5 rather than 3.1.1 because only MQTT 5 PUBACKs
 * carry a reason code: with 3.1.1 a broker that drops a message (an ACL, a quota)
 * still acknowledges it, and the simulator would count it as delivered. */
#include "cli/mqtt_pub.h"

#include "ingest/mqtt/mqtt_codec.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_WINDOW 64
#define MAX_PACKET (1u << 20) /* a PUBACK or CONNACK is far smaller */

static int fail(cli_mqtt *m, const char *what, const char *detail)
{
    snprintf(m->err, sizeof m->err, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
    if (m->fd >= 0)
        close(m->fd);
    m->fd = -1;
    return -1;
}

static int wait_fd(cli_mqtt *m, short ev)
{
    struct pollfd p = {.fd = m->fd, .events = ev};
    int rc;
    do
        rc = poll(&p, 1, m->timeout_s * 1000);
    while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return fail(m, "broker timed out", NULL);
    return rc < 0 ? fail(m, "poll", strerror(errno)) : 0;
}

static int flush_out(cli_mqtt *m)
{
    size_t off = 0;
    while (off < m->wbuf.len) {
        if (wait_fd(m, POLLOUT) != 0)
            return -1;
        ssize_t n = send(m->fd, m->wbuf.data + off, m->wbuf.len - off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return fail(m, "send to broker", strerror(errno));
        off += (size_t)n;
    }
    bdb_buf_reset(&m->wbuf);
    return 0;
}

/* Reads until one whole packet is in rbuf; returns its header (body at hdr_len). */
static int read_packet(cli_mqtt *m, bdb_mqtt_hdr *h)
{
    for (;;) {
        int rc = bdb_mqtt_decode_header(m->rbuf.data, m->rbuf.len, MAX_PACKET, h);
        if (rc == BDB_MQTT_MALFORMED || rc == BDB_MQTT_TOO_LARGE)
            return fail(m, "malformed packet from broker", NULL);
        if (rc == BDB_MQTT_COMPLETE && m->rbuf.len >= h->hdr_len + h->rem_len)
            return 0;
        if (wait_fd(m, POLLIN) != 0)
            return -1;
        bdb_buf_reserve(&m->rbuf, 65536);
        ssize_t n = recv(m->fd, m->rbuf.data + m->rbuf.len, 65536, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n <= 0)
            return fail(m, "broker closed the connection", n < 0 ? strerror(errno) : NULL);
        m->rbuf.len += (size_t)n;
    }
}

static void consume(cli_mqtt *m, const bdb_mqtt_hdr *h)
{
    size_t n = h->hdr_len + h->rem_len;
    memmove(m->rbuf.data, m->rbuf.data + n, m->rbuf.len - n);
    m->rbuf.len -= n;
}

/* Handles one packet while publishing: a PUBACK settles a message; a DISCONNECT
 * ends the connection with its reason; anything else is ignored. */
static int read_ack(cli_mqtt *m)
{
    bdb_mqtt_hdr h;
    if (read_packet(m, &h) != 0)
        return -1;
    const uint8_t *body = m->rbuf.data + h.hdr_len;
    int rc = 0;
    if (h.type == BDB_MQTT_PUBACK) {
        uint16_t id;
        int reason;
        if (bdb_mqtt_parse_puback(BDB_MQTT_V5, body, h.rem_len, &id, &reason, NULL) != 0)
            return fail(m, "malformed PUBACK from broker", NULL);
        if (m->inflight)
            m->inflight--;
        if (reason >= 0x80) {
            m->refused++;
            m->last_reason = reason;
        } else {
            m->acked++;
        }
    } else if (h.type == BDB_MQTT_DISCONNECT) {
        int reason = 0;
        bdb_mqtt_parse_disconnect(body, h.rem_len, &reason, NULL);
        return fail(m, "broker disconnected", bdb_mqtt_reason_str(reason));
    }
    consume(m, &h);
    return rc;
}

static int split_broker(const char *spec, char *host, size_t hl, char *port, size_t pl)
{
    if (!strncmp(spec, "mqtt://", 7))
        spec += 7;
    const char *p = strrchr(spec, ':');
    const char *hs = spec, *he = p ? p : spec + strlen(spec);
    if (*spec == '[') { /* [v6]:port */
        const char *rb = strchr(spec, ']');
        if (!rb)
            return -1;
        hs = spec + 1;
        he = rb;
        p = rb[1] == ':' ? rb + 1 : NULL;
    }
    if (he == hs || (size_t)(he - hs) >= hl)
        return -1;
    snprintf(host, hl, "%.*s", (int)(he - hs), hs);
    snprintf(port, pl, "%s", p && p[1] ? p + 1 : "1883");
    return 0;
}

int cli_mqtt_connect(cli_mqtt *m, const char *broker, const char *client_id, const char *user,
                     const char *pass, int timeout_s)
{
    memset(m, 0, sizeof *m);
    m->fd = -1;
    m->timeout_s = timeout_s;
    m->next_id = 1;
    bdb_buf_init(&m->rbuf);
    bdb_buf_init(&m->wbuf);
    char host[256], port[16];
    if (split_broker(broker, host, sizeof host, port, sizeof port) != 0)
        return fail(m, "broker address wants host:port", broker);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0)
        return fail(m, "broker address", gai_strerror(g));
    m->fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
    if (m->fd < 0 || connect(m->fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        freeaddrinfo(ai);
        return fail(m, "connect to broker", strerror(errno));
    }
    freeaddrinfo(ai);
    int one = 1;
    setsockopt(m->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* keep-alive 0: a --live run may be idle longer than any fixed keep-alive */
    bdb_mqtt_connect_opts o = {.version = BDB_MQTT_V5,
                               .client_id = client_id,
                               .user = user,
                               .pass = pass,
                               .clean_start = 1};
    if (bdb_mqtt_encode_connect_opts(&m->wbuf, &o) != 0)
        return fail(m, "CONNECT", "client id, user or password too long");
    if (flush_out(m) != 0)
        return -1;
    bdb_mqtt_hdr h;
    if (read_packet(m, &h) != 0)
        return -1;
    int sp, code;
    bdb_mqtt_props props;
    memset(&props, 0, sizeof props);
    if (h.type != BDB_MQTT_CONNACK ||
        bdb_mqtt_parse_connack_v(BDB_MQTT_V5, m->rbuf.data + h.hdr_len, h.rem_len, &sp, &code,
                                 &props) != 0)
        return fail(m, "broker did not answer CONNECT with a CONNACK", NULL);
    consume(m, &h);
    if (code != 0)
        return fail(m, "broker refused the connection", bdb_mqtt_reason_str(code));
    m->window = MAX_WINDOW;
    if (BDB_MQTT_HAS(&props, BDB_MQTT_P_RECEIVE_MAX) && props.receive_max < m->window)
        m->window = props.receive_max ? props.receive_max : 1;
    return 0;
}

void cli_mqtt_close(cli_mqtt *m)
{
    if (m->fd >= 0) {
        bdb_buf_reset(&m->wbuf);
        bdb_mqtt_encode_disconnect_v(&m->wbuf, BDB_MQTT_V5);
        flush_out(m);
    }
    if (m->fd >= 0)
        close(m->fd);
    m->fd = -1;
    bdb_buf_free(&m->rbuf);
    bdb_buf_free(&m->wbuf);
}

int cli_mqtt_publish(cli_mqtt *m, const char *topic, const void *payload, size_t len)
{
    if (m->fd < 0)
        return -1;
    if (m->inflight >= m->window && flush_out(m) != 0)
        return -1;
    while (m->inflight >= m->window)
        if (read_ack(m) != 0)
            return -1;
    uint16_t id = m->next_id++;
    if (m->next_id == 0)
        m->next_id = 1;
    if (bdb_mqtt_encode_publish_v(&m->wbuf, BDB_MQTT_V5, topic, payload, len, 1, 0, id, NULL, 0) !=
        0) {
        snprintf(m->err, sizeof m->err, "cannot encode a PUBLISH to '%.200s'", topic);
        return -1;
    }
    /* written in batches: one send per window or 64 KiB, not per message */
    if (m->wbuf.len >= 65536 && flush_out(m) != 0)
        return -1;
    m->sent++;
    m->inflight++;
    return 0;
}

int cli_mqtt_drain(cli_mqtt *m)
{
    if (m->fd >= 0 && flush_out(m) != 0)
        return -1;
    while (m->inflight)
        if (m->fd < 0 || read_ack(m) != 0)
            return -1;
    return 0;
}
