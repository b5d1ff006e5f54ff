/* devrule: see devrule.h. Parsing happens once per request (or message); applying
 * it is a lookup per key of the winning alternative and, only for escaping rules, a
 * copy of the values, so the default rule adds nothing to a line's cost. */
#include "ingest/devrule.h"

#include <stdio.h>
#include <string.h>

int bdb_devrule_parse(const char *spec, bdb_devrule *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    size_t n = 0;
    for (const char *s = spec; *s; s++) {
        if (*s == ' ' || *s == '\t')
            continue; /* "host + device, host" reads as well as "host+device,host" */
        if ((unsigned char)*s < 0x20 || *s == 0x7f) {
            snprintf(err, errlen, "device rule has a control character (byte 0x%02x)",
                     (unsigned)(unsigned char)*s);
            return -1;
        }
        if (n + 1 >= sizeof r->text) {
            snprintf(err, errlen, "device rule longer than %d bytes", BDB_DEVRULE_MAX_TEXT - 1);
            return -1;
        }
        r->text[n++] = *s;
    }
    r->text[n] = '\0';
    size_t i = 0;
    for (;;) {
        if (r->nalts == BDB_DEVRULE_MAX_ALTS) {
            snprintf(err, errlen, "device rule has more than %d alternatives",
                     BDB_DEVRULE_MAX_ALTS);
            return -1;
        }
        unsigned a = r->nalts++;
        for (;;) {
            size_t k = i;
            while (k < n && r->text[k] != '+' && r->text[k] != ',')
                k++;
            if (k == i) {
                snprintf(err, errlen, "device rule '%s': empty tag key in alternative %u", r->text,
                         a + 1);
                return -1;
            }
            if (r->nparts[a] == BDB_DEVRULE_MAX_PARTS) {
                snprintf(err, errlen, "device rule '%s': more than %d keys joined with '+'",
                         r->text, BDB_DEVRULE_MAX_PARTS);
                return -1;
            }
            for (unsigned p = 0; p < r->nparts[a]; p++)
                if (r->len[a][p] == k - i && !memcmp(r->text + r->off[a][p], r->text + i, k - i)) {
                    snprintf(err, errlen,
                             "device rule '%s': key '%.*s' repeated in one alternative", r->text,
                             (int)(k - i), r->text + i);
                    return -1;
                }
            r->off[a][r->nparts[a]] = (unsigned short)i;
            r->len[a][r->nparts[a]++] = (unsigned short)(k - i);
            i = k;
            if (i < n && r->text[i] == '+') {
                i++;
                continue;
            }
            break;
        }
        if (r->nparts[a] > 1)
            r->escape = 1;
        if (i == n)
            return 0;
        i++; /* ',' */
        if (i == n) {
            snprintf(err, errlen, "device rule '%s': empty alternative at the end", r->text);
            return -1;
        }
    }
}

void bdb_devrule_single(bdb_devrule *r, const char *key, size_t klen)
{
    memset(r, 0, sizeof *r);
    if (klen >= sizeof r->text)
        klen = sizeof r->text - 1;
    memcpy(r->text, key, klen);
    r->nalts = 1;
    r->nparts[0] = 1;
    r->len[0][0] = (unsigned short)klen;
}

/* Appends v escaped ('\' and '/') at buf + *o; -1 when it does not fit. */
static int put_escaped(char *buf, size_t cap, size_t *o, const char *v, size_t vn)
{
    for (size_t i = 0; i < vn; i++) {
        int esc = v[i] == '\\' || v[i] == '/';
        if (*o + 1 + (size_t)esc > cap)
            return -1;
        if (esc)
            buf[(*o)++] = '\\';
        buf[(*o)++] = v[i];
    }
    return 0;
}

int bdb_devrule_device(const bdb_devrule *r, bdb_devrule_get_fn get, void *ctx, char *buf,
                       size_t cap, const char **dev, size_t *dlen)
{
    for (unsigned a = 0; a < r->nalts; a++) {
        const char *v[BDB_DEVRULE_MAX_PARTS];
        size_t vn[BDB_DEVRULE_MAX_PARTS];
        unsigned p = 0;
        for (; p < r->nparts[a]; p++) {
            v[p] = get(ctx, r->text + r->off[a][p], r->len[a][p], &vn[p]);
            if (!v[p])
                break;
        }
        if (p < r->nparts[a])
            continue;
        if (!r->escape) {
            *dev = v[0];
            *dlen = vn[0];
            return (int)a;
        }
        size_t o = 0;
        for (p = 0; p < r->nparts[a]; p++) {
            if (p) {
                if (o + 1 > cap)
                    return -2;
                buf[o++] = '/';
            }
            if (put_escaped(buf, cap, &o, v[p], vn[p]) < 0)
                return -2;
        }
        *dev = buf;
        *dlen = o;
        return (int)a;
    }
    return -1;
}

int bdb_devrule_uses(const bdb_devrule *r, int alt, const char *key, size_t klen)
{
    for (unsigned p = 0; p < r->nparts[alt]; p++)
        if (r->len[alt][p] == klen && !memcmp(r->text + r->off[alt][p], key, klen))
            return 1;
    return 0;
}

void bdb_devrule_tags_init(bdb_devrule_tags *t, const bdb_devrule *rule, const char *device_tag)
{
    t->device_tag = device_tag ? device_tag : "device";
    t->dtl = strlen(t->device_tag);
    if (!rule) {
        bdb_devrule_single(&t->single, t->device_tag, t->dtl);
        rule = &t->single;
    }
    t->rule = rule;
    memset(t->by_dt, 0, sizeof t->by_dt);
    for (unsigned a = 0; a < rule->nalts && a < BDB_DEVRULE_MAX_ALTS; a++)
        t->by_dt[a] = (unsigned char)bdb_devrule_uses(rule, (int)a, t->device_tag, t->dtl);
    t->dt_alone = rule->nalts == 1 && rule->nparts[0] == 1 && t->by_dt[0];
}

void bdb_devrule_missing(const bdb_devrule *r, char *out, size_t outlen)
{
    if (r->nalts == 1 && r->nparts[0] == 1)
        snprintf(out, outlen, "missing device tag '%s'", r->text);
    else
        snprintf(out, outlen, "no device: the device rule '%s' matches none of the tags", r->text);
}
