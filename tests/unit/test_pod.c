/* Pod status decoding (k8s/pod.h): what an election reads of a Pod for crash
 * failover on the kubelet's report. The samples were captured
 * from kube-apiserver v1.36.3 (envtest, no kubelet: the test wrote the
 * status through pods/status as a kubelet would); the other cases are
 * built around them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/common.h"
#include "k8s/pod.h"

#define UID   "5ac7dc62-f5fb-4c1a-9e7f-567bba9d7ca8"
#define CID_A "containerd://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define CID_B "containerd://bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define CID_C "containerd://cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

/* 2024-05-01T10:00:05Z: "main" started (sample_running). */
#define T_MAIN_STARTED INT64_C(1714557605000000)

/* Created with containers "main" and "side", no status yet. */
static const char sample_pending[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"creationTimestamp\":\"2026-12-02"
    "T06:54:45Z\",\"generation\":1,\"labels\":{\"app\":\"x\"},\"name\":\"p1\",\"namespace\":\""
    "default\",\"resourceVersion\":\"208\",\"uid\":\"5ac7dc62-f5fb-4c1a-9e7f-567bba9d7ca8\"},"
    "\"spec\":{\"containers\":[{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"name\""
    ":\"main\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"termina"
    "tionMessagePolicy\":\"File\"},{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"na"
    "me\":\"side\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"ter"
    "minationMessagePolicy\":\"File\"}],\"dnsPolicy\":\"ClusterFirst\",\"enableServiceLinks\""
    ":true,\"preemptionPolicy\":\"PreemptLowerPriority\",\"priority\":0,\"restartPolicy\":\"A"
    "lways\",\"schedulerName\":\"default-scheduler\",\"securityContext\":{},\"terminationGrac"
    "ePeriodSeconds\":30,\"tolerations\":[{\"effect\":\"NoExecute\",\"key\":\"node.kubernetes"
    ".io/not-ready\",\"operator\":\"Exists\",\"tolerationSeconds\":300},{\"effect\":\"NoExecu"
    "te\",\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"tolerationSeco"
    "nds\":300}]},\"status\":{\"phase\":\"Pending\",\"qosClass\":\"BestEffort\"}}";
/* main: instance B running since 10:00:05, instance A terminated before
 * (lastState); side: waiting. */
static const char sample_running[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"creationTimestamp\":\"2026-12-02"
    "T06:54:45Z\",\"generation\":1,\"labels\":{\"app\":\"x\"},\"name\":\"p1\",\"namespace\":\""
    "default\",\"resourceVersion\":\"209\",\"uid\":\"5ac7dc62-f5fb-4c1a-9e7f-567bba9d7ca8\"},"
    "\"spec\":{\"containers\":[{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"name\""
    ":\"main\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"termina"
    "tionMessagePolicy\":\"File\"},{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"na"
    "me\":\"side\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"ter"
    "minationMessagePolicy\":\"File\"}],\"dnsPolicy\":\"ClusterFirst\",\"enableServiceLinks\""
    ":true,\"preemptionPolicy\":\"PreemptLowerPriority\",\"priority\":0,\"restartPolicy\":\"A"
    "lways\",\"schedulerName\":\"default-scheduler\",\"securityContext\":{},\"terminationGrac"
    "ePeriodSeconds\":30,\"tolerations\":[{\"effect\":\"NoExecute\",\"key\":\"node.kubernetes"
    ".io/not-ready\",\"operator\":\"Exists\",\"tolerationSeconds\":300},{\"effect\":\"NoExecu"
    "te\",\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"tolerationSeco"
    "nds\":300}]},\"status\":{\"containerStatuses\":[{\"containerID\":\"containerd://bbbbbbbb"
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"image\":\"busybox\",\"image"
    "ID\":\"\",\"lastState\":{\"terminated\":{\"containerID\":\"containerd://aaaaaaaaaaaaaaaa"
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\",\"exitCode\":137,\"finishedAt\":\"202"
    "4-05-01T10:00:04Z\",\"reason\":\"Error\",\"startedAt\":\"2024-05-01T09:00:00Z\"}},\"name"
    "\":\"main\",\"ready\":true,\"restartCount\":1,\"started\":true,\"state\":{\"running\":{\""
    "startedAt\":\"2024-05-01T10:00:05Z\"}}},{\"image\":\"busybox\",\"imageID\":\"\",\"lastSt"
    "ate\":{},\"name\":\"side\",\"ready\":false,\"restartCount\":0,\"started\":false,\"state\""
    ":{\"waiting\":{\"reason\":\"ContainerCreating\"}}}],\"phase\":\"Running\",\"qosClass\":\""
    "BestEffort\"}}";
/* main: instance B terminated (state), only container listed. */
static const char sample_terminated[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"creationTimestamp\":\"2026-12-02"
    "T06:54:45Z\",\"generation\":1,\"labels\":{\"app\":\"x\"},\"name\":\"p1\",\"namespace\":\""
    "default\",\"resourceVersion\":\"210\",\"uid\":\"5ac7dc62-f5fb-4c1a-9e7f-567bba9d7ca8\"},"
    "\"spec\":{\"containers\":[{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"name\""
    ":\"main\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"termina"
    "tionMessagePolicy\":\"File\"},{\"image\":\"busybox\",\"imagePullPolicy\":\"Always\",\"na"
    "me\":\"side\",\"resources\":{},\"terminationMessagePath\":\"/dev/termination-log\",\"ter"
    "minationMessagePolicy\":\"File\"}],\"dnsPolicy\":\"ClusterFirst\",\"enableServiceLinks\""
    ":true,\"preemptionPolicy\":\"PreemptLowerPriority\",\"priority\":0,\"restartPolicy\":\"A"
    "lways\",\"schedulerName\":\"default-scheduler\",\"securityContext\":{},\"terminationGrac"
    "ePeriodSeconds\":30,\"tolerations\":[{\"effect\":\"NoExecute\",\"key\":\"node.kubernetes"
    ".io/not-ready\",\"operator\":\"Exists\",\"tolerationSeconds\":300},{\"effect\":\"NoExecu"
    "te\",\"key\":\"node.kubernetes.io/unreachable\",\"operator\":\"Exists\",\"tolerationSeco"
    "nds\":300}]},\"status\":{\"containerStatuses\":[{\"containerID\":\"containerd://bbbbbbbb"
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"image\":\"busybox\",\"image"
    "ID\":\"\",\"lastState\":{},\"name\":\"main\",\"ready\":false,\"restartCount\":1,\"starte"
    "d\":false,\"state\":{\"terminated\":{\"containerID\":\"containerd://bbbbbbbbbbbbbbbbbbbb"
    "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\",\"exitCode\":139,\"finishedAt\":\"2024-05"
    "-01T10:30:00Z\",\"reason\":\"Error\",\"startedAt\":\"2024-05-01T10:00:05Z\"}}}],\"phase\""
    ":\"Running\",\"qosClass\":\"BestEffort\"}}";

static void assert_error_contains(const char *needle)
{
    const char *msg = kl__error_get();

    if (!strstr(msg, needle))
        fail_msg("error message \"%s\" does not contain \"%s\"", msg, needle);
}

static kl__pod *parse_ok(const char *json)
{
    kl__pod *p = NULL;
    int err = kl__pod_parse(&p, json, strlen(json));

    if (err != 0)
        fail_msg("parse: %d %s\n  of %s", err, kl__error_get(), json);
    assert_non_null(p);
    return p;
}

/* A Pod default/p1 with UID, whose status.containerStatuses is the JSON
 * array statuses. */
static kl__pod *pod_with(const char *statuses)
{
    char buf[4096];

    snprintf(buf, sizeof(buf),
             "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p1\","
             "\"namespace\":\"default\",\"uid\":\"" UID "\",\"resourceVersion\":\"300\"},"
             "\"status\":{\"phase\":\"Running\",\"containerStatuses\":%s}}",
             statuses);
    return parse_ok(buf);
}

/* ------------------------------------------------------------------------ */
/* Parse                                                                    */
/* ------------------------------------------------------------------------ */

static void test_parse_samples(void **state)
{
    kl__pod *p;
    const kl__pod_container *c;

    (void)state;
    p = parse_ok(sample_pending);
    assert_string_equal(p->ns, "default");
    assert_string_equal(p->name, "p1");
    assert_string_equal(p->uid, UID);
    assert_string_equal(p->rv, "208");
    assert_int_equal(p->ncontainers, 0);
    assert_null(p->containers);
    kl__pod_free(p);

    p = parse_ok(sample_running);
    assert_string_equal(p->rv, "209");
    assert_int_equal(p->ncontainers, 2);
    c = &p->containers[0];
    assert_string_equal(c->name, "main");
    assert_string_equal(c->container_id, CID_B);
    assert_true(c->running);
    assert_int_equal(c->started_us, T_MAIN_STARTED);
    assert_false(c->waiting);
    assert_false(c->terminated);
    assert_string_equal(c->terminated_id, "");
    assert_int_equal(c->terminated_finished_us, 0);
    assert_string_equal(c->last_terminated_id, CID_A);
    assert_int_equal(c->last_terminated_finished_us, T_MAIN_STARTED - 1000000);
    c = &p->containers[1];
    assert_string_equal(c->name, "side");
    assert_string_equal(c->container_id, "");
    assert_false(c->running);
    assert_int_equal(c->started_us, 0);
    assert_true(c->waiting);
    assert_string_equal(c->terminated_id, "");
    assert_string_equal(c->last_terminated_id, ""); /* lastState: {} */
    kl__pod_free(p);

    p = parse_ok(sample_terminated);
    assert_int_equal(p->ncontainers, 1);
    c = &p->containers[0];
    assert_false(c->running);
    assert_false(c->waiting);
    assert_true(c->terminated);
    assert_string_equal(c->terminated_id, CID_B);
    assert_int_equal(c->terminated_finished_us, T_MAIN_STARTED + 1795 * INT64_C(1000000));
    assert_string_equal(c->last_terminated_id, "");
    assert_int_equal(c->last_terminated_finished_us, 0);
    kl__pod_free(p);
}

/* Missing and null fields are absent; fields this does not read may hold
 * anything. */
static void test_parse_absent_fields(void **state)
{
    kl__pod *p;
    const kl__pod_container *c;

    (void)state;
    p = parse_ok("{\"metadata\":{\"name\":\"x\"}}");
    assert_string_equal(p->ns, "");
    assert_string_equal(p->uid, "");
    assert_string_equal(p->rv, "");
    assert_int_equal(p->ncontainers, 0);
    kl__pod_free(p);

    p = parse_ok("{\"kind\":null,\"metadata\":{\"name\":\"x\",\"namespace\":null,\"uid\":null,"
                 "\"resourceVersion\":null},\"spec\":7,\"status\":null}");
    assert_string_equal(p->ns, "");
    kl__pod_free(p);

    p = parse_ok("{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":null,"
                 "\"initContainerStatuses\":5}}");
    assert_int_equal(p->ncontainers, 0);
    kl__pod_free(p);

    p = parse_ok("{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[]}}");
    assert_int_equal(p->ncontainers, 0);
    assert_null(p->containers);
    kl__pod_free(p);

    p = pod_with(
        "[{},{\"name\":null,\"containerID\":null,\"state\":null,\"lastState\":null},"
        "{\"name\":\"n\",\"state\":{\"running\":null,\"waiting\":null,\"terminated\":null},"
        "\"lastState\":{\"terminated\":null}},"
        "{\"name\":\"r\",\"state\":{\"running\":{\"startedAt\":null}},\"ready\":\"?\"},"
        "{\"name\":\"t\",\"state\":{\"terminated\":{\"containerID\":null,\"exitCode\":\"x\","
        "\"finishedAt\":null}},\"lastState\":{\"terminated\":{\"finishedAt\":\"\"}}}]");
    assert_int_equal(p->ncontainers, 5);
    for (size_t i = 0; i < 3; i++) {
        c = &p->containers[i];
        assert_string_equal(c->name, i == 2 ? "n" : "");
        assert_string_equal(c->container_id, "");
        assert_false(c->running || c->waiting || c->terminated);
        assert_string_equal(c->terminated_id, "");
        assert_string_equal(c->last_terminated_id, "");
    }
    c = &p->containers[3];
    assert_true(c->running);
    assert_int_equal(c->started_us, 0);
    c = &p->containers[4];
    assert_true(c->terminated);
    assert_string_equal(c->terminated_id, "");
    assert_int_equal(c->terminated_finished_us, 0);
    assert_string_equal(c->last_terminated_id, "");
    assert_int_equal(c->last_terminated_finished_us, 0);
    kl__pod_free(p);
}

static const struct {
    const char *json;
    int code;
    const char *needle;
} parse_errors[] = {
    {"", K8SLEASE_EPROTOCOL, "Pod body: not valid JSON"},
    {"{\"metadata\":", K8SLEASE_EPROTOCOL, "Pod body: not valid JSON"},
    {"[]", K8SLEASE_EPROTOCOL, "Pod: not a JSON object"},
    {"\"Pod\"", K8SLEASE_EPROTOCOL, "Pod: not a JSON object"},
    {"{\"kind\":\"Lease\",\"metadata\":{\"name\":\"x\"}}", K8SLEASE_EPROTOCOL,
     "Pod: expected a Pod, got a Lease"},
    {"{\"kind\":\"Status\",\"message\":\"pods \\\"x\\\" not found\",\"code\":404}",
     K8SLEASE_EPROTOCOL, "expected a Pod, got a Status: pods \"x\" not found"},
    {"{\"kind\":5,\"metadata\":{\"name\":\"x\"}}", K8SLEASE_EPROTOCOL,
     "Pod: kind: must be a string"},
    {"{}", K8SLEASE_EPROTOCOL, "Pod: metadata.name missing"},
    {"{\"metadata\":{\"name\":\"\"}}", K8SLEASE_EPROTOCOL, "Pod: metadata.name missing"},
    {"{\"metadata\":[]}", K8SLEASE_EPROTOCOL, "Pod: metadata: must be an object"},
    {"{\"metadata\":{\"name\":5}}", K8SLEASE_EPROTOCOL, "Pod: metadata.name: must be a string"},
    {"{\"metadata\":{\"name\":\"x\",\"namespace\":\"ns\",\"uid\":5}}", K8SLEASE_EPROTOCOL,
     "Pod ns/x: metadata.uid: must be a string"},
    {"{\"metadata\":{\"name\":\"x\",\"namespace\":[]}}", K8SLEASE_EPROTOCOL,
     "Pod x: metadata.namespace: must be a string"},
    {"{\"metadata\":{\"name\":\"x\",\"resourceVersion\":209}}", K8SLEASE_EPROTOCOL,
     "Pod x: metadata.resourceVersion: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":\"Running\"}", K8SLEASE_EPROTOCOL,
     "Pod x: status: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":{}}}", K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses: must be an array"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{},5]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[1]: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"name\":1}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].name: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"containerID\":true}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].containerID: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":[]}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].state: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"lastState\":\"\"}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].lastState: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"running\":"
     "true}}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].state.running: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"waiting\":"
     "\"CrashLoopBackOff\"}}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].state.waiting: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":"
     "1}}]}}",
     K8SLEASE_EPROTOCOL, "Pod x: status.containerStatuses[0].state.terminated: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{},{\"state\":{\"running\":"
     "{\"startedAt\":5}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[1].state.running.startedAt: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{},{\"state\":{\"running\":"
     "{\"startedAt\":\"2024-05-01 10:00:05\"}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[1].state.running.startedAt: invalid MicroTime"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"running\":"
     "{\"startedAt\":\"2024-02-30T10:00:05Z\"}}}]}}",
     K8SLEASE_EPROTOCOL, "day out of range"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":"
     "{\"containerID\":7}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[0].state.terminated.containerID: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"lastState\":{"
     "\"terminated\":[]}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[0].lastState.terminated: must be an object"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"lastState\":{"
     "\"terminated\":{\"containerID\":{}}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[0].lastState.terminated.containerID: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"state\":{\"terminated\":"
     "{\"finishedAt\":1714557605}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[0].state.terminated.finishedAt: must be a string"},
    {"{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"lastState\":{"
     "\"terminated\":{\"finishedAt\":\"yesterday\"}}}]}}",
     K8SLEASE_EPROTOCOL,
     "Pod x: status.containerStatuses[0].lastState.terminated.finishedAt: invalid MicroTime"},
};

static void test_parse_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(parse_errors) / sizeof(parse_errors[0]); i++) {
        kl__pod *p = (kl__pod *)&p; /* garbage: must come back NULL */
        int err = kl__pod_parse(&p, parse_errors[i].json, strlen(parse_errors[i].json));

        if (err != parse_errors[i].code)
            fail_msg("%s: got %d (%s), want %d", parse_errors[i].json, err, kl__error_get(),
                     parse_errors[i].code);
        assert_null(p);
        assert_error_contains(parse_errors[i].needle);
    }
}

static void test_from_json_refcount(void **state)
{
    json_t *obj = json_loads(sample_running, 0, NULL);
    kl__pod *p = NULL;

    (void)state;
    assert_non_null(obj);
    assert_int_equal(kl__pod_from_json(&p, obj), 0);
    assert_int_equal(obj->refcount, 2);
    assert_ptr_equal(p->root, obj);
    kl__pod_free(p);
    assert_int_equal(obj->refcount, 1);
    /* A failure releases its reference too. */
    json_object_set_new(obj, "kind", json_string("Node"));
    assert_int_equal(kl__pod_from_json(&p, obj), K8SLEASE_EPROTOCOL);
    assert_null(p);
    assert_int_equal(obj->refcount, 1);
    json_decref(obj);
    assert_int_equal(kl__pod_from_json(&p, NULL), K8SLEASE_EPROTOCOL);
    kl__pod_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* kl__pod_container_ended                                                  */
/* ------------------------------------------------------------------------ */

static void test_ended_samples(void **state)
{
    kl__pod *p;

    (void)state;
    /* Instance B running, A in lastState: A ended, B did not. */
    p = parse_ok(sample_running);
    assert_true(kl__pod_container_ended(p, UID, "main", CID_A));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "side", CID_A));
    kl__pod_free(p);
    /* B terminated in state. */
    p = parse_ok(sample_terminated);
    assert_true(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_A));
    kl__pod_free(p);
    /* No status yet. */
    p = parse_ok(sample_pending);
    assert_false(kl__pod_container_ended(p, UID, "main", CID_A));
    kl__pod_free(p);
}

static void test_ended_cases(void **state)
{
    kl__pod *p;

    (void)state;
    /* Terminated in state: evidence for that instance only. */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"terminated\":{"
                 "\"exitCode\":137,\"containerID\":\"" CID_B "\"}}}]");
    assert_true(kl__pod_container_ended(p, UID, "main", CID_B));
    /* Another UID: the Pod was deleted and created again with that name. */
    assert_false(kl__pod_container_ended(p, "0d0e0a0d-0000-4000-8000-000000000000", "main", CID_B));
    /* Another containerID, a prefix of it, or it with more. */
    assert_false(kl__pod_container_ended(p, UID, "main", CID_C));
    assert_false(kl__pod_container_ended(p, UID, "main", "containerd://bbbb"));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B "b"));
    /* A container the Pod does not list. */
    assert_false(kl__pod_container_ended(p, UID, "other", CID_B));
    /* Empty or NULL arguments. */
    assert_false(kl__pod_container_ended(p, UID, "main", ""));
    assert_false(kl__pod_container_ended(p, UID, "main", NULL));
    assert_false(kl__pod_container_ended(p, UID, "", CID_B));
    assert_false(kl__pod_container_ended(p, UID, NULL, CID_B));
    assert_false(kl__pod_container_ended(p, "", "main", CID_B));
    assert_false(kl__pod_container_ended(p, NULL, "main", CID_B));
    assert_false(kl__pod_container_ended(NULL, UID, "main", CID_B));
    kl__pod_free(p);

    /* Restarted in place: the new instance C runs, B ended (lastState). */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_C "\",\"state\":{\"running\":{"
                 "\"startedAt\":\"2024-05-01T10:31:00Z\"}},\"lastState\":{\"terminated\":{"
                 "\"exitCode\":139,\"containerID\":\"" CID_B "\"}}}]");
    assert_true(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_C)); /* running */
    /* An earlier restart's instance: neither in state nor in lastState. */
    assert_false(kl__pod_container_ended(p, UID, "main", CID_A));
    kl__pod_free(p);

    /* Waiting (CrashLoopBackOff) after B ended: B ended; a waiting state
     * alone says nothing of the holder's instance C. */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"waiting\":{"
                 "\"reason\":\"CrashLoopBackOff\"}},\"lastState\":{\"terminated\":{"
                 "\"containerID\":\"" CID_B "\"}}}]");
    assert_true(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_C));
    kl__pod_free(p);
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"waiting\":{}}}]");
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B));
    kl__pod_free(p);

    /* Running: its own containerID is no evidence. */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"running\":{"
                 "\"startedAt\":\"2024-05-01T10:00:05Z\"}}}]");
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B));
    kl__pod_free(p);

    /* Terminated without a containerID (malformed, or a container that
     * never started): never evidence, even for the current containerID or
     * an empty one. */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"terminated\":{"
                 "\"exitCode\":1}},\"lastState\":{\"terminated\":{\"containerID\":\"\"}}},"
                 "{\"name\":\"side\",\"state\":{\"terminated\":{}}}]");
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "main", ""));
    assert_false(kl__pod_container_ended(p, UID, "side", ""));
    kl__pod_free(p);

    /* A Pod without a UID matches no UID, not even "". */
    p = parse_ok("{\"metadata\":{\"name\":\"x\"},\"status\":{\"containerStatuses\":[{\"name\":"
                 "\"main\",\"state\":{\"terminated\":{\"containerID\":\"" CID_B "\"}}}]}}");
    assert_false(kl__pod_container_ended(p, "", "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "main", CID_B));
    kl__pod_free(p);

    /* A nameless status is not a container called "". */
    p = pod_with("[{\"state\":{\"terminated\":{\"containerID\":\"" CID_B "\"}}}]");
    assert_false(kl__pod_container_ended(p, UID, "", CID_B));
    kl__pod_free(p);

    /* The right container among several. */
    p = pod_with("[{\"name\":\"side\",\"state\":{\"running\":{}}},{\"name\":\"main\",\"state\":{"
                 "\"terminated\":{\"containerID\":\"" CID_B "\"}}}]");
    assert_true(kl__pod_container_ended(p, UID, "main", CID_B));
    assert_false(kl__pod_container_ended(p, UID, "side", CID_B));
    kl__pod_free(p);
}

/* ------------------------------------------------------------------------ */
/* kl__pod_own_container                                                    */
/* ------------------------------------------------------------------------ */

static void expect_own(const kl__pod *p, const char *container, int64_t start, int code,
                       const char *needle)
{
    const kl__pod_container *c = (const kl__pod_container *)&c;
    int err = kl__pod_own_container(p, container, start, &c);

    if (err != code)
        fail_msg("own_container(%s): got %d (%s), want %d", container ? container : "NULL", err,
                 kl__error_get(), code);
    if (code == 0) {
        assert_non_null(c);
        return;
    }
    assert_null(c);
    assert_error_contains(needle);
}

static void test_own_container(void **state)
{
    const kl__pod_container *c = NULL;
    kl__pod *p;

    (void)state;
    /* One container: found without a name, and by its name. */
    p = pod_with("[{\"name\":\"main\",\"containerID\":\"" CID_B "\",\"state\":{\"running\":{"
                 "\"startedAt\":\"2024-05-01T10:00:05Z\"}},\"lastState\":{\"terminated\":{"
                 "\"containerID\":\"" CID_A "\"}}}]");
    assert_int_equal(kl__pod_own_container(p, NULL, T_MAIN_STARTED + 300000, &c), 0);
    assert_ptr_equal(c, &p->containers[0]);
    assert_string_equal(c->container_id, CID_B);
    assert_int_equal(kl__pod_own_container(p, "main", T_MAIN_STARTED + 300000, &c), 0);
    assert_string_equal(c->container_id, CID_B);
    /* startedAt equal to the process start is not after it. */
    expect_own(p, NULL, T_MAIN_STARTED, 0, NULL);
    /* Started after this process: the status is not ours yet. */
    expect_own(p, NULL, T_MAIN_STARTED - 1, K8SLEASE_ENOTFOUND,
               "pod default/p1: container \"main\" (" CID_B ") started at "
               "2024-05-01T10:00:05.000000Z, after this process (2024-05-01T10:00:04.999999Z)");
    /* A name it does not list. */
    expect_own(p, "side", T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "pod default/p1: no status of container \"side\" yet");
    kl__pod_free(p);

    /* Several: named, unnamed. */
    p = parse_ok(sample_running);
    assert_int_equal(kl__pod_own_container(p, "main", T_MAIN_STARTED + 1, &c), 0);
    assert_string_equal(c->name, "main");
    assert_string_equal(c->container_id, CID_B);
    expect_own(p, NULL, T_MAIN_STARTED + 1, K8SLEASE_EINVAL,
               "pod default/p1: the pod has 2 containers: name one");
    /* Waiting: not running yet. */
    expect_own(p, "side", T_MAIN_STARTED + 1, K8SLEASE_ENOTFOUND,
               "pod default/p1: container \"side\" is not running (waiting)");
    kl__pod_free(p);

    /* No status at all yet (Pending). */
    p = parse_ok(sample_pending);
    expect_own(p, NULL, T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "pod default/p1: no container status yet");
    expect_own(p, "main", T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "no status of container \"main\" yet");
    kl__pod_free(p);

    /* Terminated: not running. */
    p = parse_ok(sample_terminated);
    expect_own(p, NULL, T_MAIN_STARTED + 1, K8SLEASE_ENOTFOUND,
               "container \"main\" is not running (terminated)");
    kl__pod_free(p);

    /* Running without a containerID, without a startedAt, with no state. */
    p = pod_with(
        "[{\"name\":\"a\",\"state\":{\"running\":{\"startedAt\":\"2024-05-01T10:00:05Z\"}}},"
        "{\"name\":\"b\",\"containerID\":\"" CID_B "\",\"state\":{\"running\":{}}},"
        "{\"name\":\"c\",\"containerID\":\"" CID_C "\"}]");
    expect_own(p, "a", T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "container \"a\" has no containerID yet");
    expect_own(p, "b", T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "container \"b\" is running without a startedAt");
    expect_own(p, "c", T_MAIN_STARTED, K8SLEASE_ENOTFOUND,
               "container \"c\" is not running (no state)");
    kl__pod_free(p);
}

/* ------------------------------------------------------------------------ */
/* Allocation failures                                                      */
/* ------------------------------------------------------------------------ */

/* Every allocation of a parse failing in turn (jansson's too, through the
 * hook set in main): ENOMEM, or "not valid JSON" when jansson cannot tell,
 * and nothing left allocated (LeakSanitizer under the ASan build). The
 * library-wide sweep is tests/unit/test_failalloc.c. */
static void test_failalloc(void **state)
{
    long n;
    int err = -1;

    (void)state;
    for (n = 0; n < 1000; n++) {
        kl__pod *p = NULL;
        void *probe;

        kl__alloc_fail_after(n);
        err = kl__pod_parse(&p, sample_running, strlen(sample_running));
        probe = kl__malloc(1);
        kl__alloc_fail_after(-1);
        kl__free(probe);
        kl__pod_free(p);
        if (probe)
            break; /* nothing failed */
        if (err == 0)
            continue; /* the probe was the first allocation to fail */
        assert_null(p);
        if (err != K8SLEASE_ENOMEM &&
            !(err == K8SLEASE_EPROTOCOL && strstr(kl__error_get(), "not valid JSON")))
            fail_msg("allocation %ld failing gave %d: %s", n, err, kl__error_get());
    }
    assert_int_equal(err, 0);
    assert_true(n > 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_samples), cmocka_unit_test(test_parse_absent_fields),
        cmocka_unit_test(test_parse_errors),  cmocka_unit_test(test_from_json_refcount),
        cmocka_unit_test(test_ended_samples), cmocka_unit_test(test_ended_cases),
        cmocka_unit_test(test_own_container), cmocka_unit_test(test_failalloc),
    };

    json_set_alloc_funcs(kl__malloc, kl__free);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
