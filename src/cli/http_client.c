#include "cli/http_client.h"

#include "cli/cli.h"
#include "cli/http_conn.h"
#include "common/buf.h"

#include <stdio.h>
#include <string.h>

void cli_url_escape(bdb_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-_.~,:", c)) {
            bdb_buf_putc(b, c);
        } else {
            bdb_buf_putc(b, '%');
            bdb_buf_putc(b, (uint8_t)hex[c >> 4]);
            bdb_buf_putc(b, (uint8_t)hex[c & 15]);
        }
    }
}

/* Streams a 2xx body to stdout, remembering its last byte for the final newline. */
static int to_stdout(void *ctx, const char *data, size_t len)
{
    fwrite(data, 1, len, stdout);
    if (len)
        *(int *)ctx = (unsigned char)data[len - 1];
    return 0;
}

int cli_http(const char *prog, const char *server, const char *method, const char *path,
             const char *token, const char *body)
{
    /* One request on the keep-alive client (http_conn.h): one HTTP implementation for
     * every command; an export of any size streams through the sink. */
    cli_conn c;
    if (cli_conn_init(&c, server, 60) != 0) {
        fprintf(stderr, "bucketdb %s: %s\n", prog, c.err);
        return BDB_EXIT_FAIL;
    }
    cli_resp r;
    cli_resp_init(&r);
    int last = '\n';
    int rc = cli_conn_request(&c, method, path, token, body ? "application/json" : NULL, body,
                              body ? strlen(body) : 0, to_stdout, &last, &r);
    if (rc != 0) {
        fprintf(stderr, "bucketdb %s: %s\n", prog, c.err);
        cli_resp_free(&r);
        cli_conn_close(&c);
        return BDB_EXIT_FAIL;
    }
    if (last != '\n')
        fputc('\n', stdout);
    fflush(stdout);
    if (r.body.len) { /* not 2xx: the body was collected, not streamed */
        FILE *out = r.status >= 400 ? stderr : stdout;
        fwrite(r.body.data, 1, r.body.len, out);
        if (r.body.data[r.body.len - 1] != '\n')
            fputc('\n', out);
    }
    int status = r.status;
    cli_resp_free(&r);
    cli_conn_close(&c);
    return status >= 400 ? BDB_EXIT_FAIL : BDB_EXIT_OK;
}
