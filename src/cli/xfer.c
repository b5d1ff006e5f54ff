/* xfer: line-protocol points and CSV rows for export and import (see xfer.h). */
#include "cli/xfer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies p[0..n) into out without backslash escapes; -1 if it does not fit. */
static int unescape(const char *p, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n)
            i++;
        if (o + 1 >= cap)
            return -1;
        out[o++] = p[i];
    }
    out[o] = '\0';
    return 0;
}

/* Index of the first unescaped byte of set in p[from..n), or n. */
static size_t scan(const char *p, size_t from, size_t n, const char *set)
{
    for (size_t i = from; i < n; i++) {
        if (p[i] == '\\') {
            i++;
            continue;
        }
        if (strchr(set, p[i]))
            return i;
    }
    return n;
}

int xfer_lp_parse(const char *p, size_t n, const char *device_tag, xfer_point *pt)
{
    char meas[256], key[256], field[256];
    size_t sp = scan(p, 0, n, " ");
    if (sp >= n)
        return -1;
    size_t m_end = scan(p, 0, sp, ",");
    if (unescape(p, m_end, meas, sizeof meas) != 0 || !meas[0])
        return -1;
    pt->device[0] = '\0';
    for (size_t i = m_end; i < sp;) {
        size_t k0 = i + 1, eq = scan(p, k0, sp, "="), next = scan(p, eq, sp, ",");
        if (eq >= sp)
            return -1;
        if (unescape(p + k0, eq - k0, key, sizeof key) != 0)
            return -1;
        if (!strcmp(key, device_tag) &&
            unescape(p + eq + 1, next - eq - 1, pt->device, sizeof pt->device) != 0)
            return -1;
        i = next;
    }
    if (!pt->device[0])
        return -1;
    size_t f0 = sp + 1, sp2 = scan(p, f0, n, " "), eq = scan(p, f0, sp2, "=");
    if (sp2 >= n || eq >= sp2 || scan(p, f0, sp2, ",") < sp2)
        return -1; /* no timestamp, no value, or several fields */
    if (unescape(p + f0, eq - f0, field, sizeof field) != 0)
        return -1;
    char num[64], *end;
    size_t vl = sp2 - eq - 1;
    if (vl == 0 || vl >= sizeof num)
        return -1;
    memcpy(num, p + eq + 1, vl);
    num[vl] = '\0';
    if (vl > 1 && (num[vl - 1] == 'i' || num[vl - 1] == 'u'))
        num[vl - 1] = '\0';
    pt->value = strtod(num, &end);
    if (end == num || *end)
        return -1;
    size_t t0 = sp2 + 1, tl = n - t0;
    if (tl == 0 || tl >= sizeof num)
        return -1;
    memcpy(num, p + t0, tl);
    num[tl] = '\0';
    long long ns = strtoll(num, &end, 10);
    if (end == num || *end)
        return -1;
    /* floor division: times before 1970 stay on the right millisecond */
    pt->time_ms = ns / 1000000 - (ns % 1000000 < 0);
    if (!strcmp(field, "value"))
        snprintf(pt->metric, sizeof pt->metric, "%s", meas);
    else
        snprintf(pt->metric, sizeof pt->metric, "%s.%s", meas, field);
    return 0;
}

void xfer_csv_field(bdb_buf *b, const char *s, size_t n)
{
    if (!memchr(s, ',', n) && !memchr(s, '"', n) && !memchr(s, '\n', n) && !memchr(s, '\r', n)) {
        bdb_buf_append(b, s, n);
        return;
    }
    bdb_buf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '"')
            bdb_buf_putc(b, '"');
        bdb_buf_putc(b, (uint8_t)s[i]);
    }
    bdb_buf_putc(b, '"');
}

int xfer_csv_split(char *row, char **fields, int max)
{
    int nf = 0;
    char *p = row;
    for (;;) {
        if (nf >= max)
            return -1;
        if (*p == '"') {
            char *w = ++p;
            fields[nf++] = w;
            for (;;) {
                if (!*p)
                    return -1;
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *w++ = *p++;
                }
            }
            *w = '\0';
            if (*p == ',') {
                p++;
                continue;
            }
            return *p ? -1 : nf;
        }
        fields[nf++] = p;
        char *c = strchr(p, ',');
        if (!c)
            return nf;
        *c = '\0';
        p = c + 1;
    }
}
