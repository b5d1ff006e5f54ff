/* xfer: the format conversions of export and import. A point of the server's export
 * is one line-protocol line with one field; CSV rows are tenant,device,metric,time,
 * value (time in Unix ms). Metric names follow the export's rule (docs/API.md): field
 * "value" is the bare metric <measurement>, any other field is <measurement>.<field>. */
#ifndef BDB_CLI_XFER_H
#define BDB_CLI_XFER_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

/* The last line of a server's export stream that could not complete (the server's
 * h_export.c writes it, followed by the reason): export and import fail on it. */
#define XFER_EXPORT_ERROR_MARK "# bucketdb-export-error: "

typedef struct xfer_point {
    char device[256];
    char metric[512];
    int64_t time_ms;
    double value;
} xfer_point;

/* Parses one exported line; the device is the tag named device_tag. Returns 0, or -1
 * for a line that is not such a point (several fields, no device, no timestamp). */
int xfer_lp_parse(const char *line, size_t n, const char *device_tag, xfer_point *pt);

/* Appends s as one CSV field, quoted when it holds a comma, quote or line break. */
void xfer_csv_field(bdb_buf *b, const char *s, size_t n);

/* Splits one CSV row (no line break) into at most max fields, unquoting in place.
 * Returns the number of fields, or -1 for a malformed quote. */
int xfer_csv_split(char *row, char **fields, int max);

#endif
