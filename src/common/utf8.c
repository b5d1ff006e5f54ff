#include "common/utf8.h"

#include <stdint.h>
#include <string.h>

size_t bdb_utf8_seq(const unsigned char *p, size_t n)
{
    if (!n)
        return 0;
    unsigned c = p[0];
    if (c < 0x80)
        return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* below: overlong */
        else if (c == 0xed)
            hi = 0x9f; /* above: surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90; /* below: overlong */
        else if (c == 0xf4)
            hi = 0x8f; /* above: past U+10FFFF */
    } else {
        return 0; /* continuation byte, 0xc0/0xc1 (overlong) or 0xf5..0xff */
    }
    if (n < len || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return len;
}

int bdb_utf8_valid(const char *s, size_t n, size_t *bad_at)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        /* names and lines are nearly always ASCII: skip it 32, then 8 bytes at a time
         * (this runs over every line-protocol line) */
        while (n - i >= 32) {
            uint64_t w[4];
            memcpy(w, p + i, 32);
            if ((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ull)
                break;
            i += 32;
        }
        while (n - i >= 8) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= n)
            break;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        size_t l = bdb_utf8_seq(p + i, n - i);
        if (!l) {
            if (bad_at)
                *bad_at = i;
            return 0;
        }
        i += l;
    }
    return 1;
}
