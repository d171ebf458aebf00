/*
 * test_observer.c - the chaos suite's checker on made-up records: it must
 * find every overlap, epoch regression and slow recovery, and nothing else.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "observer.h"

#define S(x)  ((int64_t)((x)*1e9))
#define MS(x) ((int64_t)(x)*CHAOS_NS_PER_MS)

static const char *const names[] = {"cand-a", "cand-b", "cand-c"};

/* lease 2 s, retry 0.3 s, allowance 1 s: bound 3.6 s */
static obs *mk(void)
{
    obs_params p = {{2000, 1500, 300}, MS(1000), 3, names};
    obs *o = obs_new(&p);

    assert_non_null(o);
    obs_quiet(o, 1);
    obs_begin(o, S(100));
    return o;
}

static void test_clean_handover(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.101));
    obs_lose(o, 0, 1, S(105), S(104.9), 0);
    obs_lead(o, 1, 2, S(105.002), S(105.003)); /* 2 ms after */
    obs_lose(o, 1, 2, S(110), S(109.99), 1);
    obs_lead(o, 2, 5, S(112), S(112.001)); /* gaps in epochs are fine */
    obs_end(o, S(115));
    obs_dead(o, 2, S(116));
    assert_int_equal(obs_check(o, NULL, &r), 0);
    assert_int_equal(r.terms, 3);
    assert_int_equal(r.transitions, 2);
    assert_int_equal(r.loses, 3);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.gaps, 3); /* start, 2 ms, 2 s */
    assert_true(r.worst_recovery_ns >= S(2.000) && r.worst_recovery_ns <= S(2.002));
    obs_free(o);
}

static void test_overlap_found(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.1));
    obs_lead(o, 1, 2, S(104.999), S(105.0)); /* before a's end: 1 ms overlap */
    obs_lose(o, 0, 1, S(105), S(104.9), 0);
    obs_lose(o, 1, 2, S(106), S(106), 0);
    obs_lead(o, 2, 3, S(106), S(106)); /* touching is not overlapping */
    obs_lose(o, 2, 3, S(107), S(107), 0);
    obs_end(o, S(107));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.overlaps, 1);
    obs_free(o);
}

static void test_nested_overlap_found(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    /* c's short term lies inside a's long one, after b's */
    obs_lead(o, 0, 1, S(100.1), S(100.1));
    obs_lead(o, 1, 2, S(101), S(101));
    obs_lose(o, 1, 2, S(101.5), S(101.5), 0);
    obs_lead(o, 2, 3, S(102), S(102));
    obs_lose(o, 2, 3, S(102.5), S(102.5), 0);
    obs_lose(o, 0, 1, S(103), S(103), 0);
    obs_end(o, S(103));
    assert_int_equal(obs_check(o, NULL, &r), 2); /* epochs increase, no gap */
    assert_int_equal(r.overlaps, 2);
    obs_free(o);
}

static void test_epoch_regression(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 7, S(100.1), S(100.1));
    obs_lose(o, 0, 7, S(101), S(101), 0);
    obs_lead(o, 1, 7, S(101.01), S(101.01)); /* same epoch twice */
    obs_lose(o, 1, 7, S(102), S(102), 0);
    obs_lead(o, 2, 6, S(102.01), S(102.01));
    obs_end(o, S(103));
    obs_dead(o, 2, S(103));
    assert_int_equal(obs_check(o, NULL, &r), 2);
    assert_int_equal(r.epoch_errors, 2);
    obs_free(o);
}

static void test_recovery_counts_from_the_end_of_blocking_faults(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.1));
    obs_lose(o, 0, 1, S(101), S(101), 1);
    /* a server-wide fault from 100.5 s to 110 s: 9 s without a leader, but
     * 1 s after the fault ended */
    obs_fault(o, CF_HANG, S(100.5), S(110), 1);
    obs_lead(o, 1, 2, S(110.9), S(111));
    obs_lose(o, 1, 2, S(112), S(112), 0);
    /* a kill (not blocking): 3.5 s is within the bound, 3.7 s is not */
    obs_fault(o, CF_KILL, S(112), S(112), 0);
    obs_lead(o, 2, 3, S(115.4), S(115.5));
    obs_dead(o, 2, S(116));
    obs_fault(o, CF_KILL, S(116), S(116), 0);
    obs_lead(o, 0, 4, S(119.6), S(119.7));
    obs_end(o, S(120));
    obs_dead(o, 0, S(121));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.recovery_errors, 1);
    assert_int_equal(r.worst_kind, CF_KILL);
    assert_true(r.worst_recovery_ns >= S(3.69) && r.worst_recovery_ns <= S(3.71));
    assert_true(r.worst_by_kind[CF_HANG] >= S(0.99) && r.worst_by_kind[CF_HANG] <= S(1.01));
    assert_int_equal(r.faults[CF_KILL], 2);
    obs_free(o);
}

static void test_no_leader_at_the_end(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.1));
    obs_lose(o, 0, 1, S(101), S(101), 0);
    obs_end(o, S(110));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.recovery_errors, 1);
    obs_free(o);
}

static void test_protocol_errors(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lose(o, 0, 1, S(101), S(101), 0); /* no open term */
    obs_lead(o, 1, 2, S(101), S(101.1));
    obs_lead(o, 1, 3, S(102), S(102.1));  /* the previous one still open */
    obs_lose(o, 1, 4, S(103), S(103), 0); /* other epoch */
    obs_end(o, S(103));
    assert_int_equal(obs_check(o, NULL, &r), 3);
    assert_int_equal(r.overlaps, 0);
    obs_free(o);
}

static void test_open_term_at_check(void **state)
{
    obs *o = mk();
    obs_result r;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.1));
    assert_int_equal(obs_open_term(o, 0), 0);
    assert_int_equal(obs_open_term(o, 1), -1);
    obs_end(o, S(101));
    assert_int_equal(obs_check(o, NULL, &r), 1); /* never ended */
    obs_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_handover),
        cmocka_unit_test(test_overlap_found),
        cmocka_unit_test(test_nested_overlap_found),
        cmocka_unit_test(test_epoch_regression),
        cmocka_unit_test(test_recovery_counts_from_the_end_of_blocking_faults),
        cmocka_unit_test(test_no_leader_at_the_end),
        cmocka_unit_test(test_protocol_errors),
        cmocka_unit_test(test_open_term_at_check),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
