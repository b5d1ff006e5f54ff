/* libFuzzer harness for the PromQL lexer and parser (src/query/promql), and the
 * evaluator over a small in-memory source. The input is one query. Beyond "no crash,
 * no leak": a refusal always carries a "line:col: parse error:" message; an accepted
 * query has a scalar, vector or range vector type and evaluates (instant, and a short
 * range for non-matrix types) to a result of that type or to a named error, never
 * more points than the steps allow. */
#include "query/promql/pql_eval.h"
#include "query/promql/pql_parse.h"

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

static int select_fake(void *ctx, const pql_matchset *m, int64_t from, int64_t to,
                       pql_series_set *out, char *err, size_t errlen)
{
    (void)ctx;
    static const char *const names[] = {"x", "y", "env_temp"};
    for (int i = 0; i < 3; i++) {
        pql_label l[] = {{"__name__", (char *)names[i]}, {"device", "d"}, {"a", "b"}};
        if (!pql_matchset_test(m, l, 3))
            continue;
        long idx = pql_series_add(out, l, 3);
        if (idx < 0)
            return PQL_E_INTERNAL;
        for (int64_t t = 0; t <= 600000; t += 15000) {
            if (t < from || t > to)
                continue;
            int rc = pql_series_push(out, (size_t)idx, t, (double)((t / 1000) % 97) - 3);
            if (rc == -2) {
                snprintf(err, errlen, "too many samples");
                return PQL_E_EXECUTION;
            }
            if (rc)
                return PQL_E_INTERNAL;
        }
    }
    return PQL_E_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pql_node *n = NULL;
    char err[512];
    if (pql_parse((const char *)data, size, &n, err, sizeof err) != 0) {
        CHECK(n == NULL);
        CHECK(strstr(err, ": parse error: ") != NULL);
        return 0;
    }
    CHECK(n->type == PQL_SCALAR || n->type == PQL_VECTOR || n->type == PQL_MATRIX);
    pql_source src = {select_fake, NULL, NULL};
    pql_eval_opts o[2] = {{300000, 300000, 1, 100000, 100000, 0},
                          {0, 600000, 60000, 100000, 100000, 0}};
    for (int i = 0; i < (n->type == PQL_MATRIX ? 1 : 2); i++) {
        pql_result r;
        int rc = pql_eval(n, &src, &o[i], &r, err, sizeof err);
        CHECK(rc >= PQL_E_OK && rc <= PQL_E_INTERNAL);
        if (rc == PQL_E_OK) {
            CHECK(r.type == n->type);
            CHECK(r.nsteps == (i ? 11u : 1u));
            pql_result_free(&r);
        } else {
            CHECK(err[0] != '\0');
        }
    }
    pql_free(n);
    return 0;
}
