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
 * The tags a rule uses name the device and are not stored as device tags. */
#ifndef BDB_DEVRULE_H
#define BDB_DEVRULE_H

#include <stddef.h>

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

/* 1 if key is one of the keys of alternative alt (such a tag is not a device tag). */
int bdb_devrule_uses(const bdb_devrule *r, int alt, const char *key, size_t klen);

/* "no device tag: none of 'device' present" style reason for a reading matching no
 * alternative, into out. */
void bdb_devrule_missing(const bdb_devrule *r, char *out, size_t outlen);

#endif
