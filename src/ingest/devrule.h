/* devrule: the device rule (docs/API.md#mapping-rule), which tags of a reading name
 * its device. One rule for every way in: line-protocol tags, a JSON report's tags
 * (its "device" member counts as the tag named by device_tag) and an MQTT message's
 * payload (the topic's {device} level counts as that tag too).
 *
 *   device                  the device is the value of tag "device" (the default)
 *   device,host             the first present of "device", "host"
 *   host+device,host        "<host>/<device>" when both are present, else "<host>"
 *
 * Alternatives are tried left to right; the first whose keys are all present wins.
 * A composite alternative joins its values with '/'. So that no two readings map to
 * the same name by accident, a rule with any composite alternative escapes every value
 * it uses: '\' becomes "\\" and '/' becomes "\/" (telegraf's disk device
 * "mapper/vg-root" of host "a" is device "a/mapper\/vg-root"). A rule without a
 * composite takes the value verbatim, as before the rule existed.
 * Every tag is stored as a device tag but device_tag where the rule named the device
 * by it (bdb_devrule_tags below). */
#ifndef BDB_DEVRULE_H
#define BDB_DEVRULE_H

#include <stddef.h>
#include <string.h>

#define BDB_DEVRULE_MAX_ALTS 8  /* alternatives in a rule */
#define BDB_DEVRULE_MAX_PARTS 4 /* keys joined in one alternative */
#define BDB_DEVRULE_MAX_TEXT 256

/* Parsed rule. Keys are offsets into text, so a rule may be copied by value. */
typedef struct bdb_devrule {
    unsigned nalts;
    unsigned char nparts[BDB_DEVRULE_MAX_ALTS];
    unsigned short off[BDB_DEVRULE_MAX_ALTS][BDB_DEVRULE_MAX_PARTS];
    unsigned short len[BDB_DEVRULE_MAX_ALTS][BDB_DEVRULE_MAX_PARTS];
    int escape; /* some alternative is composite: values are escaped */
    char text[BDB_DEVRULE_MAX_TEXT];
} bdb_devrule;

/* Parses "a+b,c"; blanks (space, tab) are dropped. 0, or -1 with err naming the
 * problem (empty key, too many alternatives or parts, a key repeated in one
 * alternative, a control character, too long). */
int bdb_devrule_parse(const char *spec, bdb_devrule *r, char *err, size_t errlen);

/* The rule of one key (device_tag), without parsing: keys may hold any byte. klen
 * must be below BDB_DEVRULE_MAX_TEXT; a longer key is cut. */
void bdb_devrule_single(bdb_devrule *r, const char *key, size_t klen);

/* The rule's text in canonical form (as parsed). */
static inline const char *bdb_devrule_text(const bdb_devrule *r)
{
    return r->text;
}

/* Looks up a tag's value by key: its bytes, or NULL when the reading has no such tag. */
typedef const char *(*bdb_devrule_get_fn)(void *ctx, const char *key, size_t klen, size_t *vlen);

/* The device of one reading. Returns the index of the alternative used (>= 0) and
 * its name in *dev / *dlen: a pointer to the tag value itself when the rule does not
 * escape and the alternative has one key (no copy: the default rule costs one lookup),
 * otherwise the name built in buf. Returns -1 when no alternative has all its keys
 * present, -2 when the built name would not fit in cap bytes. */
int bdb_devrule_device(const bdb_devrule *r, bdb_devrule_get_fn get, void *ctx, char *buf,
                       size_t cap, const char **dev, size_t *dlen);

/* 1 if key is one of the keys of alternative alt. */
int bdb_devrule_uses(const bdb_devrule *r, int alt, const char *key, size_t klen);

/* Which tags of a reading are stored as device tags: all of them but the tag named
 * device_tag when the alternative that named the device used it. That tag's value is
 * the device's name already; the rule's other keys (Telegraf's host) stay tags so that
 * a query can filter and group on them. It is decided here, once, because line
 * protocol and JSON (and MQTT through both) must store the same tags for the same
 * reading, or a query would see a device's tags depend on how it was written. The
 * key comparisons happen once per request in bdb_devrule_tags_init, so that line
 * protocol, which asks per tag of every line, pays one pointer comparison per tag
 * under the default rule, as before the rule existed. */
typedef struct bdb_devrule_tags {
    const bdb_devrule *rule; /* the rule to apply: the one given, or single */
    const char *device_tag;
    size_t dtl;
    int dt_alone;                              /* the rule is device_tag alone (the default) */
    unsigned char by_dt[BDB_DEVRULE_MAX_ALTS]; /* alternative a names the device by device_tag */
    bdb_devrule single;                        /* the rule when none is given */
} bdb_devrule_tags;

/* Prepares t for one request: rule NULL is the one-key rule of device_tag (the
 * server's default), device_tag NULL is "device". t may point into itself: not to be
 * copied. */
void bdb_devrule_tags_init(bdb_devrule_tags *t, const bdb_devrule *rule, const char *device_tag);

/* The tag one reading leaves out of its device tags. */
typedef struct bdb_devrule_skip {
    const char *val; /* non-NULL: the tag whose value is at this address */
    const char *key; /* else non-NULL: the tag of this key, klen bytes; NULL: none */
    size_t klen;
} bdb_devrule_skip;

/* For a reading named by alternative alt of bdb_devrule_device (alt < 0: named
 * otherwise, e.g. by a fallback device, and every tag is stored). dev is the name
 * bdb_devrule_device returned when it points into the very tags to be stored (line
 * protocol): a one-key, unescaped name is then the tag's value itself, and its address
 * tells the tag without comparing keys. NULL when the name may come from elsewhere
 * (JSON's "device" member stands for a tag it is not). */
static inline bdb_devrule_skip bdb_devrule_tags_skip(const bdb_devrule_tags *t, int alt,
                                                     const char *dev)
{
    bdb_devrule_skip s = {NULL, NULL, 0};
    if (alt < 0 || !t->by_dt[alt])
        return s;
    if (dev && !t->rule->escape && t->rule->nparts[alt] == 1) {
        s.val = dev;
    } else {
        s.key = t->device_tag;
        s.klen = t->dtl;
    }
    return s;
}

/* 1 if the tag key (klen bytes) whose value is at val is stored as a device tag. */
static inline int bdb_devrule_tag_stored(const bdb_devrule_skip *s, const char *key, size_t klen,
                                         const char *val)
{
    if (s->val)
        return val != s->val;
    return !s->key || klen != s->klen || memcmp(key, s->key, klen) != 0;
}

/* "no device tag: none of 'device' present" style reason for a reading matching no
 * alternative, into out. */
void bdb_devrule_missing(const bdb_devrule *r, char *out, size_t outlen);

#endif
