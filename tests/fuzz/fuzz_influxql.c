/* libFuzzer harness for the InfluxQL parser (src/query/influxql/iql_parse.c).
 *
 * The whole input is one query text. Beyond "no crash, no leak": a parse either
 * succeeds with 1..IQL_MAX_STMTS statements whose lists and counts respect iql.h's
 * limits, or fails with an error in InfluxDB's words; and parsing is deterministic
 * (the same text parses the same way twice, to the same error). */
#include "query/influxql/iql.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);         \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void check_stmt(const iql_stmt *st)
{
    CHECK(st->kind >= IQL_SELECT && st->kind <= IQL_CREATE_DATABASE);
    CHECK(st->nfields <= IQL_MAX_LIST && st->nfrom <= IQL_MAX_LIST);
    CHECK(st->ngroup_tags <= IQL_MAX_LIST && st->nkeys <= IQL_MAX_LIST);
    CHECK(st->limit >= 0 && st->limit <= IQL_MAX_COUNT);
    CHECK(st->offset >= 0 && st->offset <= IQL_MAX_COUNT);
    CHECK(st->slimit >= 0 && st->slimit <= IQL_MAX_COUNT);
    CHECK(st->soffset >= 0 && st->soffset <= IQL_MAX_COUNT);
    CHECK(st->every_ns >= 0);
    if (st->kind == IQL_SELECT)
        CHECK(st->nfields >= 1 && st->nfrom >= 1);
    for (size_t i = 0; i < st->nfields; i++) {
        const iql_field *f = &st->fields[i];
        CHECK(f->arg.kind != IQL_N_NAME || f->arg.name);
        CHECK(f->arg.kind != IQL_N_REGEX || f->arg.re);
        CHECK(f->param >= 0 && f->param <= 100);
        /* aggregates and raw fields are never mixed */
        CHECK((f->func == IQL_FN_NONE) == (st->fields[0].func == IQL_FN_NONE));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[600], err2[600];
    iql_query q, q2;
    int rc = iql_parse((const char *)data, size, &q, err, sizeof err);
    int rc2 = iql_parse((const char *)data, size, &q2, err2, sizeof err2);
    CHECK(rc == rc2);
    if (rc == 0) {
        CHECK(q.n >= 1 && q.n <= IQL_MAX_STMTS && q.n == q2.n);
        for (size_t i = 0; i < q.n; i++) {
            check_stmt(&q.stmts[i]);
            CHECK(q.stmts[i].kind == q2.stmts[i].kind);
            CHECK(q.stmts[i].nfields == q2.stmts[i].nfields);
        }
    } else {
        CHECK(rc == -1);
        CHECK(!strncmp(err, "error parsing query: ", 21));
        CHECK(!strcmp(err, err2));
    }
    iql_free(&q);
    iql_free(&q2);
    return 0;
}
