/* Planned handoff's pure parts (k8s/handoff.h): the candidates' objects
 * (names, labels, the JSON both ways) and the choice of a successor. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "core/common.h"
#include "k8s/handoff.h"

#define S(x) (INT64_C(1796000000) + (x)) * 1000000 /* wall µs of second x */

static void names(void **state)
{
    char long_name[254], label[17], other[17], *n;

    (void)state;
    n = kl__handoff_cand_name("my-master", "pod-a");
    assert_non_null(n);
    assert_int_equal(strlen(n), strlen("my-master") + 19);
    assert_memory_equal(n, "my-master-c-", 12);
    kl__free(n);
    /* The longest Lease name: cut to fit 253, never ending in '.' or '-'. */
    memset(long_name, 'a', 253);
    long_name[253] = '\0';
    long_name[233] = '.';
    n = kl__handoff_cand_name(long_name, "x");
    assert_true(strlen(n) <= 253);
    assert_int_equal(n[strlen(n) - 20], 'a');
    kl__free(n);
    /* One label value per Lease name, 16 hex digits (a label value is at
     * most 63 characters; a Lease name up to 253). */
    kl__handoff_label("my-master", label);
    kl__handoff_label("my-master2", other);
    assert_int_equal(strlen(label), 16);
    assert_string_not_equal(label, other);
}

static void encode_parse(void **state)
{
    kl__handoff_cand c = {0}, back;
    json_t *root, *owner;
    char *text;

    (void)state;
    c.identity = "pod-a";
    c.lease = "my-master";
    c.pod = "pod-a";
    c.pod_uid = "99564f0c-1b9b-4e0e-8247-814408952d97";
    c.revision = "7d4b9c";
    c.priority = 3;
    c.terminating = 1;
    c.born_us = S(10);
    text = kl__handoff_cand_encode("ns", &c, "42", S(20));
    assert_non_null(text);
    root = json_loads(text, 0, NULL);
    assert_non_null(root);
    owner =
        json_array_get(json_object_get(json_object_get(root, "metadata"), "ownerReferences"), 0);
    assert_string_equal(json_string_value(json_object_get(owner, "kind")), "Pod");
    assert_string_equal(json_string_value(json_object_get(owner, "uid")), c.pod_uid);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(root, "metadata"), "resourceVersion")),
        "42");
    assert_int_equal(kl__handoff_cand_from_json(&back, root), 0);
    assert_string_equal(back.identity, "pod-a");
    assert_string_equal(back.lease, "my-master");
    assert_string_equal(back.pod_uid, c.pod_uid);
    assert_string_equal(back.revision, "7d4b9c");
    assert_int_equal(back.priority, 3);
    assert_int_equal(back.terminating, 1);
    assert_int_equal(back.born_us, S(10));
    assert_int_equal(back.renew_us, S(20));
    assert_int_equal(back.duration_s, KL_HANDOFF_CAND_DURATION_S);
    kl__handoff_cand_clear(&back);
    json_decref(root);
    kl__free(text);
    /* No Pod: no owner. */
    c.pod = c.pod_uid = NULL;
    text = kl__handoff_cand_encode("ns", &c, NULL, S(20));
    assert_null(strstr(text, "ownerReferences"));
    kl__free(text);
}

static void parse_errors(void **state)
{
    static const char *const bad[] = {
        "{\"metadata\":{\"name\":\"x\"},\"spec\":{}}",
        "{\"metadata\":{\"name\":\"x\",\"annotations\":{\"k8slease.io/candidate\":\"[1]\"}},"
        "\"spec\":{\"holderIdentity\":\"a\"}}",
        "{\"metadata\":{\"name\":\"x\",\"annotations\":{\"k8slease.io/candidate\":"
        "\"{\\\"lease\\\":\\\"l\\\"}\"}},\"spec\":{}}",
        "{\"metadata\":{\"name\":\"x\",\"annotations\":{\"k8slease.io/candidate\":"
        "\"{\\\"lease\\\":\\\"l\\\",\\\"bornAt\\\":\\\"yesterday\\\"}\"}},"
        "\"spec\":{\"holderIdentity\":\"a\"}}",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kl__handoff_cand c;
        json_t *root = json_loads(bad[i], 0, NULL);

        assert_non_null(root);
        assert_int_equal(kl__handoff_cand_from_json(&c, root), K8SLEASE_EPROTOCOL);
        assert_non_null(strstr(kl__error_get(), "candidate x"));
        json_decref(root);
    }
}

#define CAND(id, rev, prio, term, born)                                                            \
    {                                                                                              \
        (char *)(id), (char *)"l", NULL, NULL, (char *)(rev), (prio), (term), S(born), S(100),     \
            3600                                                                                   \
    }

static void choose(void **state)
{
    /* A rollout: old revision "r1" born at 0-2, new "r2" at 50-51; the
     * leader is o1. */
    kl__handoff_cand rollout[] = {
        CAND("o1", "r1", 0, 0, 0),  CAND("o2", "r1", 0, 0, 1),  CAND("o3", "r1", 9, 0, 2),
        CAND("n1", "r2", 0, 0, 50), CAND("n2", "r2", 0, 0, 51),
    };
    (void)state;
    /* The newest revision, then the longest-lived: n1, not o3 (priority
     * comes after the revision). */
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(101)), 3);
    /* Priority within a revision. */
    rollout[4].priority = 1;
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(101)), 4);
    /* Terminating ones never; nor the leader; nor an expired object. */
    rollout[4].terminating = 1;
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(101)), 3);
    assert_int_equal(kl__handoff_choose(rollout, 5, "n1", S(101)), 2); /* r1's o3, priority 9 */
    rollout[3].terminating = 1;
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(101)), 2);
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(100 + 3600)), -1);
    /* An object on a Pod is written once and never renewed: hours later
     * it still counts (its Pod's garbage collection deletes it). */
    rollout[2].pod_uid = (char *)"uid-o3";
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(100 + 7200)), 2);
    rollout[2].pod_uid = (char *)"";
    assert_int_equal(kl__handoff_choose(rollout, 5, "o1", S(100 + 7200)), -1);
    rollout[2].pod_uid = NULL;
    /* Alone: nobody. */
    assert_int_equal(kl__handoff_choose(rollout, 1, "o1", S(101)), -1);
    assert_int_equal(kl__handoff_choose(NULL, 0, "o1", S(101)), -1);
}

static void ties(void **state)
{
    /* Same revision, priority and birth: the identity orders. */
    kl__handoff_cand c[] = {CAND("b", "", 0, 0, 5), CAND("a", "", 0, 0, 5), CAND("c", "", 0, 0, 5)};

    (void)state;
    assert_int_equal(kl__handoff_choose(c, 3, "x", S(101)), 1);
    /* A candidate without an identity is no candidate. */
    c[1].identity = (char *)"";
    assert_int_equal(kl__handoff_choose(c, 3, "x", S(101)), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names),  cmocka_unit_test(encode_parse), cmocka_unit_test(parse_errors),
        cmocka_unit_test(choose), cmocka_unit_test(ties),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
