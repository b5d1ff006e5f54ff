/* http_client: one-shot requests of the CLI commands that print an answer (query,
 * tenant), on top of the keep-alive client in http_conn.h. */
#ifndef BDB_CLI_HTTP_CLIENT_H
#define BDB_CLI_HTTP_CLIENT_H

struct bdb_buf;

/* Sends one request to server ("http://host:port" or "host:port"); token (may be NULL)
 * goes in "Authorization: Token", body (may be NULL) as JSON. The response body
 * streams to stdout, or to stderr for a status >= 400. prog names the command in
 * error messages. Returns BDB_EXIT_OK, or BDB_EXIT_FAIL on a connection error or an
 * error status. */
int cli_http(const char *prog, const char *server, const char *method, const char *path,
             const char *token, const char *body);

/* Appends s percent-encoded for a URL path or query value. */
void cli_url_escape(struct bdb_buf *b, const char *s);

#endif
