/* Crash failover's pure parts (k8s/crash.h): this process's instance as
 * the kernel shows it (/proc/self/cgroup and mountinfo texts, as the
 * kubelet's cgroup drivers and runtimes name them), and the comparison of
 * a record's containerID with a status's. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "k8s/crash.h"

#define ID   "f8e6e27994b61415987a9e8c0106cb918d5db9edb1490a0b6c8ad2cb3456fd8f"
#define UID  "99564f0c-1b9b-4e0e-8247-814408952d97"
#define UIDU "99564f0c_1b9b_4e0e_8247_814408952d97"

/* Parse the two texts (either may be NULL). */
static kl__proc_instance parse(const char *cgroup, const char *mountinfo)
{
    kl__proc_instance p;
    FILE *cg = cgroup ? fmemopen((void *)cgroup, strlen(cgroup), "r") : NULL;
    FILE *mi = mountinfo ? fmemopen((void *)mountinfo, strlen(mountinfo), "r") : NULL;

    kl__proc_instance_read(&p, cg, mi);
    if (cg)
        fclose(cg);
    if (mi)
        fclose(mi);
    return p;
}

/* cgroup v1, cgroupfs driver (containerd, CRI-O, Docker alike): the ID is
 * the last component, the runtime unnamed. */
static void cgroupfs(void **state)
{
    kl__proc_instance p = parse("12:hugetlb:/\n"
                                "9:name=systemd:/kubepods/besteffort/pod" UID "/" ID "\n"
                                "4:memory:/kubepods/besteffort/pod" UID "/" ID "\n",
                                NULL);

    (void)state;
    assert_string_equal(p.id, ID);
    assert_string_equal(p.runtime, "");
    assert_string_equal(p.pod_uid, UID);
    assert_string_equal(p.container, "");
    /* Burstable and guaranteed Pods: one level less or more. */
    p = parse("0::/kubepods/pod" UID "/" ID "\n", NULL);
    assert_string_equal(p.id, ID);
    assert_string_equal(p.pod_uid, UID);
}

/* systemd driver (cgroup v1 or v2 without a cgroup namespace): the runtime
 * names the scope, the Pod's UID has _ for -. */
static void systemd_scopes(void **state)
{
    static const struct {
        const char *scope, *runtime;
    } cases[] = {
        {"cri-containerd-", "containerd://"}, {"crio-", "cri-o://"}, {"docker-", "docker://"}};

    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char text[512];
        kl__proc_instance p;

        snprintf(text, sizeof(text),
                 "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UIDU
                 ".slice/%s" ID ".scope\n",
                 cases[i].scope);
        p = parse(text, NULL);
        assert_string_equal(p.id, ID);
        assert_string_equal(p.runtime, cases[i].runtime);
        assert_string_equal(p.pod_uid, UID);
    }
}

/* Nothing to learn: a cgroup namespace ("/"), no Pod, not a container ID, a
 * scope of an unknown kind, an ID without its Pod, truncated or upper case. */
static void says_nothing(void **state)
{
    static const char *const texts[] = {
        "0::/\n",
        "4:memory:/process_api/141df37d70020ab260479fbbd20c89f1\n",
        "4:memory:/system.slice/containerd.service\n",
        "0::/kubepods.slice/kubepods-pod" UIDU ".slice/session-" ID ".scope\n",
        "4:memory:/docker/" ID "\n",
        "4:memory:/kubepods/besteffort/pod" UID "/" ID "0\n",
        "4:memory:/kubepods/besteffort/pod" UID
        "/F8E6E27994B61415987A9E8C0106CB918D5DB9EDB1490A0B6C8AD2CB3456FD8F\n",
        "4:memory:/kubepods/besteffort/pod1234/" ID "\n",
        "garbage\n",
        "",
    };

    (void)state;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        kl__proc_instance p = parse(texts[i], NULL);

        if (p.id[0])
            fail_msg("\"%s\": took ID %s", texts[i], p.id);
        assert_string_equal(p.pod_uid, "");
    }
    /* No files at all. */
    kl__proc_instance p = parse(NULL, NULL);
    assert_string_equal(p.id, "");
}

/* The container's name from the kubelet's mount of /dev/termination-log. */
static void termination_log(void **state)
{
    kl__proc_instance p =
        parse(NULL, "120 106 254:0 /var/lib/kubelet/pods/" UID "/etc-hosts /etc/hosts rw - ext4 "
                    "/dev/vda rw\n"
                    "123 108 254:0 /var/lib/kubelet/pods/" UID "/containers/server/61d4d31f "
                    "/dev/termination-log rw,relatime - ext4 /dev/vda rw\n");

    (void)state;
    assert_string_equal(p.container, "server");
    /* Another mount point, or no containers/ in the path: nothing. */
    p = parse(NULL,
              "123 108 254:0 /x/containers/server/61d4d31f /dev/other rw - ext4 /dev/vda rw\n"
              "124 108 254:0 /x/server/61d4d31f /dev/termination-log rw - ext4 /dev/vda rw\n");
    assert_string_equal(p.container, "");
}

static void same_instance(void **state)
{
    (void)state;
    assert_true(kl__crash_same_instance("containerd://" ID, "containerd://" ID));
    /* A bare ID from the cgroup names the instance the status prefixes. */
    assert_true(kl__crash_same_instance(ID, "containerd://" ID));
    assert_true(kl__crash_same_instance(ID, "cri-o://" ID));
    /* Never a prefix or a part of it, nor another runtime's. */
    assert_false(kl__crash_same_instance(ID, "containerd://" ID "0"));
    assert_false(kl__crash_same_instance("f8e6e279", "containerd://" ID));
    assert_false(kl__crash_same_instance("containerd://" ID, "cri-o://" ID));
    assert_false(kl__crash_same_instance("containerd://" ID, ID));
    assert_false(kl__crash_same_instance(ID, ""));
}

/* An earlier instance's term under our identity (a restart in place)? */
static void predecessor(void **state)
{
    kl__crash_record r = {"me", 3, "ns", "p", UID, "main", "containerd://" ID, 0};
    kl__lease_spec spec = {"me", 15, 0, 0, 3};
    int64_t start = INT64_C(1796297000) * 1000000 + 400000; /* 0.4 s into a second */

    (void)state;
    r.verified_us = start - 3000000;
    /* Our instance known: another one, or ours (prefixed or bare). */
    assert_true(kl__crash_is_predecessor(&r, &spec, "me", "aaaa", start));
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", ID, start));
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "containerd://" ID, start));
    r.container_id = (char *)ID;
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "containerd://" ID, start));
    /* Not known: by the times (whole seconds). */
    assert_true(kl__crash_is_predecessor(&r, &spec, "me", NULL, start));
    assert_true(kl__crash_is_predecessor(&r, &spec, "me", "", start));
    r.verified_us = start - 300000; /* the same second: ours, maybe */
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", NULL, start));
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", NULL, 0));
    r.verified_us = start - 3000000;
    /* Not our identity, or a record of another term: never. */
    spec.holder = "other";
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "aaaa", start));
    spec.holder = NULL;
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "aaaa", start));
    spec.holder = "me";
    spec.transitions = 4;
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "aaaa", start));
    spec.transitions = 3;
    r.holder = "you";
    assert_false(kl__crash_is_predecessor(&r, &spec, "me", "aaaa", start));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cgroupfs),      cmocka_unit_test(systemd_scopes),
        cmocka_unit_test(says_nothing),  cmocka_unit_test(termination_log),
        cmocka_unit_test(same_instance), cmocka_unit_test(predecessor),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
