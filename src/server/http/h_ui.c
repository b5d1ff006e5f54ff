/* h_ui: the web dashboard's static files (docs/DASHBOARD.md).
 *
 * The files under web/ are compiled into the binary (web/embed.sh writes
 * $(BUILD)/gen/ui_assets.c at build time), so an installed server needs nothing beside
 * it and never fetches anything at run time. Only names in that table are answered: a
 * URL is never mapped onto the file system. The static files need no token (they hold
 * no data); every API the page calls keeps its own authentication.
 *
 *   GET /                the dashboard (web/index.html)
 *   GET /ui, /ui/        the same
 *   GET /ui/<file>       one of the embedded files */
#include "server/server_int.h"

#include "bucketdb/bdb.h"

#include <stdio.h>
#include <string.h>

/* Written by web/embed.sh: parallel arrays, NULL-terminated names. */
extern const char *const bdb_ui_names[];
extern const unsigned char *const bdb_ui_data[];
extern const unsigned int bdb_ui_lens[];

static const char *content_type(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return "application/octet-stream";
    if (!strcmp(dot, ".html"))
        return "text/html; charset=utf-8";
    if (!strcmp(dot, ".js"))
        return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".css"))
        return "text/css; charset=utf-8";
    if (!strcmp(dot, ".svg"))
        return "image/svg+xml";
    return "application/octet-stream";
}

/* The page loads only its own files and talks only to this server: a policy that
 * keeps an injected script (a device id is shown on the page) from running or
 * sending a token elsewhere. */
#define UI_CSP                                                                                     \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static enum MHD_Result send_asset(bdb_server *s, struct MHD_Connection *c, size_t i)
{
    /* The bytes live in the binary for the whole run: no copy. */
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        bdb_ui_lens[i], (void *)bdb_ui_data[i], MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", content_type(bdb_ui_names[i]));
    /* no-cache: revalidate, so a server upgrade never runs an old page against a new API */
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Content-Security-Policy", UI_CSP);
    MHD_add_response_header(resp, "X-Bucketdb-Version", BDB_VERSION);
    enum MHD_Result r = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    atomic_fetch_add(&s->http_requests[2], 1);
    return r;
}

enum MHD_Result h_ui(bdb_server *s, struct MHD_Connection *c, const char *url, const char *method)
{
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return respond_json_error(s, c, 405, "use GET", 0);
    const char *name;
    if (!strcmp(url, "/") || !strcmp(url, "/ui") || !strcmp(url, "/ui/"))
        name = "index.html";
    else
        name = url + 4; /* after "/ui/" */
    for (size_t i = 0; bdb_ui_names[i]; i++)
        if (!strcmp(bdb_ui_names[i], name))
            return send_asset(s, c, i);
    char msg[300];
    snprintf(msg, sizeof msg, "no such dashboard file: %.200s", url);
    return respond_json_error(s, c, 404, msg, 0);
}
