/* backpressure: the admission rule (tenant share -> 429 first, then the server-wide
 * budgets -> 503), the "alone" exception that lets one large request through an idle
 * server, shares, the head guard, and the accounting of tickets (admit,
 * grow, shrink, release; per-tenant entries vanish when they hold nothing; refusals
 * counted by reason; peaks). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "server/admission/backpressure.h"

#include <string.h>

static const bdb_bp_limits LIM = {1000, 6, 50}; /* share: 500 bytes, 3 writes */

static void test_share(void **state)
{
    (void)state;
    assert_int_equal(bdb_bp_share(1000, 50), 500);
    assert_int_equal(bdb_bp_share(1000, 100), 1000);
    assert_int_equal(bdb_bp_share(6, 50), 3);
    assert_int_equal(bdb_bp_share(1, 10), 1); /* never 0 */
    assert_int_equal(bdb_bp_share(7, 33), 2);
    /* no overflow near the top */
    assert_true(bdb_bp_share(UINT64_MAX, 50) == UINT64_MAX / 100 * 50 + UINT64_MAX % 100 / 2);
}

static void test_decide_rules(void **state)
{
    (void)state;
    /* room everywhere */
    assert_int_equal(bdb_bp_decide(&LIM, 0, 0, 0, 0, 1, 0, 100, 1), BDB_BP_NONE);
    /* tenant over its share of bytes while the server has room: 429 */
    assert_int_equal(bdb_bp_decide(&LIM, 450, 1, 450, 1, 1, 0, 100, 1), BDB_BP_TENANT_BYTES);
    /* exactly the share is fine */
    assert_int_equal(bdb_bp_decide(&LIM, 400, 1, 400, 1, 1, 0, 100, 1), BDB_BP_NONE);
    /* tenant over its share of writes */
    assert_int_equal(bdb_bp_decide(&LIM, 30, 3, 30, 3, 1, 0, 10, 1), BDB_BP_TENANT_WRITES);
    /* a grow adds no write: the write share does not apply */
    assert_int_equal(bdb_bp_decide(&LIM, 30, 3, 30, 3, 1, 10, 10, 0), BDB_BP_NONE);
    /* server full of bytes, tenant within its share: 503 */
    assert_int_equal(bdb_bp_decide(&LIM, 950, 2, 100, 1, 1, 0, 100, 1), BDB_BP_INFLIGHT_BYTES);
    /* server out of write slots */
    assert_int_equal(bdb_bp_decide(&LIM, 10, 6, 0, 0, 1, 0, 1, 1), BDB_BP_INFLIGHT_WRITES);
    /* both over: the tenant's own excess is named (429) */
    assert_int_equal(bdb_bp_decide(&LIM, 1000, 6, 500, 3, 1, 0, 100, 1), BDB_BP_TENANT_BYTES);
    /* without a tenant only the server-wide budgets apply */
    assert_int_equal(bdb_bp_decide(&LIM, 450, 1, 0, 0, 0, 0, 100, 1), BDB_BP_NONE);
    assert_int_equal(bdb_bp_decide(&LIM, 950, 1, 0, 0, 0, 0, 100, 0), BDB_BP_INFLIGHT_BYTES);
    /* at 100 % share the tenant rule is the server rule: 503, not 429 */
    bdb_bp_limits all = {1000, 6, 100};
    assert_int_equal(bdb_bp_decide(&all, 950, 1, 950, 1, 1, 0, 100, 1), BDB_BP_INFLIGHT_BYTES);
    assert_int_equal(bdb_bp_decide(&all, 0, 6, 0, 6, 1, 0, 0, 1), BDB_BP_INFLIGHT_WRITES);
}

static void test_decide_alone(void **state)
{
    (void)state;
    /* A request larger than the whole budget on an idle server: admitted. */
    assert_int_equal(bdb_bp_decide(&LIM, 0, 0, 0, 0, 1, 0, 5000, 1), BDB_BP_NONE);
    /* Growing when it alone holds bytes (own = total = tenant's): admitted. */
    assert_int_equal(bdb_bp_decide(&LIM, 5000, 1, 5000, 1, 1, 5000, 5000, 0), BDB_BP_NONE);
    /* Not alone any more: someone else holds 1 byte. */
    assert_int_equal(bdb_bp_decide(&LIM, 5001, 2, 5000, 1, 1, 5000, 10, 0), BDB_BP_INFLIGHT_BYTES);
    /* Alone on the server but another request of the same tenant holds bytes. */
    assert_int_equal(bdb_bp_decide(&LIM, 600, 2, 600, 2, 1, 100, 10, 0), BDB_BP_TENANT_BYTES);
    /* The write-slot budgets have no such exception. */
    bdb_bp_limits one = {1000, 1, 100};
    assert_int_equal(bdb_bp_decide(&one, 0, 1, 0, 1, 1, 0, 0, 1), BDB_BP_INFLIGHT_WRITES);
}

static void test_head_over(void **state)
{
    (void)state;
    /* on only above BDB_BP_HEAD_FACTOR x max, off again at or under it */
    assert_int_equal(bdb_bp_head_over(100, 100), 0);
    assert_int_equal(bdb_bp_head_over(200, 100), 0);
    assert_int_equal(bdb_bp_head_over(201, 100), 1);
    assert_int_equal(bdb_bp_head_over(150, 100), 0);
    /* no limit, and a limit so large that twice it overflows */
    assert_int_equal(bdb_bp_head_over(UINT64_MAX, 0), 0);
    assert_int_equal(bdb_bp_head_over(UINT64_MAX, UINT64_MAX / 2 + 1), 0);
}

static void test_reason_names_and_status(void **state)
{
    (void)state;
    assert_string_equal(bdb_bp_reason_name(BDB_BP_INFLIGHT_BYTES), "inflight_bytes");
    assert_string_equal(bdb_bp_reason_name(BDB_BP_INFLIGHT_WRITES), "inflight_writes");
    assert_string_equal(bdb_bp_reason_name(BDB_BP_TENANT_BYTES), "tenant_bytes");
    assert_string_equal(bdb_bp_reason_name(BDB_BP_TENANT_WRITES), "tenant_writes");
    assert_string_equal(bdb_bp_reason_name(BDB_BP_HEAD_MEMORY), "head_memory");
    assert_string_equal(bdb_bp_reason_name(BDB_BP_NONE), "none");
    assert_int_equal(bdb_bp_status(BDB_BP_TENANT_BYTES), 429);
    assert_int_equal(bdb_bp_status(BDB_BP_TENANT_WRITES), 429);
    assert_int_equal(bdb_bp_status(BDB_BP_INFLIGHT_BYTES), 503);
    assert_int_equal(bdb_bp_status(BDB_BP_INFLIGHT_WRITES), 503);
    assert_int_equal(bdb_bp_status(BDB_BP_HEAD_MEMORY), 503);
    assert_true(bdb_bp_retry_after(BDB_BP_INFLIGHT_BYTES) >= 1);
    assert_true(bdb_bp_retry_after(BDB_BP_HEAD_MEMORY) >= 1);
}

static void test_tickets(void **state)
{
    (void)state;
    bdb_bp *bp = bdb_bp_new(&LIM);
    assert_non_null(bp);
    bdb_bp_ticket a1, a2, a3, b1, n1;
    bdb_bp_stats st;
    assert_int_equal(bdb_bp_admit(bp, &a1, "a", 300, 1, 10), BDB_BP_NONE);
    assert_int_equal(bdb_bp_admit(bp, &a2, "a", 200, 1, 10), BDB_BP_NONE);
    /* a holds 500 = its share */
    assert_int_equal(bdb_bp_admit(bp, &a3, "a", 1, 1, 11), BDB_BP_TENANT_BYTES);
    assert_int_equal(a3.admitted, 0);
    assert_int_equal(bdb_bp_admit(bp, &b1, "b", 400, 1, 12), BDB_BP_NONE);
    /* a non-write request without tenant: 100 more reaches the whole budget */
    assert_int_equal(bdb_bp_admit(bp, &n1, NULL, 100, 0, 12), BDB_BP_NONE);
    bdb_bp_get_stats(bp, &st);
    assert_int_equal(st.bytes, 1000);
    assert_int_equal(st.writes, 3);
    assert_int_equal(st.tenants, 2);
    /* b growing: the server is full -> 503, nothing added */
    assert_int_equal(bdb_bp_grow(bp, &b1, 50, 13), BDB_BP_INFLIGHT_BYTES);
    assert_int_equal(b1.bytes, 400);
    /* shrinking gives room back */
    bdb_bp_shrink(bp, &a1, 100);
    assert_int_equal(a1.bytes, 200);
    assert_int_equal(bdb_bp_grow(bp, &b1, 50, 14), BDB_BP_NONE);
    assert_int_equal(b1.bytes, 450);
    bdb_bp_get_stats(bp, &st);
    assert_int_equal(st.bytes, 950);
    assert_int_equal(st.peak_bytes, 1000);
    assert_int_equal(st.events[BDB_BP_TENANT_BYTES], 1);
    assert_int_equal(st.events[BDB_BP_INFLIGHT_BYTES], 1);
    assert_int_equal(st.last_server_reason, BDB_BP_INFLIGHT_BYTES);
    assert_int_equal(st.last_server_ms, 13);
    assert_int_equal(st.last_tenant_reason, BDB_BP_TENANT_BYTES);
    assert_int_equal(st.last_tenant_ms, 11);
    assert_string_equal(st.last_tenant, "a");
    /* releasing everything: totals back to zero, tenant entries gone */
    bdb_bp_release(bp, &a1);
    bdb_bp_release(bp, &a2);
    bdb_bp_release(bp, &a3); /* never admitted: no effect */
    bdb_bp_release(bp, &b1);
    bdb_bp_release(bp, &n1);
    bdb_bp_release(bp, &n1); /* twice: no effect */
    bdb_bp_get_stats(bp, &st);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.writes, 0);
    assert_int_equal(st.tenants, 0);
    assert_int_equal(st.peak_writes, 3);
    /* after the release a can use its share again */
    assert_int_equal(bdb_bp_admit(bp, &a1, "a", 500, 1, 20), BDB_BP_NONE);
    bdb_bp_release(bp, &a1);
    bdb_bp_free(bp);
}

static void test_write_slots_and_head(void **state)
{
    (void)state;
    bdb_bp *bp = bdb_bp_new(&LIM);
    bdb_bp_ticket t[8];
    /* 3 writes per tenant (share of 6), 6 in all */
    for (int i = 0; i < 3; i++)
        assert_int_equal(bdb_bp_admit(bp, &t[i], "a", 0, 1, 1), BDB_BP_NONE);
    assert_int_equal(bdb_bp_admit(bp, &t[3], "a", 0, 1, 1), BDB_BP_TENANT_WRITES);
    for (int i = 3; i < 6; i++)
        assert_int_equal(bdb_bp_admit(bp, &t[i], i == 5 ? "c" : "b", 0, 1, 1), BDB_BP_NONE);
    assert_int_equal(bdb_bp_admit(bp, &t[6], "d", 0, 1, 2), BDB_BP_INFLIGHT_WRITES);
    /* a read with a body is no write: it still gets in */
    assert_int_equal(bdb_bp_admit(bp, &t[7], NULL, 10, 0, 2), BDB_BP_NONE);
    /* a chunked body (admitted with 0 bytes) grows within the budget */
    assert_int_equal(bdb_bp_grow(bp, &t[5], 400, 2), BDB_BP_NONE);
    /* past c's share (500), but c has nothing else in flight: a single request may */
    assert_int_equal(bdb_bp_grow(bp, &t[5], 200, 2), BDB_BP_NONE);
    /* ... and then c's next request is over its share */
    bdb_bp_ticket c2;
    assert_int_equal(bdb_bp_admit(bp, &c2, "c", 10, 0, 3), BDB_BP_TENANT_BYTES);
    for (int i = 0; i < 8; i++)
        bdb_bp_release(bp, &t[i]);
    /* the head guard: on above 2 x max, counted only when refusing */
    assert_int_equal(bdb_bp_head_check(bp, 250, 100, 0, 5), 1);
    assert_int_equal(bdb_bp_head_check(bp, 201, 100, 1, 6), 1);
    bdb_bp_stats st;
    bdb_bp_get_stats(bp, &st);
    assert_int_equal(st.head_shedding, 1);
    assert_int_equal(st.events[BDB_BP_HEAD_MEMORY], 1);
    assert_int_equal(st.last_server_reason, BDB_BP_HEAD_MEMORY);
    assert_int_equal(bdb_bp_head_check(bp, 100, 100, 1, 7), 0);
    bdb_bp_get_stats(bp, &st);
    assert_int_equal(st.head_shedding, 0);
    assert_int_equal(st.events[BDB_BP_HEAD_MEMORY], 1);
    assert_int_equal(st.bytes, 0);
    assert_int_equal(st.tenants, 0);
    bdb_bp_free(bp);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share),
        cmocka_unit_test(test_decide_rules),
        cmocka_unit_test(test_decide_alone),
        cmocka_unit_test(test_head_over),
        cmocka_unit_test(test_reason_names_and_status),
        cmocka_unit_test(test_tickets),
        cmocka_unit_test(test_write_slots_and_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
