/* Fuzzes the MQTT codec as the gateway meets it: the input is a stream of packets
 * from a broker, each decoded with the parsers of both protocol versions (PUBLISH,
 * CONNACK, SUBACK, PUBACK, DISCONNECT, a bare property block), and every topic is
 * matched against the filters and topic scheme the gateway uses; the input is also
 * read as an mqtt_route line. Nothing may crash,
 * leak or read out of bounds. */
#include "ingest/mqtt/mqtt_codec.h"
#include "ingest/mqtt/mqtt_route.h"
#include "ingest/mqtt/mqtt_topic.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void topic_checks(const char *t, size_t n)
{
    static bdb_mqtt_scheme sc;
    static bdb_mqtt_formats f;
    static int ready;
    char err[200];
    if (!ready) {
        bdb_mqtt_scheme_parse("+/{tenant}/{device}/#", &sc, err, sizeof err);
        bdb_mqtt_formats_parse("fleet/+/+/lp=lp,bucketdb/#=json", &f, err, sizeof err);
        ready = 1;
    }
    const char *tv, *dv;
    size_t tl, dl;
    char why[300];
    bdb_mqtt_scheme_ids(&sc, t, n, &tv, &tl, &dv, &dl, why, sizeof why);
    bdb_mqtt_format_for(&f, t, n);
    bdb_mqtt_topic_match("bucketdb/+/+/telemetry", t, n);
    bdb_mqtt_topic_match("#", t, n);
}

static void one_packet(const bdb_mqtt_hdr *h, const uint8_t *body)
{
    size_t len = h->rem_len;
    for (int v = BDB_MQTT_V311; v <= BDB_MQTT_V5; v++) {
        bdb_mqtt_publish p;
        bdb_mqtt_props props;
        if (bdb_mqtt_parse_publish_v(v, h->flags, body, len, &p, &props) == 0)
            topic_checks(p.topic, p.topic_len);
        int sp, rc;
        uint16_t pid;
        uint8_t codes[8];
        size_t n;
        bdb_mqtt_parse_connack_v(v, body, len, &sp, &rc, &props);
        bdb_mqtt_parse_suback_v(v, body, len, &pid, codes, 8, &n, &props);
        bdb_mqtt_parse_puback(v, body, len, &pid, &rc, &props);
    }
    int rc;
    size_t used;
    bdb_mqtt_props props;
    bdb_mqtt_parse_disconnect(body, len, &rc, &props);
    bdb_mqtt_parse_props(body, len, &used, &props);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t off = 0;
    while (off < size) {
        bdb_mqtt_hdr h;
        if (bdb_mqtt_decode_header(data + off, size - off, 1 << 20, &h) != BDB_MQTT_COMPLETE ||
            size - off - h.hdr_len < h.rem_len)
            break;
        /* an exact copy so ASan sees a read past the packet */
        uint8_t *body = malloc(h.rem_len ? h.rem_len : 1);
        memcpy(body, data + off + h.hdr_len, h.rem_len);
        one_packet(&h, body);
        free(body);
        off += h.hdr_len + h.rem_len;
    }
    /* the input as a filter and as a topic */
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = '\0';
    if (bdb_mqtt_filter_valid(s)) {
        const char *inner;
        bdb_mqtt_filter_shared(s, &inner);
        bdb_mqtt_topic_match(s, "bucketdb/acme/d1/telemetry", 26);
    }
    topic_checks(s, size);
    static bdb_mqtt_route r;
    char err[600];
    if (bdb_mqtt_route_parse(s, &r, err, sizeof err) == 0)
        bdb_mqtt_route_matches(&r, "bucketdb/acme/d1/telemetry", 26);
    free(s);
    return 0;
}
