/*
 * test_observer.c - the chaos suite's checker on made-up records: it must
 * find every overlap, epoch regression and slow recovery, and nothing else;
 * and the same with seed-ABI terms (WaitElected to WaitLost), frozen ones
 * and their thaw limit included; the terms lost per fault; and the crash
 * failover figures and the takeover without evidence.
 */
#define _DEFAULT_SOURCE /* open_memstream */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* Seed-ABI terms: cand-b is a program on the seed ABI (lease 3 s), its
 * terms from WaitElected's return to WaitLost's. */
static const int64_t seed_leases[] = {2000, 3000, 2000};

static obs *mk_seed(void)
{
    obs_params p = {{2000, 1500, 300}, MS(1000), 3, names, seed_leases, MS(1000)};
    obs *o = obs_new(&p);

    assert_non_null(o);
    obs_quiet(o, 1);
    obs_begin(o, S(100));
    return o;
}

static void test_seed_clean_handover(void **state)
{
    obs *o = mk_seed();
    obs_result r;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    (void)state;
    assert_non_null(out);
    obs_lead(o, 0, 1, S(100.1), S(100.101));
    obs_lose(o, 0, 1, S(101), S(100.99), 0);
    /* b: elected 2 ms after a's end; cancels at 102.9995, WaitLost
     * returns at 103; c's acquiring request starts 1 ms later */
    assert_int_equal(obs_seed_lead(o, 1, 2, S(101.002)), 1);
    obs_seed_lose(o, 1, 2, S(103), S(102.9995), 0, 0);
    obs_lead(o, 2, 3, S(103.001), S(103.002));
    obs_lose(o, 2, 3, S(104), S(104), 0);
    /* b again, ended by the library (its log line tells why) */
    obs_seed_lead(o, 1, 4, S(104.5));
    obs_seed_why(o, 1, 4, "failed to renew lease within 2s");
    obs_seed_lose(o, 1, 4, S(106), 0, 0, 0);
    obs_lead(o, 0, 5, S(107.0), S(107.001)); /* its lease expired: 1 s later */
    obs_end(o, S(108));
    obs_dead(o, 0, S(108));
    assert_int_equal(obs_check(o, out, &r), 0);
    fclose(out);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.terms, 5);
    assert_int_equal(r.seed_terms, 2);
    assert_int_equal(r.seed_closed, 2);
    assert_int_equal(r.seed_cancelled, 1);
    assert_int_equal(r.seed_margins, 2);
    assert_true(r.seed_min_margin_ns >= MS(1) - 1000 && r.seed_min_margin_ns <= MS(1) + 1000);
    assert_true(r.seed_min_margin_lost >= S(0.999) && r.seed_min_margin_lost <= S(1.001));
    assert_true(r.seed_worst_cancel_ns >= S(0.0004) && r.seed_worst_cancel_ns <= S(0.0006));
    assert_non_null(strstr(text, "seed-ABI  cand-b epoch 2:"));
    assert_non_null(strstr(text, "failed to renew lease within 2s"));
    assert_null(strstr(text, "VIOLATION"));
    free(text);
    obs_free(o);
}

static void test_seed_overlap_found(void **state)
{
    obs *o = mk_seed();
    obs_result r;

    (void)state;
    /* WaitLost returned 0.5 s after c began: the program still believed it
     * led (the old bug: WaitLost waited for the release / a hung server) */
    obs_seed_lead(o, 1, 1, S(100.1));
    obs_lead(o, 2, 2, S(103.0), S(103.001));
    obs_seed_lose(o, 1, 1, S(103.5), 0, 0, 0);
    obs_lose(o, 2, 2, S(104), S(104), 0);
    /* and a's term: b's next one starts before a's end */
    obs_lead(o, 0, 3, S(104.1), S(104.1));
    obs_seed_lead(o, 1, 4, S(104.9));
    obs_lose(o, 0, 3, S(105), S(105), 0);
    obs_seed_lose(o, 1, 4, S(106), 0, 0, 0);
    obs_end(o, S(106));
    assert_int_equal(obs_check(o, NULL, &r), 2);
    assert_int_equal(r.overlaps, 2);
    assert_int_equal(r.seed_terms, 2);
    assert_true(r.seed_min_margin_lost >= S(-0.501) && r.seed_min_margin_lost <= S(-0.499));
    obs_free(o);
}

static void test_seed_frozen(void **state)
{
    obs *o = mk_seed();
    obs_result r;

    (void)state;
    /* b frozen from 102 to 105 while leading; c took over at 104 (b's
     * lease expired); b's WaitLost returned 3 ms after SIGCONT: the term
     * ends at the freeze for the checks */
    obs_seed_lead(o, 1, 1, S(100.1));
    obs_lead(o, 2, 2, S(104), S(104.001));
    obs_seed_lose(o, 1, 1, S(105.003), 0, S(102), S(105));
    obs_lose(o, 2, 2, S(106), S(106), 0);
    /* again, but WaitLost 1.5 s after SIGCONT: over the 1 s limit */
    obs_seed_lead(o, 1, 3, S(106.1));
    obs_lead(o, 0, 4, S(110), S(110.001));
    obs_seed_lose(o, 1, 3, S(112.5), 0, S(108), S(111));
    obs_end(o, S(112.5));
    obs_dead(o, 0, S(113));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.seed_frozen, 2);
    assert_int_equal(r.seed_thaw_errors, 1);
    assert_true(r.seed_worst_thaw_ns >= S(1.499) && r.seed_worst_thaw_ns <= S(1.501));
    /* margins from the freezes: 2 s and 2 s */
    assert_true(r.seed_min_margin_ns >= S(1.999) && r.seed_min_margin_ns <= S(2.001));
    obs_free(o);
}

static void test_seed_recovery_bound(void **state)
{
    obs *o = mk_seed();
    obs_result r;

    (void)state;
    /* after b's term (lease 3 s): bound 4.6 s, a gap of 4.2 s is fine */
    obs_seed_lead(o, 1, 1, S(100.1));
    obs_seed_lose(o, 1, 1, S(101), 0, 0, 0);
    obs_lead(o, 0, 2, S(105.2), S(105.2));
    /* after a's term (lease 2 s): bound 3.6 s, 4.2 s is not */
    obs_lose(o, 0, 2, S(106), S(106), 0);
    obs_lead(o, 2, 3, S(110.2), S(110.2));
    obs_end(o, S(111));
    obs_dead(o, 2, S(111));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.recovery_errors, 1);
    assert_true(r.bound_max_ns >= S(4.599) && r.bound_max_ns <= S(4.601));
    assert_true(r.bound_ns >= S(3.599) && r.bound_ns <= S(3.601));
    obs_free(o);
}

/* Terms lost per fault (obs_fault_term): the leader's term when the fault
 * began, ended before the fault's end + lease_duration and before the next
 * fault; a violation only when the fault had to leave it. */
static void test_terms_lost(void **state)
{
    obs *o = mk();
    obs_result r;
    int a, b, c;

    (void)state;
    a = obs_lead(o, 0, 1, S(100.1), S(100.101));
    obs_fault(o, CF_REPLICA_HANG, S(101), S(103), 1);
    obs_fault_term(o, a, 1); /* kept: a leads on */
    obs_fault(o, CF_REPLICA_KILL, S(104), S(104.5), 1);
    obs_fault_term(o, a, 1);
    obs_lose(o, 0, 1, S(105), S(104.9), 1); /* lost, and it had to be kept */
    b = obs_lead(o, 1, 2, S(105.5), S(105.501));
    obs_fault(o, CF_ETCD_STOP, S(107), S(109), 1);
    obs_fault_term(o, b, 0);
    obs_lose(o, 1, 2, S(108.6), S(108.5), 1); /* lost, only counted */
    c = obs_lead(o, 2, 3, S(110), S(110.001));
    obs_fault(o, CF_LB_RESTART, S(111), S(111.5), 1);
    obs_fault_term(o, c, 1);
    obs_fault(o, CF_KILL, S(112), S(112), 0); /* the next fault ends it: not lost */
    obs_dead(o, 2, S(112));
    obs_lead(o, 1, 4, S(114), S(114.001));
    obs_end(o, S(115));
    obs_dead(o, 1, S(116));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.lost_errors, 1);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.recovery_errors, 0);
    assert_int_equal(r.led[CF_REPLICA_HANG], 1);
    assert_int_equal(r.lost[CF_REPLICA_HANG], 0);
    assert_int_equal(r.led[CF_REPLICA_KILL], 1);
    assert_int_equal(r.lost[CF_REPLICA_KILL], 1);
    assert_int_equal(r.must_keep[CF_REPLICA_KILL], 1);
    assert_int_equal(r.lost[CF_ETCD_STOP], 1);
    assert_int_equal(r.must_keep[CF_ETCD_STOP], 0);
    assert_int_equal(r.led[CF_LB_RESTART], 1);
    assert_int_equal(r.lost[CF_LB_RESTART], 0);
    assert_int_equal(r.led[CF_KILL], 0);
    obs_free(o);
}

/* Crash failover (obs_crash): the next term after each kill, measured from
 * the kill and from the kubelet's report; on the report only if it was
 * evidence and came first, before the Lease expired; a takeover 100 ms or
 * more before the Lease could expire without evidence is a violation. Lease
 * 2 s, renew deadline 1.5 s: an expiry that is not known is 0.5 s after the
 * kill at the earliest. */
static void test_crash_failover(void **state)
{
    obs *o = mk();
    obs_result r;
    const obs_failover *c, *k;

    (void)state;
    obs_lead(o, 0, 1, S(100.1), S(100.101));
    obs_dead(o, 0, S(101.001)); /* reported at 101.5, taken 5 ms later */
    obs_crash(o, CF_CRASH, 0, S(101), S(102.9), S(101.5), 1);
    obs_lead(o, 1, 2, S(101.505), S(101.506));
    obs_dead(o, 1, S(103.001)); /* a report that is no evidence: expiry */
    obs_crash(o, CF_CRASH, 1, S(103), S(104.8), S(103.5), 0);
    obs_lead(o, 2, 3, S(104.9), S(104.901));
    obs_dead(o, 2, S(106.001)); /* no report: expiry */
    obs_crash(o, CF_KILL, 2, S(106), S(107.9), 0, 0);
    obs_lead(o, 0, 4, S(107.95), S(107.951));
    obs_dead(o, 0, S(109.001)); /* evidence in time, but taken at expiry */
    obs_crash(o, CF_CRASH, 0, S(109), S(110.8), S(109.2), 1);
    obs_lead(o, 1, 5, S(110.9), S(110.901));
    obs_dead(o, 1, S(112.001)); /* no report, taken 1.6 s before expiry: a violation */
    obs_crash(o, CF_KILL, 1, S(112), S(113.9), 0, 0);
    obs_lead(o, 2, 6, S(112.3), S(112.301));
    obs_dead(o, 2, S(113.001)); /* restarted at once, it takes its own Lease back: fine */
    obs_crash(o, CF_KILL, 2, S(113), S(114.9), 0, 0);
    obs_lead(o, 2, 7, S(113.4), S(113.401));
    obs_dead(o, 2, S(114.001)); /* expiry unknown: 0.5 s after the kill at the earliest */
    obs_crash(o, CF_KILL, 2, S(114), 0, 0, 0);
    obs_lead(o, 0, 8, S(114.6), S(114.601));
    obs_end(o, S(115));
    obs_dead(o, 0, S(115.5));
    assert_int_equal(obs_check(o, NULL, &r), 1);
    assert_int_equal(r.crash_errors, 1);
    assert_int_equal(r.overlaps, 0);
    assert_int_equal(r.recovery_errors, 0);
    c = &r.failover[CF_CRASH];
    assert_int_equal(c->count, 3);
    assert_int_equal(c->reported, 3);
    assert_int_equal(c->evidence, 2);
    assert_int_equal(c->measured, 3);
    assert_int_equal(c->by_report, 1);
    assert_int_equal(c->late, 1);
    assert_true(c->p50_ns >= S(1.9) && c->p50_ns <= S(1.902)); /* of 0.506, 1.901, 1.901 */
    assert_true(c->max_ns >= S(1.9) && c->max_ns <= S(1.902));
    assert_true(c->rep_p50_ns >= MS(5) && c->rep_p50_ns <= MS(7));
    assert_true(c->rep_max_ns == c->rep_p50_ns);
    k = &r.failover[CF_KILL];
    assert_int_equal(k->count, 4);
    assert_int_equal(k->self, 1);
    assert_int_equal(k->reported, 0);
    assert_int_equal(k->measured, 3);
    assert_int_equal(k->early, 1);
    assert_true(k->p50_ns >= S(0.6) && k->p50_ns <= S(0.602)); /* of 0.301, 0.601, 1.951 */
    assert_true(k->p99_ns >= S(1.95) && k->p99_ns <= S(1.952));
    assert_int_equal(r.failover[CF_STOP].count, 0);
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
        cmocka_unit_test(test_seed_clean_handover),
        cmocka_unit_test(test_seed_overlap_found),
        cmocka_unit_test(test_seed_frozen),
        cmocka_unit_test(test_seed_recovery_bound),
        cmocka_unit_test(test_terms_lost),
        cmocka_unit_test(test_crash_failover),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
