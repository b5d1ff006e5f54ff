/* form: the query parameters of a GET endpoint sent as a POST body of type
 * application/x-www-form-urlencoded (docs/API.md#conventions), as InfluxDB's /query
 * takes them: a list of 256 metric names of 256 bytes does not fit in a URL (the
 * request head is limited to 32 KiB), but fits in a body (max_body_bytes).
 *
 * The body is decoded in place ('+' is a space, %XX a byte) into key/value pairs;
 * arg() and args_each() read them after the URL's own parameters, so every handler
 * applies the same checks and answers the same errors to both. The pairs are the
 * request thread's "current form" only while dispatch runs (handlers run on their
 * connection's thread). */
#include "server/server_int.h"

#include "bucketdb/bdb.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local const form_args *cur_form;

void form_current(const form_args *f)
{
    cur_form = f;
}

const char *form_arg_or(const char *url_value, const char *name)
{
    if (url_value || !cur_form)
        return url_value;
    size_t n = strlen(name);
    for (size_t i = 0; i < cur_form->n; i++) {
        const form_arg *a = &cur_form->v[i];
        if (a->klen == n && !memcmp(a->key, name, n))
            return a->val;
    }
    return NULL;
}

struct each {
    MHD_KeyValueIteratorN it;
    void *cls;
    int stopped;
};

static enum MHD_Result each_url(void *cls, enum MHD_ValueKind kind, const char *key,
                                size_t key_size, const char *value, size_t value_size)
{
    struct each *e = cls;
    if (e->stopped)
        return MHD_NO;
    if (e->it(e->cls, kind, key, key_size, value, value_size) != MHD_YES)
        e->stopped = 1;
    return e->stopped ? MHD_NO : MHD_YES;
}

void args_each(struct MHD_Connection *c, MHD_KeyValueIteratorN it, void *cls)
{
    struct each e = {it, cls, 0};
    MHD_get_connection_values_n(c, MHD_GET_ARGUMENT_KIND, each_url, &e);
    for (size_t i = 0; cur_form && !e.stopped && i < cur_form->n; i++) {
        const form_arg *a = &cur_form->v[i];
        if (it(cls, MHD_GET_ARGUMENT_KIND, a->key, a->klen, a->val, a->vlen) != MHD_YES)
            e.stopped = 1;
    }
}

/* The endpoints that take only GET: the same list as dispatch (server.c). A device's
 * /profile takes PUT and POST already and is not one of them. */
static int query_endpoint(const char *url)
{
    if (!strcmp(url, "/api/v1/query") || !strcmp(url, "/query") || !strcmp(url, "/api/v1/late") ||
        !strcmp(url, "/api/v1/export") || !strcmp(url, "/api/v1/partitions/hot") ||
        !strcmp(url, "/api/v1/telemetry_by_tenant") || !strncmp(url, "/api/v1/state/", 14))
        return 1;
    if (!strncmp(url, "/api/v1/fleet", 13) && (!url[13] || url[13] == '/'))
        return 1;
    if (!strncmp(url, "/prometheus/api/v1/", 19)) /* Prometheus clients POST queries */
        return 1;
    if (!strcmp(url, "/api/v1/devices"))
        return 1;
    if (!strncmp(url, "/api/v1/devices/", 16)) {
        size_t n = strlen(url);
        return !(n >= 8 && !strcmp(url + n - 8, "/profile"));
    }
    return 0;
}

int form_query_request(struct MHD_Connection *c, const char *url, const char *method)
{
    if (strcmp(method, "POST") || !query_endpoint(url))
        return 0;
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
    static const char form[] = "application/x-www-form-urlencoded";
    if (!ct || strncasecmp(ct, form, sizeof form - 1))
        return 0;
    ct += sizeof form - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return !*ct || *ct == ';'; /* parameters such as charset may follow */
}

/* Decodes one field in place: '+' to a space, then %XX; NUL-terminates it. */
static size_t decode(char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] == '+')
            p[i] = ' ';
    p[n] = '\0';
    return MHD_http_unescape(p);
}

int form_parse(req *r)
{
    form_free(r);
    if (bdb_buf_reserve(&r->body, 1) != BDB_OK)
        return -1;
    char *p = (char *)r->body.data, *end = p + r->body.len;
    size_t cap = 0;
    if (!p)
        return 0; /* no body: no parameters */
    while (p < end) {
        char *amp = memchr(p, '&', (size_t)(end - p));
        char *fe = amp ? amp : end;
        if (fe > p) { /* an empty field ("a=1&&b=2") is skipped, as in a URL */
            char *eq = memchr(p, '=', (size_t)(fe - p));
            if (r->form.n == cap) {
                cap = cap ? cap * 2 : 16;
                form_arg *v = realloc(r->form.v, cap * sizeof *v);
                if (!v)
                    return -1;
                r->form.v = v;
            }
            form_arg *a = &r->form.v[r->form.n++];
            a->key = p;
            a->klen = decode(p, (size_t)((eq ? eq : fe) - p));
            if (eq) {
                a->val = eq + 1;
                a->vlen = decode(eq + 1, (size_t)(fe - eq - 1));
            } else {
                a->val = NULL;
                a->vlen = 0;
            }
        }
        p = fe + 1;
    }
    return 0;
}

void form_free(req *r)
{
    free(r->form.v);
    r->form.v = NULL;
    r->form.n = 0;
}
