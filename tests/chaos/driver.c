/*
 * k8slease-chaos: the chaos suite's driver and observer (see
 * docs/chaos.md).
 *
 *   k8slease-chaos (--quick | --long) [--seed N] [--backend k8s|etcd|envtest]
 *                  [--candidates 3..5] [--duration S] [--transitions N]
 *                  [--timing LD/RD/RP] [--allowance-ms MS] [--time-cap S]
 *                  [--log FILE] [--verbose] [--naive-candidates]
 *                  [--seed-abi-candidates N] [--naive-seed-abi]
 *
 * It starts the test API server (or etcd), or, with --backend envtest, uses
 * the real kube-apiserver + etcd that tests/integration/envtest.sh started
 * (it runs us with K8SLEASE_TEST_KUBECONFIG and K8SLEASE_ENVTEST_CTL), and
 * 3-5 candidate processes
 * (k8slease-chaos-candidate) on one Lease, and injects faults one after the
 * other, chosen with a seeded PRNG: each round of faults is a shuffled deck
 * holding every kind (plus extra graceful releases in --long), so a quick
 * run sees every kind. Between two faults it waits until a leader is
 * established, then a random settling time. The candidates report their
 * terms with honest bounds (candidate.c); observer.c proves the invariants
 * from them at the end; the driver checks online what needs its own
 * knowledge: frozen processes wake up as not leader, every candidate keeps
 * beating and campaigns again after each term, nobody exits unasked.
 *
 * Under an HA envtest.sh (K8SLEASE_ENVTEST_REPLICAS=2 or 3: kube-apiserver
 * replicas on one etcd behind haproxy) the deck holds the faults of that
 * shape instead of apiserver-stop/-kill: a replica hung, a replica killed,
 * the balancer restarted. The control plane stays up through them, so the
 * report counts the terms each fault kind cost, and a term lost to one of
 * them is a violation when the balancer's checks are fast enough for the
 * timings (ha_setup, docs/chaos.md).
 *
 * With the Kubernetes backends the first --seed-abi-candidates (default 1)
 * candidates are programs on the seed ABI (libk8s_lease_wrapper.h, driven
 * as Mooncake's master drives it, candidate.c): their terms are what the
 * program sees, from K8sLeaseWaitElected's return to K8sLeaseWaitLost's,
 * and take part in every check; a frozen one's WaitLost must return within
 * 1 s of SIGCONT.
 *
 * With the Kubernetes backends the candidates run with crash failover
 * (docs/semantics.md, "Crash failover"; --no-crash-failover: without):
 * each runs "in" a Pod of its own, and the driver plays its kubelet
 * (kubelet_*): it creates the Pod and writes the container's status
 * (running, a containerID per incarnation, startedAt before the process
 * starts) through pods/status before it starts the process. The crash
 * fault SIGKILLs the leader and reports its instance terminated 0-2 s
 * later (then restarts the container in place: a new containerID, the old
 * one in lastState); the kill fault stays a crash nobody reports (a node
 * down: the Pod is replaced by a new one). The observer measures the
 * failover after each (obs_crash).
 *
 * With the Kubernetes backends the fleet is mixed for planned handoff
 * (docs/semantics.md, "Planned handoff"; roles()): among the native
 * candidates some are handoff candidates (known to the leader's choice,
 * with revisions and priorities), one polls as client-go does (poll_only),
 * one is unknown to the choice; the seed-ABI ones are unknown too. The
 * handoff fault has the leader hand over, to a named candidate or to the
 * best known one, by the program's call (SIGRTMIN: the candidate calls
 * k8slease_elector_handoff) or by the operator's request (the Lease's
 * annotation, k8slease_lease_handoff; the only way for a seed-ABI leader):
 * the invariants hold as ever, and the report says who led next and how
 * soon.
 *
 * Everything is bounded: each wait has a deadline, the run a time cap, and
 * every child is killed on exit (atexit, signals; the candidates also have
 * PR_SET_PDEATHSIG). Exit status: 0 all invariants held, 1 a violation,
 * 2 usage or set-up failure, 3 the backend is not available (not in this
 * build, or --backend envtest outside tests/integration/envtest.sh).
 */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "chaos.h"
#include "harness.h"
#include "k8slease.h"
#include "kubelet.h"
#include "observer.h"
#ifdef CHAOS_HAVE_ETCD
#include "etcd_harness.h"
#endif

#define MAX_CAND     5
#define LEASE_NAME   "chaos-lease"
#define LEASE_PREFIX "/apis/coordination.k8s.io"
#define RING_LINES   48

/* Online limits: ten times what is expected (see docs/chaos.md). */
#define HB_LIMIT_NS       (10 * CHAOS_NS_PER_S) /* heartbeats come every second */
#define CONT_LIMIT_NS     (10 * CHAOS_NS_PER_S) /* CONT is written at once */
#define EXIT_LIMIT_NS     (10 * CHAOS_NS_PER_S) /* a SIGKILLed process is reaped at once */
#define STEADY_LIMIT_NS   (30 * CHAOS_NS_PER_S) /* >> the recovery bound */
#define SHUTDOWN_LIMIT_NS (20 * CHAOS_NS_PER_S) /* release takes <= renew_deadline */
#define CTL_LIMIT_NS      (90 * CHAOS_NS_PER_S) /* envtest.sh's own waits end within 70 s */
#define ANSWER_LIMIT_NS   (60 * CHAOS_NS_PER_S) /* a real server answers within seconds */
#define PROBE_TIMEOUT_MS  1000                  /* one probe GET of the Lease */
#define THAW_LIMIT_NS     CHAOS_NS_PER_S        /* seed ABI: WaitLost after SIGCONT (a few ms) */
#define API_TIMEOUT_MS    10000                 /* one request of the simulated kubelet */
#define REPORT_MAX_MS     2000                  /* the kubelet reports a crash within this */
#define CRASH_ANNOTATION  "k8slease.io/holder-container"

typedef struct proc {
    char name[16];
    pid_t pid; /* -1: not running */
    int fd;    /* read end of its stdout, -1 when closed */
    char buf[4096];
    size_t len;
    int seed;       /* a program on the seed ABI (candidate.c --seed-abi) */
    chaos_timing t; /* its timings (a seed-ABI one's are whole seconds) */
    int efd;        /* seed ABI: read end of its stderr (the log lines), -1 none */
    char ebuf[4096];
    size_t elen;
    int timeouts;       /* seed ABI: WaitElected timeouts */
    int log_lines[4];   /* seed ABI: its log lines by level (error, warn, info, debug) */
    int64_t last_hb;    /* candidate time of its last line */
    int64_t restart_at; /* > 0: start it again then */
    int64_t sits_out;   /* after SIGUSR2 (release, freeze, handover): no campaign before this */
    int killed;         /* we sent SIGKILL */
    int quitting;       /* we sent SIGTERM (end of the run) */
    int bye;
    int frozen;    /* SIGSTOP sent, SIGCONT not yet */
    int stop_seen; /* waitpid reported it stopped */
    int64_t t_stopped, t_cont;
    int cont_pending;     /* a CONT line is due */
    int stop_term;        /* its open term when it was frozen, -1 none */
    int64_t lose_at;      /* driver time of a LOSE not yet followed by CAMPAIGN, 0 none */
    int64_t ending_since; /* candidate time of its first HB in state E, 0 none */
    int terms;
    int restarts;
    int64_t epoch; /* of its last LEAD / ELECTED */
    /* Crash failover: the Pod it runs in, as its kubelet knows it. */
    int pods;          /* Pods made for it so far: its Pod is chaos-RUN-NAME-<pods> */
    char pod[64];      /* name */
    char pod_uid[64];  /* metadata.uid */
    char cid[96];      /* containerID of the instance running now (or last) */
    int64_t started_s; /* its startedAt (wall seconds) */
    int64_t ended_s;   /* its finishedAt, once reported */
    int instances;     /* instances of container "main" in this Pod */
    char prev_cid[96]; /* the last terminated instance of this Pod ("" none) */
    int64_t prev_start_s, prev_end_s;
    int in_place; /* its next start: the kubelet restarts the container in place */
    /* Planned handoff (roles()): the elector options it runs with. */
    int known;            /* handoff_candidate: known to the leader's choice */
    int poll;             /* poll_only: client-go's rules, no watch */
    const char *revision; /* with known */
    int priority;
} proc;

typedef struct drv {
    int long_mode, etcd, ncand, verbose;
    int envtest;         /* --backend envtest: the real kube-apiserver of envtest.sh */
    int naive;           /* --naive-candidates: the mutant of candidate.c, must fail */
    int nseed;           /* the first nseed candidates are on the seed ABI */
    int naive_seed;      /* --naive-seed-abi: they are the seed-ABI mutant, must fail */
    chaos_timing seed_t; /* their timings, whole seconds */
    uint64_t seed, rng;
    chaos_timing t;
    int64_t allowance_ns, fault_phase_ns, time_cap_ns;
    int target_transitions;
    FILE *log;
    const char *cand_path;
    ts_server *ts;
#ifdef CHAOS_HAVE_ETCD
    eh_etcd *eh;
#endif
    char kubeconfig[1024];
    char endpoint[256];
    const char *ctl;        /* envtest: $K8SLEASE_ENVTEST_CTL */
    k8slease_client *probe; /* envtest: asks the server whether it answers again */
    pid_t ctl_pid;          /* envtest: a running ctl command, 0 none */
    /* envtest with replicas (an HA control plane: `ctl replicas` > 1), from
     * $K8SLEASE_ENVTEST_DIR/env: */
    int replicas;        /* kube-apiservers behind the balancer; 1: no balancer */
    int balance_first;   /* haproxy balance first: every connection on replica 1 */
    int64_t lb_check_ms; /* haproxy check interval and timeout */
    int64_t detect_ms;   /* the longest a hung replica stays up in haproxy: 4 x check */
    int64_t keep_ms;     /* a leader keeps its term if it is down within this */
    int ha_keep;         /* detect_ms <= keep_ms: a term lost to a replica hang is a violation */
    int ctl_status;      /* its wait status */
    proc p[MAX_CAND];
    const char *names[MAX_CAND];
    obs *o;
    int64_t t0;
    char ring[RING_LINES][200];
    int ringpos;
    int nfaults;
    int64_t last_fault_ns; /* the last fault's effects: end - start */
    int frozen_leaders, frozen_checked;
    int seed_thawed;              /* frozen seed-ABI leaders whose WaitLost was checked */
    int deals;                    /* faults dealt from the deck */
    int handovers, handovers_won; /* to a seed-ABI candidate, and those it won */
    int64_t lease_ms[MAX_CAND];   /* per candidate, for the observer */
    int64_t renew_ms[MAX_CAND];
    int64_t last_progress;
    /* Crash failover (the driver as the candidates' kubelet): */
    int crash;            /* on (Kubernetes backends, unless --no-crash-failover) */
    unsigned run_id;      /* in Pod names and containerIDs: unique per run */
    char ns[64];          /* the namespace of the Lease and the Pods */
    char api_ca[1024];    /* envtest: the kubeconfig's certificate-authority */
    char api_token[2048]; /* envtest: its token */
    CURL *curl;           /* envtest: the kubelet's connection */
    int records[3];       /* killed leaders: record of their instance read, none, unreadable */
    int kubelet_errors;   /* failed writes of the kubelet */
    /* Planned handoff (f_handoff): */
    char peers[256];              /* --peers of every candidate: the names, in order */
    k8slease_client *ho_client;   /* the operator's requests */
    int ho_named, ho_best;        /* handoffs dealt, to a named candidate or the best */
    int ho_request;               /* of which by the operator's request (else the call) */
    int ho_native_turn;           /* handoffs of a native leader so far */
    int ho_named_won;             /* named: the successor led next */
    int ho_best_known;            /* best: a known candidate led next */
    int ho_calls, ho_call_max_ms; /* HANDOFF lines: the calls, the longest */
    int ho_next;                  /* handoffs followed by a term within STEADY_LIMIT_NS */
    int64_t ho_next_ns[512];      /* handoff to the next term's start (its LEAD lower bound) */
} drv;

static drv *the_drv;
static int sig_pipe[2] = {-1, -1};
static volatile sig_atomic_t interrupted;

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));

    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi]. */
static int64_t rnd(drv *d, int64_t lo, int64_t hi)
{
    return hi <= lo ? lo : lo + (int64_t)(splitmix64(&d->rng) % (uint64_t)(hi - lo + 1));
}

static const char *backend_name(const drv *d)
{
    return d->etcd ? "etcd" : d->envtest ? "envtest" : "k8s";
}

static double rel_s(const drv *d, int64_t t)
{
    return (double)(t - d->t0) / CHAOS_NS_PER_S;
}

static int64_t ms(int64_t v)
{
    return v * CHAOS_NS_PER_MS;
}

/* Remember a line for the failure report, and log it. */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
record(drv *d, const char *fmt, ...)
{
    char line[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    memcpy(d->ring[d->ringpos++ % RING_LINES], line, sizeof(line));
    if (d->log)
        fprintf(d->log, "%.6f %s\n", rel_s(d, chaos_now_ns()), line);
}

/* A line for stdout (and the record). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void
say(drv *d, const char *fmt, ...)
{
    char line[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    printf("+%8.3f s  %s\n", rel_s(d, chaos_now_ns()), line);
    fflush(stdout);
    record(d, "%s", line);
}

static void on_signal(int sig)
{
    int saved = errno;

    if (sig == SIGCHLD) {
        if (sig_pipe[1] >= 0 && write(sig_pipe[1], "c", 1) < 0) {
            /* full: a wake-up is pending anyway */
        }
    } else {
        interrupted = sig;
        if (sig_pipe[1] >= 0 && write(sig_pipe[1], "i", 1) < 0) {
        }
    }
    errno = saved;
}

/* Kill every child still running; also from atexit. */
static void kill_children(void)
{
    drv *d = the_drv;

    if (!d)
        return;
    for (int i = 0; i < d->ncand; i++)
        if (d->p[i].pid > 0) {
            kill(d->p[i].pid, SIGKILL);
            kill(d->p[i].pid, SIGCONT);
            waitpid(d->p[i].pid, NULL, 0);
            d->p[i].pid = -1;
        }
    if (d->ctl_pid > 0) {
        kill(d->ctl_pid, SIGKILL);
        waitpid(d->ctl_pid, NULL, 0);
        d->ctl_pid = 0;
    }
    if (d->ts) {
        ts_stop(d->ts);
        d->ts = NULL;
    }
#ifdef CHAOS_HAVE_ETCD
    if (d->eh) {
        eh_stop(d->eh);
        d->eh = NULL;
    }
#endif
}

/* ------------------------------------------------------------------------ */
/* The simulated kubelet (crash failover)                                   */
/* ------------------------------------------------------------------------ */

/* One request to the API server (not the test server's control API): on
 * the test server with the harness, on a real one with the kubeconfig's
 * CA and token. body: JSON (a merge patch for PATCH). 0 with *status (and
 * *resp, malloc'ed, when not NULL), or -1 on a transport error. */
static int api(drv *d, const char *method, const char *path, const char *body, long *status,
               char **resp)
{
    struct curl_slist *h = NULL;
    ts_buf out = {NULL, 0};
    char url[1400], auth[2100];
    CURLcode cc;

    *status = 0;
    if (resp)
        *resp = NULL;
    if (d->ts)
        return ts_request(d->ts, method, path,
                          body && !strcmp(method, "PATCH") ? "application/merge-patch+json" : NULL,
                          body, status, resp);
    if (!d->curl && !(d->curl = curl_easy_init()))
        return -1;
    curl_easy_reset(d->curl);
    snprintf(url, sizeof(url), "%s%s", d->endpoint, path);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", d->api_token);
    h = curl_slist_append(h, auth);
    h = curl_slist_append(h, "Accept: application/json");
    if (body) {
        h = curl_slist_append(h, strcmp(method, "PATCH")
                                     ? "Content-Type: application/json"
                                     : "Content-Type: application/merge-patch+json");
        curl_easy_setopt(d->curl, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(d->curl, CURLOPT_URL, url);
    curl_easy_setopt(d->curl, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(d->curl, CURLOPT_CAINFO, d->api_ca);
    curl_easy_setopt(d->curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(d->curl, CURLOPT_USERAGENT, CHAOS_UA_PREFIX "kubelet");
    curl_easy_setopt(d->curl, CURLOPT_TIMEOUT_MS, (long)API_TIMEOUT_MS);
    curl_easy_setopt(d->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(d->curl, CURLOPT_WRITEFUNCTION, ts_buf_write);
    curl_easy_setopt(d->curl, CURLOPT_WRITEDATA, &out);
    cc = curl_easy_perform(d->curl);
    curl_slist_free_all(h);
    memset(auth, 0, sizeof(auth));
    if (cc != CURLE_OK) {
        free(out.data);
        return -1;
    }
    curl_easy_getinfo(d->curl, CURLINFO_RESPONSE_CODE, status);
    if (resp)
        *resp = out.data ? out.data : strdup("");
    else
        free(out.data);
    return 0;
}

/* envtest: the CA file and token of the kubeconfig envtest.sh writes
 * ("certificate-authority: FILE", "token: TOKEN"). 0 or -1. */
static int api_setup(drv *d)
{
    FILE *f = fopen(d->kubeconfig, "r");
    char line[2200];

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        char *v, *k = line + strspn(line, " \t");

        line[strcspn(line, "\r\n")] = '\0';
        if (!(v = strchr(k, ':')))
            continue;
        *v++ = '\0';
        v += strspn(v, " \t");
        if (!strcmp(k, "certificate-authority"))
            snprintf(d->api_ca, sizeof(d->api_ca), "%s", v);
        else if (!strcmp(k, "token"))
            snprintf(d->api_token, sizeof(d->api_token), "%s", v);
    }
    fclose(f);
    return d->api_ca[0] && d->api_token[0] ? 0 : -1;
}

/* A terminated instance's JSON ({"terminated":{...}}): SIGKILL. */
static void terminated_json(char *buf, size_t len, const char *cid, int64_t started_s,
                            int64_t finished_s)
{
    kubelet_json_terminated(buf, len, cid, 137, "Error", started_s, finished_s);
}

/* The kubelet's write of the status of container "main" of p's Pod. */
static int kubelet_status(drv *d, proc *p, const char *state, const char *last_state)
{
    char path[256], body[2048], *resp = NULL;
    long status = 0;
    int rc;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s/status", d->ns, p->pod);
    kubelet_json_status(body, sizeof(body), p->cid, p->instances - 1, state, last_state);
    rc = api(d, "PATCH", path, body, &status, &resp);
    if (rc < 0 || status != 200) {
        d->kubelet_errors++;
        obs_violation(d->o, chaos_now_ns(), "driver: kubelet: PATCH %s: %ld %.120s", path, status,
                      resp ? resp : "no answer");
        rc = -1;
    }
    free(resp);
    return rc;
}

/* Before candidate i starts: its Pod (a new one, or its own again when the
 * kubelet restarts the container in place) with a new instance of
 * container "main" running, started (whole seconds) before the process. */
static void kubelet_start(drv *d, int i)
{
    proc *p = &d->p[i];
    char state[128], last[512] = "{}";
    int64_t now_s = (int64_t)time(NULL);

    if (!p->in_place || !p->pods) {
        char path[128], body[512], *resp = NULL;
        const char *uid;
        long status = 0;
        json_t *root;

        p->pods++;
        p->instances = 0;
        p->prev_cid[0] = '\0';
        {
            char name[sizeof(p->pod)]; /* gcc: p->name and p->pod are fields of one object */

            snprintf(name, sizeof(name), "chaos-%06x-%s-%d", d->run_id, p->name, p->pods);
            memcpy(p->pod, name, sizeof(name));
        }
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", d->ns);
        kubelet_json_pod(body, sizeof(body), p->pod);
        if (api(d, "POST", path, body, &status, &resp) < 0 || status != 201) {
            d->kubelet_errors++;
            obs_violation(d->o, chaos_now_ns(), "driver: kubelet: cannot create pod %s: %ld %.120s",
                          p->pod, status, resp ? resp : "no answer");
            free(resp);
            return;
        }
        root = json_loads(resp, 0, NULL);
        uid = json_string_value(json_object_get(json_object_get(root, "metadata"), "uid"));
        snprintf(p->pod_uid, sizeof(p->pod_uid), "%s", uid ? uid : "");
        json_decref(root);
        free(resp);
    } else {
        /* Restarted in place: the instance that ended is lastState. */
        memcpy(p->prev_cid, p->cid, sizeof(p->prev_cid));
        p->prev_start_s = p->started_s;
        p->prev_end_s = p->ended_s;
        terminated_json(last, sizeof(last), p->prev_cid, p->prev_start_s, p->prev_end_s);
    }
    p->in_place = 0;
    p->instances++;
    snprintf(p->cid, sizeof(p->cid), "containerd://%06x%04x%04x%04x%046d", d->run_id,
             (unsigned)(p - d->p), (unsigned)p->pods, (unsigned)p->instances, 0);
    p->started_s = now_s;
    kubelet_json_running(state, sizeof(state), now_s);
    kubelet_status(d, p, state, last);
}

/* The kubelet reports p's instance terminated at wall second finished_s;
 * lastState keeps the instance before it, if any. 0 or -1. */
static int kubelet_terminated(drv *d, proc *p, int64_t finished_s)
{
    char state[512], last[512] = "{}";

    if (p->prev_cid[0])
        terminated_json(last, sizeof(last), p->prev_cid, p->prev_start_s, p->prev_end_s);
    terminated_json(state, sizeof(state), p->cid, p->started_s, finished_s);
    p->ended_s = finished_s;
    return kubelet_status(d, p, state, last);
}

/* A MicroTime ("2026-12-02T08:05:53.508569Z", fraction optional) in
 * nanoseconds of the wall clock; 0 if it is not one. */
static int64_t wall_ns_of(const char *s)
{
    struct tm tm;
    const char *rest;
    int64_t ns = 0, scale = CHAOS_NS_PER_S;

    memset(&tm, 0, sizeof(tm));
    if (!s || !(rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
        return 0;
    if (*rest == '.')
        for (rest++; *rest >= '0' && *rest <= '9'; rest++)
            if (scale > 1)
                ns += (*rest - '0') * (scale /= 10);
    return *rest == 'Z' ? (int64_t)timegm(&tm) * CHAOS_NS_PER_S + ns : 0;
}

/* The killed leader i's crash failover record in the Lease
 * (docs/semantics.md): 1 when the record of its current term names its
 * instance (*verified_s: its verifiedAt), 0 when there is none of this
 * term (the leader had not written it yet), -1 when the Lease could not
 * be read. A record of this term naming another Pod or instance is a
 * violation: the kubelet knows which instance the leader runs in.
 * *t_expiry: when i holds the Lease, the earliest it can expire for
 * anyone, on the monotonic clock: its renewTime + leaseDurationSeconds
 * (a follower counts from when it saw that renewal, after it began; a
 * renewal after this read only makes it later); else 0. */
static int leader_record(drv *d, int i, int64_t *verified_s, int64_t *t_expiry)
{
    proc *p = &d->p[i];
    char path[256], *resp = NULL;
    long status = 0;
    json_t *root, *rec = NULL, *v;
    const char *holder, *pod, *uid, *cid, *at;
    struct tm tm;
    int rc = -1;

    snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/" LEASE_NAME,
             d->ns);
    if (api(d, "GET", path, NULL, &status, &resp) < 0 || status != 200) {
        free(resp);
        return -1;
    }
    root = json_loads(resp, 0, NULL);
    free(resp);
    {
        json_t *spec = json_object_get(root, "spec");
        const char *who = json_string_value(json_object_get(spec, "holderIdentity"));
        int64_t renew = wall_ns_of(json_string_value(json_object_get(spec, "renewTime")));
        int64_t lds = json_integer_value(json_object_get(spec, "leaseDurationSeconds"));
        struct timespec wall;

        clock_gettime(CLOCK_REALTIME, &wall);
        *t_expiry = 0;
        if (who && !strcmp(who, p->name) && renew && lds > 0)
            *t_expiry = chaos_now_ns() + renew + lds * CHAOS_NS_PER_S -
                        ((int64_t)wall.tv_sec * CHAOS_NS_PER_S + wall.tv_nsec);
    }
    v = json_object_get(json_object_get(json_object_get(root, "metadata"), "annotations"),
                        CRASH_ANNOTATION);
    if (json_is_string(v))
        rec = json_loads(json_string_value(v), 0, NULL);
    holder = json_string_value(json_object_get(rec, "holder"));
    pod = json_string_value(json_object_get(rec, "pod"));
    uid = json_string_value(json_object_get(rec, "podUID"));
    cid = json_string_value(json_object_get(rec, "containerID"));
    at = json_string_value(json_object_get(rec, "verifiedAt"));
    memset(&tm, 0, sizeof(tm));
    if (!holder || strcmp(holder, p->name) ||
        json_integer_value(json_object_get(rec, "epoch")) != p->epoch) {
        rc = 0; /* none, or a previous term's */
    } else if (!pod || !uid || !cid || !at || !strptime(at, "%Y-%m-%dT%H:%M:%SZ", &tm)) {
        obs_violation(d->o, chaos_now_ns(), "%s: its crash failover record is incomplete: %s",
                      p->name, json_string_value(v));
        rc = 0;
    } else if (strcmp(pod, p->pod) || strcmp(uid, p->pod_uid) || strcmp(cid, p->cid)) {
        obs_violation(d->o, chaos_now_ns(),
                      "%s: its crash failover record (epoch %" PRId64 ") names pod %s (%s), "
                      "instance %s; it runs in pod %s (%s), instance %s",
                      p->name, p->epoch, pod, uid, cid, p->pod, p->pod_uid, p->cid);
        rc = 0;
    } else {
        *verified_s = (int64_t)timegm(&tm);
        rc = 1;
    }
    json_decref(rec);
    json_decref(root); /* after v, its borrowed value */
    return rc;
}

/* End of the run on a real server: the Pods go (the test server goes
 * whole). Best effort. */
static void kubelet_cleanup(drv *d)
{
    for (int i = 0; d->crash && !d->ts && i < d->ncand; i++)
        for (int n = 1; n <= d->p[i].pods; n++) {
            char path[256];
            long status = 0;

            snprintf(path, sizeof(path),
                     "/api/v1/namespaces/%s/pods/chaos-%06x-%s-%d?gracePeriodSeconds=0", d->ns,
                     d->run_id, d->p[i].name, n);
            api(d, "DELETE", path, NULL, &status, NULL);
        }
}

/* ------------------------------------------------------------------------ */
/* Candidates                                                               */
/* ------------------------------------------------------------------------ */

static int spawn(drv *d, int i)
{
    proc *p = &d->p[i];
    char timing[96];
    const char *argv[40];
    int fds[2], efds[2] = {-1, -1}, n = 0;
    pid_t pid;

    snprintf(timing, sizeof(timing), "%" PRId64 "/%" PRId64 "/%" PRId64, p->t.lease_duration_ms,
             p->t.renew_deadline_ms, p->t.retry_period_ms);
    argv[n++] = d->cand_path;
    argv[n++] = "--name";
    argv[n++] = p->name;
    argv[n++] = "--lease";
    argv[n++] = LEASE_NAME;
    argv[n++] = "--timing";
    argv[n++] = timing;
    argv[n++] = d->etcd ? "--etcd-endpoints" : "--kubeconfig";
    argv[n++] = d->etcd ? d->endpoint : d->kubeconfig;
    if (p->seed) {
        argv[n++] = "--seed-abi";
        argv[n++] = "1";
    }
    if (p->seed ? d->naive_seed : d->naive) {
        argv[n++] = "--naive";
        argv[n++] = "1";
    }
    if (p->known) {
        static char prio[MAX_CAND][16];

        snprintf(prio[i], sizeof(prio[i]), "%d", p->priority);
        argv[n++] = "--handoff-candidate";
        argv[n++] = "1";
        argv[n++] = "--revision";
        argv[n++] = p->revision;
        argv[n++] = "--priority";
        argv[n++] = prio[i];
    }
    if (p->poll) {
        argv[n++] = "--poll-only";
        argv[n++] = "1";
    }
    if (!d->etcd && !p->seed) {
        argv[n++] = "--peers";
        argv[n++] = d->peers;
    }
    if (d->crash) {
        /* As its kubelet: its Pod and container instance first. */
        kubelet_start(d, i);
        argv[n++] = "--pod";
        argv[n++] = p->pod;
        argv[n++] = "--pod-namespace";
        argv[n++] = d->ns;
    }
    argv[n] = NULL;
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    /* The seed ABI prints its log lines on stderr: to the log file. */
    if (p->seed && pipe2(efds, O_CLOEXEC) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    if (d->log)
        fflush(d->log);
    pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        if (efds[0] >= 0) {
            close(efds[0]);
            close(efds[1]);
        }
        return -1;
    }
    if (pid == 0) {
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        dup2(fds[1], STDOUT_FILENO);
        if (efds[1] >= 0)
            dup2(efds[1], STDERR_FILENO);
        execv(d->cand_path, (char *const *)argv);
        fprintf(stderr, "k8slease-chaos: cannot run %s: %s\n", d->cand_path, strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    if (efds[0] >= 0) {
        close(efds[1]);
        fcntl(efds[0], F_SETFL, fcntl(efds[0], F_GETFL) | O_NONBLOCK);
    }
    p->pid = pid;
    p->fd = fds[0];
    p->len = 0;
    p->efd = efds[0];
    p->elen = 0;
    p->last_hb = chaos_now_ns();
    p->restart_at = 0;
    p->killed = p->quitting = p->bye = p->frozen = p->stop_seen = p->cont_pending = 0;
    p->stop_term = -1;
    p->lose_at = 0;
    p->ending_since = 0;
    return 0;
}

static void on_line(drv *d, int i, char *line)
{
    proc *p = &d->p[i];
    char name[32], ev[16];
    int64_t ns, a = 0, b = 0, c = 0;
    int off = 0;
    char word[32] = "";

    if (strstr(line, " HB ")) {
        if (d->log) /* heartbeats only in the log file, not in the ring */
            fprintf(d->log, "%.6f %s\n", rel_s(d, chaos_now_ns()), line);
    } else {
        record(d, "%s", line);
    }
    if (d->verbose) {
        printf("           %s\n", line);
        fflush(stdout);
    }
    if (sscanf(line, "%31s %" SCNd64 " %15s %n", name, &ns, ev, &off) < 3 ||
        strcmp(name, p->name)) {
        obs_violation(d->o, chaos_now_ns(), "%s: unreadable line \"%s\"", p->name, line);
        return;
    }
    p->last_hb = ns;
    if (!strcmp(ev, "CAMPAIGN")) {
        p->lose_at = 0;
    } else if (!strcmp(ev, "LEAD") && sscanf(line + off, "%" SCNd64 " %" SCNd64, &a, &b) == 2) {
        obs_lead(d->o, i, a, ns, b);
        p->terms++;
        p->epoch = a;
    } else if (p->seed && !strcmp(ev, "ELECTED") && sscanf(line + off, "%" SCNd64, &a) == 1) {
        obs_seed_lead(d->o, i, a, ns);
        p->terms++;
        p->epoch = a;
    } else if (p->seed && !strcmp(ev, "LOST") &&
               sscanf(line + off, "%" SCNd64 " %31s %" SCNd64, &a, word, &c) == 3) {
        int term = obs_open_term(d->o, i), frozen = term >= 0 && term == p->stop_term && p->t_cont;

        /* A term open when the process was frozen ends, for the checks,
         * when it was seen stopped; its WaitLost must return within
         * THAW_LIMIT_NS of SIGCONT (obs_seed_lose). */
        obs_seed_lose(d->o, i, a, ns, !strcmp(word, "cancel") ? c : 0, frozen ? p->t_stopped : 0,
                      frozen ? p->t_cont : 0);
        if (frozen && ns >= p->t_cont)
            d->seed_thawed++;
        if (!p->quitting)
            p->lose_at = chaos_now_ns();
    } else if (p->seed && !strcmp(ev, "TIMEOUT")) {
        p->timeouts++;
    } else if (!p->seed && !strcmp(ev, "LOSE") &&
               sscanf(line + off, "%" SCNd64 " %" SCNd64 " %31s %" SCNd64, &a, &b, word, &c) == 4) {
        int term = obs_open_term(d->o, i);

        obs_lose(d->o, i, a, ns, b, !strcmp(word, "deadline"));
        p->ending_since = 0;
        if (!p->quitting)
            p->lose_at = chaos_now_ns();
        /* A term that was open when the process was frozen for longer
         * than lease_duration must have ended while it was frozen. */
        if (term >= 0 && term == p->stop_term && p->t_cont && ns >= p->t_cont)
            obs_violation(d->o, ns,
                          "%s: its term of epoch %" PRId64 " outlived a freeze of %.3f s "
                          "(ended +%.3f s, SIGCONT at +%.3f s)",
                          p->name, a, (double)(p->t_cont - p->t_stopped) / CHAOS_NS_PER_S,
                          rel_s(d, ns), rel_s(d, p->t_cont));
    } else if (!strcmp(ev, "HB") && sscanf(line + off, "%31s", word) == 1) {
        /* E: leadership gone, elector not over yet; it ends within
         * renew_deadline (the release's deadline). */
        if (word[0] != 'E')
            p->ending_since = 0;
        else if (!p->ending_since)
            p->ending_since = ns;
        else if (ns - p->ending_since > 10 * ms(d->t.renew_deadline_ms)) {
            obs_violation(d->o, ns, "%s: stuck: its elector has not ended %.1f s after its term",
                          p->name, (double)(ns - p->ending_since) / CHAOS_NS_PER_S);
            p->ending_since = ns;
        }
    } else if (!strcmp(ev, "CONT") && sscanf(line + off, "%" SCNd64, &a) == 1) {
        if (p->cont_pending) {
            p->cont_pending = 0;
            /* A seed-ABI program has no is_leader: what it believes at
             * SIGCONT is information; its WaitLost is checked instead. */
            if (!p->seed)
                d->frozen_checked++;
            if (a && !p->seed)
                obs_violation(d->o, ns,
                              "%s: woke up from a freeze of %.3f s believing it is leader", p->name,
                              (double)(p->t_cont - p->t_stopped) / CHAOS_NS_PER_S);
        }
    } else if (!p->seed && !strcmp(ev, "HANDOFF") &&
               sscanf(line + off, "%31s %" SCNd64, word, &a) == 2) {
        d->ho_calls++;
        if (a > d->ho_call_max_ms)
            d->ho_call_max_ms = (int)a;
    } else if (!strcmp(ev, "BYE")) {
        p->bye = 1;
    } else if (!strcmp(ev, "ERR")) {
        obs_violation(d->o, ns, "%s: %s", p->name, line + off);
    } else {
        obs_violation(d->o, ns, "%s: unknown line \"%s\"", p->name, line);
    }
}

static void err_line(drv *d, int i, const char *line);

/* Read what candidate i wrote on one of its pipes (stdout: its events,
 * on_line; stderr: the seed ABI's log lines, err_line) and hand over each
 * whole line; close the pipe at EOF. A last stderr line without its
 * newline still counts, and an over-long one is passed on; on stdout
 * either is a violation of the protocol (chaos.h). */
static void drain_pipe(drv *d, int i, int *fd, char *buf, size_t size, size_t *len, int err)
{
    proc *p = &d->p[i];

    while (*fd >= 0) {
        ssize_t n = read(*fd, buf + *len, size - 1 - *len);
        char *nl, *start;

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            if (err && *len) {
                buf[*len] = '\0';
                err_line(d, i, buf);
            }
            *len = 0;
            close(*fd);
            *fd = -1;
            return;
        }
        *len += (size_t)n;
        buf[*len] = '\0';
        start = buf;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            if (err)
                err_line(d, i, start);
            else
                on_line(d, i, start);
            start = nl + 1;
        }
        *len -= (size_t)(start - buf);
        memmove(buf, start, *len);
        if (*len == size - 1) {
            if (err)
                err_line(d, i, buf);
            else
                obs_violation(d->o, chaos_now_ns(), "%s: line too long", p->name);
            *len = 0;
        }
    }
}

static void drain(drv *d, int i)
{
    proc *p = &d->p[i];

    drain_pipe(d, i, &p->fd, p->buf, sizeof(p->buf), &p->len, 0);
}

/* A seed-ABI candidate's stderr: its log lines go to the log file (the
 * warnings and errors to the failure report's record too); anything else
 * (a sanitizer's report, a crash) to our stderr. "lost leadership (epoch
 * N): WHY" and "stopped leading (epoch N): WHY" (a handoff) tell the
 * observer why the library ended term N. */
static void err_line(drv *d, int i, const char *line)
{
    static const char *const levels[] = {"error ", "warn ", "info ", "debug "};
    proc *p = &d->p[i];
    const char *lost = strstr(line, ": lost leadership (epoch "), *tag = strstr(line, " k8slease[");
    long long epoch;
    int n = 0, level = -1;

    if (!tag || !(tag = strstr(tag, "] "))) {
        fprintf(stderr, "%s: %s\n", p->name, line);
        record(d, "%s stderr: %s", p->name, line);
        return;
    }
    /* "TIME k8slease[PID] LEVEL NS/NAME: MESSAGE" */
    for (int k = 0; k < 4 && level < 0; k++)
        if (!strncmp(tag + 2, levels[k], strlen(levels[k])))
            level = k;
    if (level >= 0)
        p->log_lines[level]++;
    if (d->log) /* whole, where the record would cut it */
        fprintf(d->log, "%.6f %s log: %s\n", rel_s(d, chaos_now_ns()), p->name, line);
    if (level >= 0 && level <= 1) { /* the failure report's record, not the log again */
        FILE *log = d->log;

        d->log = NULL;
        record(d, "%s log: %s", p->name, line);
        d->log = log;
    }
    if (!lost) /* a handoff asked on the Lease: "stopped leading (epoch N): WHY" */
        lost = strstr(line, ": stopped leading (epoch ");
    if (lost &&
        (sscanf(lost, ": lost leadership (epoch %lld):%n", &epoch, &n) == 1 ||
         sscanf(lost, ": stopped leading (epoch %lld):%n", &epoch, &n) == 1) &&
        n > 0)
        obs_seed_why(d->o, i, epoch, lost + n + (lost[n] == ' '));
}

static void drain_err(drv *d, int i)
{
    proc *p = &d->p[i];

    drain_pipe(d, i, &p->efd, p->ebuf, sizeof(p->ebuf), &p->elen, 1);
}

static void reap(drv *d)
{
    for (int i = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];
        pid_t r;
        int st;

        while (p->pid > 0 && (r = waitpid(p->pid, &st, WNOHANG | WUNTRACED | WCONTINUED)) != 0) {
            int64_t now = chaos_now_ns();

            if (r < 0) {
                if (errno == EINTR)
                    continue;
                obs_violation(d->o, now, "%s: waitpid: %s", p->name, strerror(errno));
                p->pid = -1;
                break;
            }
            if (WIFSTOPPED(st)) {
                p->stop_seen = 1;
                p->t_stopped = now;
                continue;
            }
            if (WIFCONTINUED(st))
                continue;
            /* Gone: read what it wrote, then end its open term now. */
            p->pid = -1;
            drain(d, i);
            drain_err(d, i);
            if (p->fd >= 0) {
                close(p->fd);
                p->fd = -1;
            }
            if (p->efd >= 0) {
                close(p->efd);
                p->efd = -1;
            }
            obs_dead(d->o, i, now);
            p->lose_at = 0;
            if (p->killed)
                break;
            if (!p->quitting || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || !p->bye) {
                obs_violation(d->o, now, "%s exited unexpectedly (%s %d)", p->name,
                              WIFEXITED(st) ? "status" : "signal",
                              WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
                if (!p->quitting)
                    p->restart_at = now + CHAOS_NS_PER_S; /* keep the run going */
            }
            break;
        }
    }
}

/* The candidate leading now: an open term, running, not frozen; -1 none. */
static int leader(const drv *d)
{
    int best = -1;
    int64_t best_lead = INT64_MIN;

    for (int i = 0; i < d->ncand; i++) {
        int t = obs_open_term(d->o, i);

        if (t >= 0 && d->p[i].pid > 0 && !d->p[i].frozen && obs_term_lead(d->o, t) > best_lead) {
            best = i;
            best_lead = obs_term_lead(d->o, t);
        }
    }
    return best;
}

static void online_checks(drv *d)
{
    int64_t now = chaos_now_ns();

    for (int i = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];

        if (p->pid < 0 && p->restart_at && now >= p->restart_at) {
            p->restarts++;
            if (spawn(d, i) < 0) {
                obs_violation(d->o, now, "%s: cannot restart: %s", p->name, strerror(errno));
                p->restart_at = now + CHAOS_NS_PER_S;
            } else {
                say(d, "restarted %s (pid %d)", p->name, (int)p->pid);
            }
            continue;
        }
        if (p->pid < 0 || p->frozen || p->quitting)
            continue;
        if (now - p->last_hb > HB_LIMIT_NS) {
            obs_violation(d->o, now, "%s: stuck: nothing for %.1f s (heartbeats every 1 s)",
                          p->name, (double)(now - p->last_hb) / CHAOS_NS_PER_S);
            p->last_hb = now;
        }
        if (p->lose_at && now - p->lose_at > 10 * ms(d->t.renew_deadline_ms)) {
            obs_violation(d->o, now, "%s: stuck: no new campaign %.1f s after its term ended",
                          p->name, (double)(now - p->lose_at) / CHAOS_NS_PER_S);
            p->lose_at = 0;
        }
        if (p->cont_pending && now - p->t_cont > CONT_LIMIT_NS) {
            obs_violation(d->o, now, "%s: no CONT line %.1f s after SIGCONT", p->name,
                          (double)(now - p->t_cont) / CHAOS_NS_PER_S);
            p->cont_pending = 0;
        }
    }
}

typedef int (*pred_fn)(drv *d, int arg);

/* Run the event loop (candidate lines, exits, restarts, checks) until
 * pred(d, arg) holds (1) or `until` passes (0; with pred NULL: 1). */
static int pump_until(drv *d, pred_fn pred, int arg, int64_t until)
{
    for (;;) {
        struct pollfd pfd[2 * MAX_CAND + 1];
        int nfd = 0, idx[2 * MAX_CAND + 1];
        int64_t now, left;
        char junk[64];

        if (interrupted) {
            fprintf(stderr, "k8slease-chaos: interrupted by signal %d; killing the children\n",
                    (int)interrupted);
            exit(2); /* atexit: kill_children */
        }
        if (pred && pred(d, arg))
            return 1;
        now = chaos_now_ns();
        if (now >= until)
            return pred ? 0 : 1;
        pfd[nfd].fd = sig_pipe[0];
        pfd[nfd].events = POLLIN;
        idx[nfd++] = -1;
        for (int i = 0; i < d->ncand; i++) {
            if (d->p[i].fd >= 0) {
                pfd[nfd].fd = d->p[i].fd;
                pfd[nfd].events = POLLIN;
                idx[nfd++] = i;
            }
            if (d->p[i].efd >= 0) { /* its stderr: index ncand + i */
                pfd[nfd].fd = d->p[i].efd;
                pfd[nfd].events = POLLIN;
                idx[nfd++] = d->ncand + i;
            }
        }
        left = (until - now + CHAOS_NS_PER_MS - 1) / CHAOS_NS_PER_MS;
        /* Also wakes up for restarts and the online checks. */
        if (poll(pfd, (nfds_t)nfd, (int)(left < 100 ? left : 100)) < 0 && errno != EINTR) {
            perror("k8slease-chaos: poll");
            exit(2);
        }
        while (read(sig_pipe[0], junk, sizeof(junk)) > 0)
            ;
        for (int k = 1; k < nfd; k++)
            if (pfd[k].revents && idx[k] < d->ncand)
                drain(d, idx[k]);
            else if (pfd[k].revents)
                drain_err(d, idx[k] - d->ncand);
        reap(d);
        online_checks(d);
    }
}

static void pump(drv *d, int64_t until)
{
    pump_until(d, NULL, 0, until);
}

static int p_steady(drv *d, int arg)
{
    (void)arg;
    for (int i = 0; i < d->ncand; i++)
        if (d->p[i].pid < 0 || d->p[i].frozen)
            return 0;
    return leader(d) >= 0;
}

static int p_reaped(drv *d, int i)
{
    return d->p[i].pid < 0;
}

static int p_stopped(drv *d, int i)
{
    return d->p[i].stop_seen || d->p[i].pid < 0;
}

static int p_cont_done(drv *d, int i)
{
    return !d->p[i].cont_pending;
}

static int p_term_closed(drv *d, int term)
{
    return obs_term_closed(d->o, term);
}

static int p_all_stopped(drv *d, int arg)
{
    (void)arg;
    for (int i = 0; i < d->ncand; i++)
        if (d->p[i].frozen && !d->p[i].stop_seen && d->p[i].pid > 0)
            return 0;
    return 1;
}

static int p_seed_leads(drv *d, int arg)
{
    int l = leader(d);

    (void)arg;
    return l >= 0 && d->p[l].seed;
}

static int p_all_gone(drv *d, int arg)
{
    (void)arg;
    for (int i = 0; i < d->ncand; i++)
        if (d->p[i].pid > 0)
            return 0;
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Faults                                                                   */
/* ------------------------------------------------------------------------ */

/* A control call to the test server; a failure is the driver's violation. */
static int control(drv *d, const char *method, const char *path, const char *body, long expect)
{
    long status = 0;
    char *resp = NULL;
    int rc = ts_control(d->ts, method, path, body, &status, &resp);

    if (rc < 0 || status != expect) {
        obs_violation(d->o, chaos_now_ns(), "driver: %s %s answered %ld (%s)", method, path, status,
                      resp ? resp : "no answer");
        rc = -1;
    }
    free(resp);
    return rc;
}

static void fault_done(drv *d, chaos_fault_kind k, int64_t start, int64_t end, int blocking)
{
    obs_fault(d->o, k, start, end, blocking);
    d->last_fault_ns = end - start;
    d->nfaults++;
}

/* A running candidate other than `not`, on the native API: a seed-ABI one
 * cannot be given a user agent of its own, so no fault rule targets it. */
static int random_other(drv *d, int not )
{
    int cand[MAX_CAND], n = 0;

    for (int i = 0; i < d->ncand; i++)
        if (i != not &&d->p[i].pid > 0 && !d->p[i].frozen && !d->p[i].seed)
            cand[n++] = i;
    return n ? cand[rnd(d, 0, n - 1)] : -1;
}

/* Crash failover: before a crash, read the leader's record in the Lease
 * (leader_record) and count what it was. */
static int crash_record(drv *d, int l, int64_t *verified_s, int64_t *t_expiry)
{
    int rec = leader_record(d, l, verified_s, t_expiry);

    d->records[rec == 1 ? 0 : rec == 0 ? 1 : 2]++;
    return rec;
}

/* SIGKILL the leader; restart it after 0-2 x lease_duration. With crash
 * failover, a crash its kubelet never reports (a node down): the restart
 * is its replacement, a new Pod, which comes after the Lease expired
 * (lease_duration + retry_period + 0-1 x lease_duration): a restart before
 * would take the Lease its identity still holds back at once, and the
 * failover without a report, by expiry, would not show. */
static void f_kill(drv *d, int l)
{
    proc *p = &d->p[l];
    int64_t t, delay = rnd(d, 0, 2 * d->t.lease_duration_ms), verified_s = 0, t_expiry = 0;

    if (d->crash) {
        delay = p->t.lease_duration_ms + p->t.retry_period_ms + rnd(d, 0, d->t.lease_duration_ms);
        crash_record(d, l, &verified_s, &t_expiry);
    }
    t = chaos_now_ns();
    p->killed = 1;
    kill(p->pid, SIGKILL);
    if (!pump_until(d, p_reaped, l, t + EXIT_LIMIT_NS))
        obs_violation(d->o, chaos_now_ns(), "%s: not gone %.0f s after SIGKILL", p->name,
                      (double)EXIT_LIMIT_NS / CHAOS_NS_PER_S);
    p->restart_at = chaos_now_ns() + ms(delay);
    p->in_place = 0;
    fault_done(d, CF_KILL, t, t, 0);
    if (d->crash)
        obs_crash(d->o, CF_KILL, l, t, t_expiry, 0, 0);
    say(d, "fault kill: SIGKILL %s (leader), restart in %.3f s%s", p->name, (double)delay / 1000,
        d->crash ? " in a new pod (no report: its node down)" : "");
}

/* Crash failover: SIGKILL the leader; its kubelet reports the container
 * instance terminated (finishedAt: the second of the report) after 0-2 s,
 * and restarts it in place 0-2 x lease_duration later (a new containerID,
 * the old one in lastState). The report is evidence for the leader's
 * record if the record names that instance and finishedAt is in a later
 * second than its verifiedAt (docs/semantics.md). */
static void f_crash(drv *d, int l)
{
    proc *p = &d->p[l];
    int64_t t, t_report, verified_s = 0, finished_s, t_expiry = 0;
    int64_t delay = rnd(d, 0, REPORT_MAX_MS), restart = rnd(d, 0, 2 * d->t.lease_duration_ms);
    int rec = crash_record(d, l, &verified_s, &t_expiry), ok, evidence;

    t = chaos_now_ns();
    p->killed = 1;
    kill(p->pid, SIGKILL);
    if (!pump_until(d, p_reaped, l, t + EXIT_LIMIT_NS))
        obs_violation(d->o, chaos_now_ns(), "%s: not gone %.0f s after SIGKILL", p->name,
                      (double)EXIT_LIMIT_NS / CHAOS_NS_PER_S);
    fault_done(d, CF_CRASH, t, t, 0);
    say(d, "fault crash: SIGKILL %s (leader), its kubelet reports it in %.3f s", p->name,
        (double)delay / 1000);
    /* The kubelet's delay: a timed part of the fault. */
    pump(d, t + ms(delay));
    t_report = chaos_now_ns();
    finished_s = (int64_t)time(NULL);
    ok = kubelet_terminated(d, p, finished_s) == 0;
    /* A Lease it could not read: evidence unknown, taken as evidence (the
     * observer then flags no takeover as one without). */
    evidence = ok && (rec == 1 ? finished_s > verified_s : rec < 0);
    obs_crash(d->o, CF_CRASH, l, t, t_expiry, ok ? t_report : 0, evidence);
    p->in_place = 1;
    p->restart_at = chaos_now_ns() + ms(restart);
    say(d, "  kubelet: %s (%s) terminated %.3f s after the kill: %s; restart in place in %.3f s",
        p->pod, p->cid + strlen("containerd://"), (double)(t_report - t) / CHAOS_NS_PER_S,
        !ok        ? "write failed"
        : evidence ? "evidence"
        : rec == 1 ? "finishedAt in the second of verifiedAt, not evidence"
        : rec == 0 ? "no record of the term, not evidence"
                   : "the Lease unreadable before the kill",
        (double)restart / 1000);
}

static void f_stop(drv *d, int l)
{
    proc *p = &d->p[l];
    int64_t t = chaos_now_ns();
    /* Beyond its own lease_duration (a seed-ABI one's may be longer). */
    int64_t hold = p->t.lease_duration_ms + rnd(d, 200, d->t.lease_duration_ms);

    p->stop_seen = 0;
    p->t_cont = 0;
    p->frozen = 1;
    p->stop_term = obs_open_term(d->o, l);
    kill(p->pid, SIGSTOP);
    if (!pump_until(d, p_stopped, l, t + EXIT_LIMIT_NS) || p->pid < 0) {
        obs_violation(d->o, chaos_now_ns(), "%s: did not stop after SIGSTOP", p->name);
        p->frozen = 0;
        return;
    }
    say(d, "fault stop: SIGSTOP %s (leader) for %.3f s", p->name, (double)hold / 1000);
    /* Held from the moment waitpid saw it stopped (which is after it
     * stopped): frozen for more than `hold` for sure. */
    pump(d, p->t_stopped + ms(hold));
    p->t_cont = chaos_now_ns();
    p->cont_pending = 1;
    p->last_hb = p->t_cont;
    p->frozen = 0;
    kill(p->pid, SIGCONT);
    if (p->stop_term >= 0)
        d->frozen_leaders++;
    fault_done(d, CF_STOP, p->t_stopped, p->t_cont, 0);
    pump_until(d, p_cont_done, l, p->t_cont + CONT_LIMIT_NS);
    /* Seed ABI: the term open at SIGSTOP must end within THAW_LIMIT_NS
     * of SIGCONT (its renew deadline passed while it was frozen); the
     * observer checks the time WaitLost returned, here that it did. */
    if (p->seed && p->stop_term >= 0 &&
        !pump_until(d, p_term_closed, p->stop_term, p->t_cont + CONT_LIMIT_NS) && p->pid > 0)
        obs_violation(d->o, chaos_now_ns(),
                      "%s: seed ABI: K8sLeaseWaitLost has not returned %.0f s after SIGCONT "
                      "(frozen for %.3f s while leading)",
                      p->name, (double)CONT_LIMIT_NS / CHAOS_NS_PER_S,
                      (double)(p->t_cont - p->t_stopped) / CHAOS_NS_PER_S);
}

static void f_release(drv *d, int l)
{
    int64_t t = chaos_now_ns();
    int term = obs_open_term(d->o, l), step_back = (int)rnd(d, 0, 1);

    /* SIGUSR2: the leader sits out for lease_duration, so a follower takes
     * over (on the watch event); SIGUSR1: it campaigns again at once. */
    kill(d->p[l].pid, step_back ? SIGUSR2 : SIGUSR1);
    if (step_back)
        d->p[l].sits_out = t + ms(d->p[l].t.lease_duration_ms);
    fault_done(d, CF_RELEASE, t, t, 0);
    say(d, "fault release: %s %s (leader)%s", step_back ? "SIGUSR2" : "SIGUSR1", d->p[l].name,
        step_back ? ", which then sits out" : "");
    if (term >= 0)
        pump_until(d, p_term_closed, term, t + SHUTDOWN_LIMIT_NS);
}

static int p_terms_beyond(drv *d, int n)
{
    return obs_terms(d->o) > n;
}

/* Planned handoff: the leader ends its term naming a successor (a random
 * other candidate that runs, half the time) or the best one it knows, by
 * its own call (SIGRTMIN, whose value names the successor: the index + 1
 * in --peers, 0 the best) or by the operator's request (the Lease's
 * annotation; a seed-ABI leader's library acts on it too). Then the
 * leader campaigns again at once, as after SIGUSR1. Which candidate leads
 * next, and how soon, goes to the report; the invariants are the
 * observer's as for every fault. */
static void f_handoff(drv *d, int l)
{
    proc *p = &d->p[l];
    int term = obs_open_term(d->o, l), before = obs_terms(d->o), target = -1, next, rc = 0;
    /* A native leader: the call and the request in turn. */
    int request = p->seed || (d->ho_native_turn++ % 2 == 1), named = (int)rnd(d, 0, 1);
    int64_t t, t0 = chaos_now_ns();

    if (named) {
        int cands[MAX_CAND], n = 0;

        /* Campaigning: not one sitting out a release (SIGUSR2), which would
         * take the Lease only when it campaigns again. */
        for (int i = 0; i < d->ncand; i++)
            if (i != l && d->p[i].pid > 0 && !d->p[i].frozen && d->p[i].sits_out <= t0)
                cands[n++] = i;
        target = n ? cands[rnd(d, 0, n - 1)] : -1;
    }
    if (request && !d->ho_client) {
        k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;

        co.kubeconfig = d->kubeconfig;
        co.user_agent = "chaos/operator";
        if (k8slease_client_new(&d->ho_client, &co) < 0) {
            obs_violation(d->o, chaos_now_ns(), "driver: a client for handoff requests: %s",
                          k8slease_error_last());
            return;
        }
    }
    t = chaos_now_ns();
    if (request) {
        rc = k8slease_lease_handoff(d->ho_client, NULL, LEASE_NAME,
                                    target >= 0 ? d->p[target].name : NULL);
        if (rc < 0)
            obs_violation(d->o, chaos_now_ns(), "driver: k8slease_lease_handoff: %s",
                          k8slease_error_last());
    } else {
        union sigval v = {.sival_int = target + 1};

        sigqueue(p->pid, SIGRTMIN, v);
    }
    fault_done(d, CF_HANDOFF, t, t, 0);
    d->ho_request += request;
    if (target >= 0)
        d->ho_named++;
    else
        d->ho_best++;
    say(d, "fault handoff: %s %s (leader) to %s", request ? "request to" : "SIGRTMIN", p->name,
        target >= 0 ? d->p[target].name : "the best known candidate");
    if (rc < 0)
        return;
    if (term >= 0)
        pump_until(d, p_term_closed, term, t + SHUTDOWN_LIMIT_NS);
    if (!pump_until(d, p_terms_beyond, before, t + STEADY_LIMIT_NS))
        return; /* no leader: the observer's recovery check says so */
    next = obs_term_cand(d->o, before);
    if ((size_t)d->ho_next < sizeof(d->ho_next_ns) / sizeof(d->ho_next_ns[0]))
        d->ho_next_ns[d->ho_next++] = obs_term_lead(d->o, before) - t;
    if (target >= 0 && next == target)
        d->ho_named_won++;
    if (target < 0 && d->p[next].known)
        d->ho_best_known++;
    say(d, "  next leader %s%s, its term began %.1f ms after the handoff was asked",
        d->p[next].name,
        target >= 0 ? (next == target ? " (the named successor)" : " (NOT the named successor)")
        : d->p[next].known ? " (a known candidate)"
                           : " (a candidate unknown to the choice)",
        (double)(obs_term_lead(d->o, before) - t) / CHAOS_NS_PER_MS);
}

/* A rule for `window` ms on every Lease request (server-wide). */
static int add_rule(drv *d, const char *fields, int64_t window)
{
    char body[512];

    snprintf(body, sizeof(body),
             "{%s,\"duration_ms\":%" PRId64 ",\"seed\":%" PRIu64
             ",\"match\":{\"path_prefix\":\"" LEASE_PREFIX "\"}}",
             fields, window, splitmix64(&d->rng) % 1000000);
    return control(d, "POST", "/testserver/v1/faults", body, 201);
}

static void f_cutoff(drv *d, int l)
{
    int target = rnd(d, 0, 9) < 6 ? l : random_other(d, l);
    int reset = (int)rnd(d, 0, 1);
    int64_t window = d->t.lease_duration_ms + rnd(d, 0, 2 * d->t.lease_duration_ms), t;
    char body[512];

    if (target >= 0 && d->p[target].seed) /* the seed-ABI leader: a follower instead */
        target = random_other(d, l);
    if (target < 0 && d->p[l].seed) {
        say(d, "fault cutoff: skipped (no native candidate to cut off)");
        return;
    }
    if (target < 0)
        target = l;
    t = chaos_now_ns();
    snprintf(body, sizeof(body),
             "{\"kind\":\"%s\",%s\"duration_ms\":%" PRId64
             ",\"match\":{\"user_agent\":\"" CHAOS_UA_PREFIX "%s\"}}",
             reset ? "reset" : "error", reset ? "" : "\"status\":503,", window, d->p[target].name);
    control(d, "POST", "/testserver/v1/faults", body, 201);
    snprintf(body, sizeof(body),
             "{\"abort\":true,\"match\":{\"user_agent\":\"" CHAOS_UA_PREFIX "%s\"}}",
             d->p[target].name);
    control(d, "POST", "/testserver/v1/watches/close", body, 200);
    say(d, "fault cutoff: %s (%s) cut off for %.3f s (%s)", d->p[target].name,
        target == l ? "leader" : "follower", (double)window / 1000, reset ? "RST" : "503");
    pump(d, t + ms(window));
    fault_done(d, CF_CUTOFF, t, t + ms(window), 0);
}

static void f_restart(drv *d)
{
    unsigned down = (unsigned)rnd(d, 0, d->t.lease_duration_ms + 500);
    int64_t t = chaos_now_ns();

    say(d, "fault restart: test server restart (state kept), down %u ms", down);
    if (ts_restart(d->ts, true, down) < 0)
        obs_violation(d->o, chaos_now_ns(), "driver: the test server did not come back");
    fault_done(d, CF_RESTART, t, chaos_now_ns(), 1);
}

/* The window of server-wide faults: renew_deadline to 2 x lease_duration. */
static int64_t window_ms(drv *d)
{
    return rnd(d, d->t.renew_deadline_ms, 2 * d->t.lease_duration_ms);
}

static void f_latency(drv *d)
{
    int64_t delay = d->t.renew_deadline_ms + rnd(d, 200, 1000), window = window_ms(d), t, up;
    char fields[96];

    snprintf(fields, sizeof(fields), "\"kind\":\"latency\",\"delay_ms\":%" PRId64, delay);
    t = chaos_now_ns();
    add_rule(d, fields, window);
    up = chaos_now_ns();
    say(d, "fault latency: +%" PRId64 " ms on every Lease request for %.3f s", delay,
        (double)window / 1000);
    pump(d, up + ms(window));
    /* A request that came in just before the end is handled delay ms later
     * (even if its client gave up): its write is the fault's last effect. */
    fault_done(d, CF_LATENCY, t, up + ms(window + delay), 1);
}

static void f_window(drv *d, chaos_fault_kind k, const char *fields, const char *what)
{
    int64_t window = window_ms(d), t = chaos_now_ns(), up;

    add_rule(d, fields, window);
    up = chaos_now_ns();
    say(d, "fault %s: %s for %.3f s", chaos_fault_name(k), what, (double)window / 1000);
    pump(d, up + ms(window));
    fault_done(d, k, t, up + ms(window), 1);
}

static void f_errors(drv *d, int status)
{
    int half = (int)rnd(d, 0, 1);
    char fields[128], what[96];

    snprintf(fields, sizeof(fields), "\"kind\":\"error\",\"status\":%d%s,\"probability\":%s",
             status, status == 429 ? ",\"retry_after\":1" : "", half ? "0.5" : "1.0");
    snprintf(what, sizeof(what), "HTTP %d on %s Lease requests", status,
             half ? "half of the" : "all");
    f_window(d, status == 429 ? CF_ERR429 : CF_ERR5XX, fields, what);
}

static void f_reset(drv *d)
{
    int half = (int)rnd(d, 0, 1);
    char fields[96];

    snprintf(fields, sizeof(fields), "\"kind\":\"reset\",\"probability\":%s", half ? "0.5" : "1.0");
    control(d, "POST", "/testserver/v1/watches/close",
            "{\"abort\":true,\"match\":{\"path_prefix\":\"" LEASE_PREFIX "\"}}", 200);
    f_window(d, CF_RESET, fields,
             half ? "RST on half of the Lease connections, streams aborted"
                  : "RST on every Lease connection, streams aborted");
}

static void f_freeze(drv *d)
{
    int64_t window = rnd(d, 2000, 2 * d->t.lease_duration_ms), t = chaos_now_ns(), up;
    int with_release = (int)rnd(d, 0, 1), l;

    add_rule(d, "\"kind\":\"freeze_watch\"", window);
    up = chaos_now_ns();
    say(d, "fault freeze: watch streams frozen for %.3f s%s", (double)window / 1000,
        with_release ? ", the leader releases inside" : "");
    if (with_release) {
        pump(d, up + ms(window / 2));
        if ((l = leader(d)) >= 0) {
            kill(d->p[l].pid, SIGUSR2);
            d->p[l].sits_out = chaos_now_ns() + ms(d->p[l].t.lease_duration_ms);
            say(d, "  release: SIGUSR2 %s (leader, then sits out) while streams are frozen",
                d->p[l].name);
        }
    }
    pump(d, up + ms(window));
    fault_done(d, CF_FREEZE, t, up + ms(window), 1);
}

#ifdef CHAOS_HAVE_ETCD
static void f_etcd_stop(drv *d)
{
    int64_t window = window_ms(d), t = chaos_now_ns();

    say(d, "fault etcd-stop: SIGSTOP etcd for %.3f s", (double)window / 1000);
    if (eh_pause(d->eh) < 0)
        obs_violation(d->o, chaos_now_ns(), "driver: cannot SIGSTOP etcd");
    pump(d, t + ms(window));
    if (eh_resume(d->eh) < 0)
        obs_violation(d->o, chaos_now_ns(), "driver: cannot SIGCONT etcd");
    fault_done(d, CF_ETCD_STOP, t, chaos_now_ns(), 1);
}

static void f_etcd_kill(drv *d)
{
    int64_t t = chaos_now_ns();

    say(d, "fault etcd-kill: SIGKILL etcd, restart on its data");
    if (eh_restart(d->eh, SIGKILL) < 0)
        obs_violation(d->o, chaos_now_ns(), "driver: etcd did not come back");
    fault_done(d, CF_ETCD_KILL, t, chaos_now_ns(), 1);
}
#endif

/* ---- Faults of a real server (--backend envtest) -------------------------
 * Only what a real kube-apiserver and its etcd can have: their processes
 * killed and started again (same data), or frozen and thawed, driven with
 * envtest.sh's ctl script. Recovery counts from when the server answers a
 * GET of the Lease again (server_answers), not from the ctl command's end:
 * a restarted etcd is healthy before the kube-apiserver has reconnected. */

static int p_ctl_done(drv *d, int arg)
{
    pid_t r;

    (void)arg;
    if (!d->ctl_pid)
        return 1;
    while ((r = waitpid(d->ctl_pid, &d->ctl_status, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r == 0)
        return 0;
    if (r < 0)
        d->ctl_status = -1;
    d->ctl_pid = 0;
    return 1;
}

/* Start `$K8SLEASE_ENVTEST_CTL what action` in a child. 0 or -1. */
static int start_ctl(drv *d, const char *what, const char *action)
{
    pid_t pid;

    fflush(stdout);
    fflush(stderr);
    if (d->log)
        fflush(d->log);
    if ((pid = fork()) < 0) {
        obs_violation(d->o, chaos_now_ns(), "driver: fork: %s", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        sigset_t none;

        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execl(d->ctl, d->ctl, what, action, (char *)NULL);
        fprintf(stderr, "k8slease-chaos: cannot run %s: %s\n", d->ctl, strerror(errno));
        _exit(127);
    }
    d->ctl_pid = pid;
    return 0;
}

/* Wait for the ctl command started at t, the event loop running meanwhile
 * (candidates keep reporting, killed ones are reaped). 0 when it exited 0;
 * else a violation (its own message is on stderr) and -1. */
static int wait_ctl(drv *d, const char *what, const char *action, int64_t t)
{
    if (!pump_until(d, p_ctl_done, 0, t + CTL_LIMIT_NS)) {
        kill(d->ctl_pid, SIGKILL);
        waitpid(d->ctl_pid, NULL, 0);
        d->ctl_pid = 0;
        obs_violation(d->o, chaos_now_ns(), "driver: ctl %s %s still running after %.0f s", what,
                      action, (double)CTL_LIMIT_NS / CHAOS_NS_PER_S);
        return -1;
    }
    if (!WIFEXITED(d->ctl_status) || WEXITSTATUS(d->ctl_status) != 0) {
        obs_violation(d->o, chaos_now_ns(), "driver: ctl %s %s failed (status %d)", what, action,
                      d->ctl_status);
        return -1;
    }
    return 0;
}

/* `$K8SLEASE_ENVTEST_CTL what action`, waited for. */
static int run_ctl(drv *d, const char *what, const char *action)
{
    int64_t t = chaos_now_ns();

    return start_ctl(d, what, action) < 0 ? -1 : wait_ctl(d, what, action, t);
}

/* The first moment the server answers a GET of the Lease again (any
 * answer of the API: the Lease or 404), probing every 20 ms with a 1 s
 * timeout; the end of the answering request, which is after the server
 * answered. A ctl command may still be running (a start waits for
 * /readyz, which a kube-apiserver passes after it begins to serve): its
 * exit is collected here too. A probe blocks the event loop for at most
 * 1 s, harmless here: no candidate is killed or frozen during a server
 * fault. */
static int64_t server_answers(drv *d, const char *after)
{
    int64_t t = chaos_now_ns(), now;
    int probes = 0, rc = 0;

    for (;;) {
        k8slease_holder *h = NULL;

        p_ctl_done(d, 0);
        rc = k8slease_holder_get(d->probe, NULL, LEASE_NAME, PROBE_TIMEOUT_MS, &h);
        now = chaos_now_ns();
        probes++;
        k8slease_holder_free(h);
        if (rc == 0 || rc == K8SLEASE_ENOTFOUND)
            break;
        if (now - t > ANSWER_LIMIT_NS) {
            obs_violation(d->o, now, "driver: the server does not answer %.0f s after %s (%s)",
                          (double)ANSWER_LIMIT_NS / CHAOS_NS_PER_S, after, k8slease_error_last());
            break;
        }
        pump(d, now + 20 * CHAOS_NS_PER_MS);
    }
    say(d, "  the server answers again %.3f s after %s (%d probe%s)",
        (double)(now - t) / CHAOS_NS_PER_S, after, probes, probes == 1 ? "" : "s");
    return now;
}

/* SIGKILL the kube-apiserver or etcd, start it again on the same data. */
static void f_proc_kill(drv *d, chaos_fault_kind k, const char *what)
{
    int64_t t = chaos_now_ns(), t_start, answers;

    say(d, "fault %s: SIGKILL %s, start it again", chaos_fault_name(k), what);
    run_ctl(d, what, "kill");
    t_start = chaos_now_ns();
    /* Probe while it starts: the server may answer before ctl's readiness
     * check passes, and recovery counts from the first answer. */
    if (start_ctl(d, what, "start") < 0) {
        fault_done(d, k, t, chaos_now_ns(), 1);
        return;
    }
    answers = server_answers(d, "the kill");
    wait_ctl(d, what, "start", t_start);
    say(d, "  %s started and ready %.3f s after the kill", what,
        (double)(chaos_now_ns() - t) / CHAOS_NS_PER_S);
    fault_done(d, k, t, answers, 1);
}

/* SIGSTOP the kube-apiserver or etcd beyond renew_deadline, then SIGCONT. */
static void f_proc_stop(drv *d, chaos_fault_kind k, const char *what)
{
    int64_t window = rnd(d, d->t.renew_deadline_ms + 200, 2 * d->t.lease_duration_ms);
    int64_t t = chaos_now_ns();

    say(d, "fault %s: SIGSTOP %s for %.3f s", chaos_fault_name(k), what, (double)window / 1000);
    run_ctl(d, what, "stop");
    pump(d, t + ms(window));
    run_ctl(d, what, "cont");
    fault_done(d, k, t, server_answers(d, "SIGCONT"), 1);
}

/* ---- Faults of an HA control plane (envtest.sh with replicas) ------------
 * Replicas of the kube-apiserver on one etcd behind haproxy. The control
 * plane stays up through each of these, so a leader keeps its term when
 * the balancer detects the fault fast enough (docs/chaos.md, "An HA
 * control plane"): they are dealt instead of apiserver-stop/-kill, which
 * with replicas would hit replica 1 only. */

/* The replica a fault hits: with balance first, replica 1 (every
 * connection is there); with round robin, any. */
static const char *pick_replica(drv *d)
{
    static const char *const names[] = {"apiserver", "apiserver2", "apiserver3"};
    int n = d->replicas < 3 ? d->replicas : 3;

    return names[d->balance_first ? 0 : rnd(d, 0, n - 1)];
}

/* SIGSTOP a replica beyond every candidate's renew deadline (its kernel
 * still accepts connections, nothing answers), then SIGCONT and wait until
 * haproxy has it up again. Its effects on takeovers end when haproxy has
 * marked it down (detect_ms at the latest) or it answers again. */
static void f_replica_hang(drv *d, const char *what)
{
    int64_t rd = d->t.renew_deadline_ms, window, t, t_cont;

    if (d->nseed && d->seed_t.renew_deadline_ms > rd)
        rd = d->seed_t.renew_deadline_ms;
    window = rnd(d, rd + 200,
                 rd + 200 > 2 * d->t.lease_duration_ms ? rd + 200 : 2 * d->t.lease_duration_ms);
    t = chaos_now_ns();
    say(d, "fault replica-hang: SIGSTOP %s for %.3f s", what, (double)window / 1000);
    run_ctl(d, what, "stop");
    pump(d, t + ms(window));
    run_ctl(d, what, "cont");
    t_cont = chaos_now_ns();
    run_ctl(d, what, "ready");
    say(d, "  %s thawed, up in haproxy %.3f s after SIGCONT", what,
        (double)(chaos_now_ns() - t_cont) / CHAOS_NS_PER_S);
    fault_done(d, CF_REPLICA_HANG, t, t + ms(d->detect_ms) < t_cont ? t + ms(d->detect_ms) : t_cont,
               1);
}

/* SIGKILL a replica (its connections are reset; haproxy redispatches a
 * refused connection to another replica at once), then start it again
 * (ctl start returns once haproxy has it up). */
static void f_replica_kill(drv *d, const char *what)
{
    int64_t t = chaos_now_ns(), t_gone;

    say(d, "fault replica-kill: SIGKILL %s, start it again", what);
    run_ctl(d, what, "kill");
    t_gone = chaos_now_ns();
    run_ctl(d, what, "start");
    say(d, "  %s started and up in haproxy %.3f s after the kill", what,
        (double)(chaos_now_ns() - t) / CHAOS_NS_PER_S);
    fault_done(d, CF_REPLICA_KILL, t, t_gone, 1);
}

/* Kill haproxy and start it again on its port: every connection through it
 * ends; the effects end when the API answers through it again. */
static void f_lb_restart(drv *d)
{
    int64_t t = chaos_now_ns();

    say(d, "fault lb-restart: kill haproxy, start it again");
    run_ctl(d, "lb", "restart");
    fault_done(d, CF_LB_RESTART, t, server_answers(d, "the balancer's restart"), 1);
}

/* Seed ABI: hand the Lease to a seed-ABI candidate, so that the next fault
 * hits a seed-ABI leader. Left to themselves they seldom lead: the native
 * candidates take over an expired Lease within retry_period / 20 of its
 * expiry and poll every retry_period, where the seed ABI's whole seconds
 * give 1 s. So: freeze the native followers (SIGSTOP), make the native
 * leader release and sit out (SIGUSR2): the seed-ABI candidates, the only
 * ones campaigning, take the Lease on the release's watch event; then thaw
 * the followers. A blocking fault (recovery counts from the thaw): while
 * the followers are frozen only the seed-ABI candidates can take over. */
static void handover(drv *d, int l)
{
    int64_t t = chaos_now_ns(), limit = t + ms(2 * d->seed_t.lease_duration_ms);
    int n = 0, won;

    for (int i = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];

        if (i == l || p->seed || p->pid < 0 || p->frozen)
            continue;
        p->stop_seen = 0;
        p->frozen = 1;
        kill(p->pid, SIGSTOP);
        n++;
    }
    if (!pump_until(d, p_all_stopped, 0, t + EXIT_LIMIT_NS))
        obs_violation(d->o, chaos_now_ns(), "driver: a follower did not stop after SIGSTOP");
    kill(d->p[l].pid, SIGUSR2);
    d->p[l].sits_out = chaos_now_ns() + ms(d->p[l].t.lease_duration_ms);
    won = pump_until(d, p_seed_leads, 0, limit);
    for (int i = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];

        if (!p->frozen || i == l || p->seed)
            continue;
        p->frozen = 0;
        p->last_hb = chaos_now_ns();
        if (p->pid > 0)
            kill(p->pid, SIGCONT);
    }
    fault_done(d, CF_HANDOVER, t, chaos_now_ns(), 1);
    d->handovers++;
    d->handovers_won += won;
    say(d, "fault handover: %d native follower%s frozen, SIGUSR2 %s (leader): %s in %.3f s", n,
        n == 1 ? "" : "s", d->p[l].name,
        won ? d->p[leader(d)].name : "no seed-ABI candidate took over",
        (double)(chaos_now_ns() - t) / CHAOS_NS_PER_S);
}

/* Does fault kind k leave the leader alone, so that its term is counted as
 * lost if it ends during the fault? The faults on candidates (kill, stop,
 * release, cutoff) and freeze (a release inside, half the time) end it on
 * purpose. */
static int server_fault(chaos_fault_kind k)
{
    switch (k) {
    case CF_RESTART:
    case CF_LATENCY:
    case CF_HANG:
    case CF_ERR5XX:
    case CF_ERR429:
    case CF_RESET:
    case CF_ETCD_STOP:
    case CF_ETCD_KILL:
    case CF_API_STOP:
    case CF_API_KILL:
    case CF_REPLICA_HANG:
    case CF_REPLICA_KILL:
    case CF_LB_RESTART:
        return 1;
    default:
        return 0;
    }
}

static void inject(drv *d, chaos_fault_kind k)
{
    int l = leader(d), term, nfaults = d->nfaults;

    if (l < 0)
        return; /* steady() said otherwise a moment ago: try the next one */
    term = obs_open_term(d->o, l);
    switch (k) {
    case CF_KILL:
        f_kill(d, l);
        break;
    case CF_CRASH:
        f_crash(d, l);
        break;
    case CF_STOP:
        f_stop(d, l);
        break;
    case CF_RELEASE:
        f_release(d, l);
        break;
    case CF_HANDOFF:
        f_handoff(d, l);
        break;
    case CF_CUTOFF:
        f_cutoff(d, l);
        break;
    case CF_RESTART:
        f_restart(d);
        break;
    case CF_LATENCY:
        f_latency(d);
        break;
    case CF_HANG:
        f_window(d, CF_HANG, "\"kind\":\"hang\"", "the server holds every Lease request");
        break;
    case CF_ERR5XX:
        f_errors(d, rnd(d, 0, 1) ? 503 : 500);
        break;
    case CF_ERR429:
        f_errors(d, 429);
        break;
    case CF_RESET:
        f_reset(d);
        break;
    case CF_FREEZE:
        f_freeze(d);
        break;
    case CF_API_STOP:
        f_proc_stop(d, k, "apiserver");
        break;
    case CF_API_KILL:
        f_proc_kill(d, k, "apiserver");
        break;
    case CF_ETCD_STOP:
        if (d->envtest)
            f_proc_stop(d, k, "etcd");
#ifdef CHAOS_HAVE_ETCD
        else
            f_etcd_stop(d);
#endif
        break;
    case CF_ETCD_KILL:
        if (d->envtest)
            f_proc_kill(d, k, "etcd");
#ifdef CHAOS_HAVE_ETCD
        else
            f_etcd_kill(d);
#endif
        break;
    case CF_REPLICA_HANG:
        f_replica_hang(d, pick_replica(d));
        break;
    case CF_REPLICA_KILL:
        f_replica_kill(d, pick_replica(d));
        break;
    case CF_LB_RESTART:
        f_lb_restart(d);
        break;
    default:
        break;
    }
    /* Count the leader's term as lost if this fault ended it (observer).
     * Must it keep it (docs/chaos.md)? Through a killed replica always (its
     * connections are reset, the next ones redispatched at once to a
     * replica that answers); through a hung replica if the balancer marks
     * it down in time (ha_keep); through a balancer down for D (restart to
     * first answer) if a renewal after a failed one still fits before the
     * renew deadline: renew_deadline - retry_period > retry_period + D
     * (not with the seed ABI's 3/2/1 s: every failed renewal is its last). */
    if (d->nfaults > nfaults && server_fault(k)) {
        const chaos_timing *lt = &d->p[l].t;
        int must = k == CF_REPLICA_HANG   ? d->ha_keep
                   : k == CF_REPLICA_KILL ? 1
                   : k == CF_LB_RESTART   ? ms(lt->renew_deadline_ms - lt->retry_period_ms) >
                                              ms(lt->retry_period_ms) + d->last_fault_ns
                                        : 0;

        obs_fault_term(d->o, term, must);
    }
}

/* The next round of faults: every kind of the backend once (and, in
 * --long, extra releases and handoffs: quick transitions; in --quick a
 * second handoff with Kubernetes), shuffled. */
static int deck(drv *d, chaos_fault_kind *out)
{
    static const chaos_fault_kind k8s[] = {CF_KILL,   CF_STOP,    CF_RELEASE, CF_HANDOFF,
                                           CF_CUTOFF, CF_RESTART, CF_LATENCY, CF_HANG,
                                           CF_ERR5XX, CF_ERR429,  CF_RESET,   CF_FREEZE};
    static const chaos_fault_kind etcd[] = {CF_KILL, CF_STOP, CF_RELEASE, CF_ETCD_STOP,
                                            CF_ETCD_KILL};
    /* A real server: no fault rules, only process faults. */
    static const chaos_fault_kind real[] = {CF_KILL,     CF_STOP,     CF_RELEASE,   CF_HANDOFF,
                                            CF_API_STOP, CF_API_KILL, CF_ETCD_STOP, CF_ETCD_KILL};
    /* An HA control plane: the replica faults instead of apiserver-stop
     * and -kill (which would hit replica 1 only); the outage of the whole
     * control plane is etcd's (every replica loses its storage at once). */
    static const chaos_fault_kind ha[] = {CF_KILL,       CF_STOP,         CF_RELEASE,
                                          CF_HANDOFF,    CF_REPLICA_HANG, CF_REPLICA_KILL,
                                          CF_LB_RESTART, CF_ETCD_STOP,    CF_ETCD_KILL};
    const chaos_fault_kind *base = d->etcd                         ? etcd
                                   : d->envtest && d->replicas > 1 ? ha
                                   : d->envtest                    ? real
                                                                   : k8s;
    int n = d->etcd                         ? (int)(sizeof(etcd) / sizeof(*etcd))
            : d->envtest && d->replicas > 1 ? (int)(sizeof(ha) / sizeof(*ha))
            : d->envtest                    ? (int)(sizeof(real) / sizeof(*real))
                                            : (int)(sizeof(k8s) / sizeof(*k8s));

    memcpy(out, base, (size_t)n * sizeof(*out));
    if (d->crash) /* the kill stays: a crash nobody reports */
        out[n++] = CF_CRASH;
    if (d->long_mode)
        for (int i = 0; i < 8; i++)
            out[n++] = i % 2 && !d->etcd ? CF_HANDOFF : CF_RELEASE;
    else if (!d->etcd) /* two a round: both surfaces get seen, on both kinds of leader */
        out[n++] = CF_HANDOFF;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd(d, 0, i);
        chaos_fault_kind x = out[i];

        out[i] = out[j];
        out[j] = x;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

static int usage(void)
{
    fprintf(stderr, "usage: k8slease-chaos (--quick | --long) [--seed N]\n"
                    "         [--backend k8s|etcd|envtest]\n"
                    "         [--candidates 3..5] [--duration S] [--transitions N]\n"
                    "         [--timing LD/RD/RP] [--allowance-ms MS] [--time-cap S] [--log FILE]\n"
                    "         [--verbose] [--naive-candidates]\n"
                    "         [--seed-abi-candidates N] [--naive-seed-abi] [--no-crash-failover]\n"
                    "--quick: about 3 minutes of faults; --long: until 500 leader transitions.\n"
                    "--backend envtest: a real kube-apiserver, run under\n"
                    "  tests/integration/envtest.sh (KUBEBUILDER_ASSETS=DIR).\n"
                    "--seed-abi-candidates N: the first N candidates use the seed ABI\n"
                    "  (libk8s_lease_wrapper.h); default 1, 0 with --backend etcd (which it\n"
                    "  cannot use); at most --candidates - 2.\n"
                    "--no-crash-failover: the candidates without crash failover, no crash\n"
                    "  fault (Kubernetes backends; etcd has none).\n"
                    "See docs/chaos.md.\n");
    return 2;
}

static int parse_args(drv *d, int argc, char **argv)
{
    int mode = 0;
    const char *backend = "k8s", *log = NULL;
    long long duration = -1, cap = -1;
    int nseed = -1, no_crash = 0;

    d->seed = (uint64_t)chaos_now_ns() ^ ((uint64_t)getpid() << 20);
    d->seed %= 1000000000;
    d->t = (chaos_timing){2000, 1500, 300};
    d->allowance_ns = ms(1000);
    d->ncand = 0;
    d->target_transitions = 500;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!strcmp(a, "--quick") || !strcmp(a, "--long")) {
            mode = a[2];
            continue;
        }
        if (!strcmp(a, "--verbose")) {
            d->verbose = 1;
            continue;
        }
        if (!strcmp(a, "--naive-candidates")) {
            d->naive = 1;
            continue;
        }
        if (!strcmp(a, "--naive-seed-abi")) {
            d->naive_seed = 1;
            continue;
        }
        if (!strcmp(a, "--no-crash-failover")) {
            no_crash = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--seed"))
            d->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--backend"))
            backend = v;
        else if (!strcmp(a, "--candidates"))
            d->ncand = atoi(v);
        else if (!strcmp(a, "--seed-abi-candidates"))
            nseed = atoi(v);
        else if (!strcmp(a, "--duration"))
            duration = atoll(v);
        else if (!strcmp(a, "--time-cap"))
            cap = atoll(v);
        else if (!strcmp(a, "--transitions"))
            d->target_transitions = atoi(v);
        else if (!strcmp(a, "--allowance-ms"))
            d->allowance_ns = ms(atoll(v));
        else if (!strcmp(a, "--log"))
            log = v;
        else if (!strcmp(a, "--timing")) {
            if (sscanf(v, "%" SCNd64 "/%" SCNd64 "/%" SCNd64, &d->t.lease_duration_ms,
                       &d->t.renew_deadline_ms, &d->t.retry_period_ms) != 3)
                return usage();
        } else
            return usage();
    }
    if (!mode || (strcmp(backend, "k8s") && strcmp(backend, "etcd") && strcmp(backend, "envtest")))
        return usage();
    d->long_mode = mode == 'l';
    d->etcd = !strcmp(backend, "etcd");
    d->envtest = !strcmp(backend, "envtest");
    d->crash = !d->etcd && !no_crash;
    if (!d->ncand)
        d->ncand = d->long_mode ? 5 : 4;
    if (d->ncand < 3 || d->ncand > MAX_CAND || d->target_transitions < 1 ||
        d->t.retry_period_ms <= 0 || d->t.renew_deadline_ms * 5 <= d->t.retry_period_ms * 6 ||
        d->t.lease_duration_ms <= d->t.renew_deadline_ms)
        return usage();
    /* The seed ABI reads a kubeconfig: not etcd. At least two native
     * candidates keep the recovery bound's retry period theirs. */
    d->nseed = nseed >= 0 ? nseed : d->etcd ? 0 : 1;
    if (d->etcd && d->nseed > 0) {
        fprintf(stderr, "k8slease-chaos: --seed-abi-candidates: the seed ABI has no etcd "
                        "backend (it reads $KUBECONFIG)\n");
        return 2;
    }
    if (d->nseed > d->ncand - 2 || (d->naive_seed && !d->nseed))
        return usage();
    {
        /* Whole seconds, as close to the native timings as the seed ABI's
         * rules allow (lease > renew > 1.2 x retry): 2000/1500/300 ms gives
         * 3/2/1 s. */
        int64_t rp = d->t.retry_period_ms < 1500 ? 1 : (d->t.retry_period_ms + 500) / 1000;
        int64_t rd = (d->t.renew_deadline_ms + 999) / 1000,
                ld = (d->t.lease_duration_ms + 999) / 1000;

        if (rd <= rp + rp / 5)
            rd = rp + rp / 5 + 1;
        if (ld <= rd)
            ld = rd + 1;
        d->seed_t = (chaos_timing){ld * 1000, rd * 1000, rp * 1000};
    }
    /* --quick: faults for 165 s, about 3 minutes with start and shutdown. */
    d->fault_phase_ns = (duration >= 0 ? duration : d->long_mode ? 0 : 165) * CHAOS_NS_PER_S;
    d->time_cap_ns = (cap >= 0 ? cap : d->long_mode ? 5400 : 600) * CHAOS_NS_PER_S;
    d->rng = d->seed;
    if (log && !(d->log = fopen(log, "w"))) {
        fprintf(stderr, "k8slease-chaos: %s: %s\n", log, strerror(errno));
        return 2;
    }
    return 0;
}

/* A leader keeps its term through a hung replica if the balancer marks it
 * down within renew_deadline - retry_period - the request timeout
 * ((renew_deadline - retry_period) / 2, at least 500 ms): docs/operations.md,
 * "An HA control plane". */
static int64_t keep_window_ms(const chaos_timing *t)
{
    int64_t timeout = (t->renew_deadline_ms - t->retry_period_ms) / 2;

    return t->renew_deadline_ms - t->retry_period_ms - (timeout < 500 ? 500 : timeout);
}

/* envtest: how many replicas (`ctl replicas`), and with several, the
 * balancer's settings from $K8SLEASE_ENVTEST_DIR/env (BALANCE, LB_CHECK_MS;
 * envtest.sh does not pass its own variables on). */
static void ha_setup(drv *d)
{
    char cmd[1200], line[256], path[1024];
    const char *dir = getenv("K8SLEASE_ENVTEST_DIR");
    FILE *f;

    d->replicas = 1;
    d->lb_check_ms = 1000; /* envtest.sh's default */
    snprintf(cmd, sizeof(cmd), "'%s' replicas 2>/dev/null", d->ctl);
    if ((f = popen(cmd, "r"))) {
        if (fgets(line, sizeof(line), f) && atoi(line) > 1)
            d->replicas = atoi(line);
        pclose(f);
    }
    if (d->replicas < 2)
        return;
    snprintf(path, sizeof(path), "%s/env", dir ? dir : ".");
    if (dir && (f = fopen(path, "r"))) {
        while (fgets(line, sizeof(line), f)) {
            if (!strncmp(line, "BALANCE=", 8))
                d->balance_first = !strncmp(line + 8, "first", 5);
            else if (!strncmp(line, "LB_CHECK_MS=", 12) && atoll(line + 12) > 0)
                d->lb_check_ms = atoll(line + 12);
        }
        fclose(f);
    }
    /* haproxy (inter C, timeout check C, fall 2) marks a replica down
     * after two failed checks; a check starts C after the previous one
     * ended: a replica that hangs right after a good check is down 4 C
     * later at the latest (C to the next check, C until it times out, C,
     * C). */
    d->detect_ms = 4 * d->lb_check_ms;
    d->keep_ms = keep_window_ms(&d->t);
    if (d->nseed && keep_window_ms(&d->seed_t) < d->keep_ms)
        d->keep_ms = keep_window_ms(&d->seed_t);
    d->ha_keep = d->detect_ms <= d->keep_ms;
}

static int setup_backend(drv *d)
{
    if (d->etcd) {
#ifdef CHAOS_HAVE_ETCD
        if (eh_start(&d->eh, NULL) < 0) {
            fprintf(stderr, "k8slease-chaos: cannot start etcd\n");
            return 2;
        }
        snprintf(d->endpoint, sizeof(d->endpoint), "%s", eh_endpoint(d->eh));
        return 0;
#else
        fprintf(stderr, "k8slease-chaos: --backend etcd: this build has no etcd harness "
                        "(etcd or etcdctl not found at configure time)\n");
        return 3;
#endif
    }
    if (d->envtest) {
        const char *kc = getenv("K8SLEASE_TEST_KUBECONFIG");
        k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;

        d->ctl = getenv("K8SLEASE_ENVTEST_CTL");
        if (!kc || !*kc || !d->ctl || !*d->ctl) {
            fprintf(stderr,
                    "k8slease-chaos: --backend envtest runs under "
                    "tests/integration/envtest.sh, which sets K8SLEASE_TEST_KUBECONFIG and "
                    "K8SLEASE_ENVTEST_CTL:\n  KUBEBUILDER_ASSETS=DIR "
                    "tests/integration/envtest.sh k8slease-chaos --quick --backend envtest\n");
            return 3; /* not available here: ctest reports a skip */
        }
        snprintf(d->kubeconfig, sizeof(d->kubeconfig), "%s", kc);
        co.kubeconfig = d->kubeconfig;
        co.user_agent = "chaos/probe";
        if (k8slease_client_new(&d->probe, &co) < 0) {
            fprintf(stderr, "k8slease-chaos: %s: %s\n", kc, k8slease_error_last());
            return 2;
        }
        snprintf(d->endpoint, sizeof(d->endpoint), "%s", k8slease_client_server(d->probe));
        ha_setup(d);
        if (d->replicas > 1)
            printf("k8slease-chaos: HA control plane: %d kube-apiservers behind haproxy (balance "
                   "%s, checks every %" PRId64 " ms: a hung replica is down within %" PRId64
                   " ms); a leader keeps its term if that is within %" PRId64
                   " ms: a term lost to replica-hang is %s; to replica-kill, a violation; to "
                   "lb-restart, one if a renewal after a failed one fits in renew_deadline\n",
                   d->replicas, d->balance_first ? "first" : "roundrobin", d->lb_check_ms,
                   d->detect_ms, d->keep_ms,
                   d->ha_keep ? "a violation" : "only counted (the balancer is too slow)");
        return 0;
    }
    char seed[32];
    const char *args[] = {"--seed", seed, NULL};

    snprintf(seed, sizeof(seed), "%" PRIu64, d->seed);
    if (ts_start(&d->ts, args) < 0) {
        fprintf(stderr, "k8slease-chaos: cannot start the test server\n");
        return 2;
    }
    snprintf(d->kubeconfig, sizeof(d->kubeconfig), "%s", ts_kubeconfig(d->ts));
    return 0;
}

/* Crash failover: the namespace of the Lease (the candidates' client's:
 * the Pods go there too) and, on a real server, the kubelet's credentials.
 * 0 or 2. */
static int crash_setup(drv *d)
{
    k8slease_client_options co = K8SLEASE_CLIENT_OPTIONS_INIT;
    k8slease_client *c = NULL;

    if (!d->crash)
        return 0;
    co.kubeconfig = d->kubeconfig;
    if (k8slease_client_new(&c, &co) < 0) {
        fprintf(stderr, "k8slease-chaos: %s: %s\n", d->kubeconfig, k8slease_error_last());
        return 2;
    }
    snprintf(d->ns, sizeof(d->ns), "%s", k8slease_client_namespace(c));
    k8slease_client_free(c);
    if (!d->ts && api_setup(d) < 0) {
        fprintf(stderr,
                "k8slease-chaos: %s: no certificate-authority and token for the simulated "
                "kubelet (--no-crash-failover runs without)\n",
                d->kubeconfig);
        return 2;
    }
    d->run_id = (unsigned)((d->seed ^ ((uint64_t)getpid() << 8) ^ (uint64_t)time(NULL)) & 0xffffff);
    printf("k8slease-chaos: crash failover on: each candidate in a Pod of namespace %s "
           "(chaos-%06x-NAME-N), the driver as its kubelet; crash: the kubelet reports the "
           "leader's container terminated 0-%.0f s after SIGKILL\n",
           d->ns, d->run_id, (double)REPORT_MAX_MS / 1000);
    return 0;
}

static int finished(drv *d, int64_t now)
{
    if (now - d->t0 >= d->time_cap_ns)
        return 1;
    if (d->long_mode)
        return obs_terms(d->o) - 1 >= d->target_transitions && now - d->t0 >= d->fault_phase_ns;
    return now - d->t0 >= d->fault_phase_ns;
}

static void progress(drv *d, int64_t now)
{
    int l = leader(d);

    if (now - d->last_progress < 30 * CHAOS_NS_PER_S)
        return;
    d->last_progress = now;
    say(d, "progress: %d terms, %d faults, leader %s", obs_terms(d->o), d->nfaults,
        l >= 0 ? d->p[l].name : "none");
}

static void shutdown_all(drv *d)
{
    int64_t t = chaos_now_ns();

    for (int i = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];

        p->restart_at = 0;
        if (p->pid > 0) {
            p->quitting = 1;
            if (p->frozen)
                kill(p->pid, SIGCONT);
            p->frozen = 0;
            kill(p->pid, SIGTERM);
        }
    }
    if (!pump_until(d, p_all_gone, 0, t + SHUTDOWN_LIMIT_NS)) {
        obs_violation(d->o, chaos_now_ns(), "candidates still running %.0f s after SIGTERM",
                      (double)SHUTDOWN_LIMIT_NS / CHAOS_NS_PER_S);
        for (int i = 0; i < d->ncand; i++)
            if (d->p[i].pid > 0) {
                d->p[i].killed = 1;
                kill(d->p[i].pid, SIGKILL);
            }
        pump_until(d, p_all_gone, 0, chaos_now_ns() + EXIT_LIMIT_NS);
    }
}

static void report(drv *d, obs_result *r, int64_t end)
{
    const chaos_timing *t = &d->t;

    printf("\n== k8slease-chaos result (%s, backend %s, seed %" PRIu64 ")\n",
           d->long_mode ? "--long" : "--quick", backend_name(d), d->seed);
    printf("duration           %.1f s, %d candidates, lease %" PRId64 " / renew %" PRId64
           " / retry %" PRId64 " ms\n",
           rel_s(d, end), d->ncand, t->lease_duration_ms, t->renew_deadline_ms, t->retry_period_ms);
    printf("transitions        %d leader transitions (%d terms: %d LEAD, %d LOSE);", r->transitions,
           r->terms, r->terms, r->loses);
    for (int i = 0; i < d->ncand; i++)
        printf(" %s %d%s", d->p[i].name, d->p[i].terms, i + 1 < d->ncand ? "," : "\n");
    printf("faults             %d:", d->nfaults);
    for (int k = 0, first = 1; k < CF_NKINDS; k++)
        if (r->faults[k]) {
            printf("%s %s %d", first ? "" : ",", chaos_fault_name((chaos_fault_kind)k),
                   r->faults[k]);
            first = 0;
        }
    printf("\n");
    printf("overlaps           %d", r->overlaps);
    if (r->min_margin_ns != INT64_MAX)
        printf(" (closest handover: next term began %.3f ms after the previous one ended%s)",
               (double)r->min_margin_ns / CHAOS_NS_PER_MS,
               r->min_margin_dead ? ", a killed one" : "");
    printf("\n");
    printf("epochs             %s\n",
           r->epoch_errors ? "NOT strictly increasing" : "strictly increasing over all terms");
    printf("worst recovery     %.3f s (gap at +%.3f s, after %s); bound %.3f s = lease %.3f + "
           "2 x retry %.3f + allowance %.3f",
           (double)r->worst_recovery_ns / CHAOS_NS_PER_S, (double)r->worst_at_ns / CHAOS_NS_PER_S,
           chaos_fault_name(r->worst_kind), (double)r->bound_ns / CHAOS_NS_PER_S,
           (double)t->lease_duration_ms / 1000, (double)t->retry_period_ms / 1000,
           (double)d->allowance_ns / CHAOS_NS_PER_S);
    if (r->bound_max_ns > r->bound_ns)
        printf(" (%.3f s after a seed-ABI term: lease %.3f)",
               (double)r->bound_max_ns / CHAOS_NS_PER_S,
               (double)d->seed_t.lease_duration_ms / 1000);
    printf("; median gap %.3f s over %d gaps\n", (double)r->median_gap_ns / CHAOS_NS_PER_S,
           r->gaps);
    printf("by fault kind      %-15s %5s  %-22s %s\n", "kind", "count", "terms lost",
           "worst recovery");
    for (int k = 0; k < CF_NKINDS; k++) {
        char lost[64] = "- (ends it)";

        if (!r->faults[k])
            continue;
        if (k != CF_KILL && k != CF_STOP && k != CF_RELEASE && k != CF_CRASH && k != CF_HANDOFF)
            snprintf(lost, sizeof(lost), "-");
        if (r->led[k] || server_fault((chaos_fault_kind)k))
            snprintf(lost, sizeof(lost), "%d of %d", r->lost[k], r->led[k]);
        if (r->must_keep[k] && r->must_keep[k] == r->led[k])
            snprintf(lost + strlen(lost), sizeof(lost) - strlen(lost), " (must keep)");
        else if (r->must_keep[k])
            snprintf(lost + strlen(lost), sizeof(lost) - strlen(lost), " (%d must keep)",
                     r->must_keep[k]);
        printf("                   %-15s %5d  %-22s %.3f s\n",
               chaos_fault_name((chaos_fault_kind)k), r->faults[k], lost,
               (double)r->worst_by_kind[k] / CHAOS_NS_PER_S);
    }
    if (d->crash) {
        static const chaos_fault_kind kinds[] = {CF_CRASH, CF_KILL};

        printf("crash failover     killed leaders: %d had recorded their instance, %d not yet, %d "
               "Lease unreadable; %d failed kubelet writes\n",
               d->records[0], d->records[1], d->records[2], d->kubelet_errors);
        for (size_t j = 0; j < sizeof(kinds) / sizeof(*kinds); j++) {
            const obs_failover *f = &r->failover[kinds[j]];

            if (!f->count)
                continue;
            if (kinds[j] == CF_CRASH)
                printf("                   crash (with the report) %d: %d reported, %d evidence, "
                       "%d taken on the report, %d reported in time but taken at expiry, %d "
                       "taken back by the restarted candidate\n",
                       f->count, f->reported, f->evidence, f->by_report, f->late, f->self);
            else
                printf("                   kill (without: the kubelet silent) %d: %d taken before "
                       "the Lease could expire, %d taken back by the restarted candidate\n",
                       f->count, f->early, f->self);
            printf("                     next leader after SIGKILL p50 %.3f / p99 %.3f / max "
                   "%.3f s (%d)",
                   (double)f->p50_ns / CHAOS_NS_PER_S, (double)f->p99_ns / CHAOS_NS_PER_S,
                   (double)f->max_ns / CHAOS_NS_PER_S, f->measured);
            if (f->by_report)
                printf("; after the report p50 %.1f / p99 %.1f / max %.1f ms (%d)",
                       (double)f->rep_p50_ns / CHAOS_NS_PER_MS,
                       (double)f->rep_p99_ns / CHAOS_NS_PER_MS,
                       (double)f->rep_max_ns / CHAOS_NS_PER_MS, f->by_report);
            printf("\n");
        }
    }
    if (d->ho_named + d->ho_best) {
        int64_t sorted[512], n = d->ho_next;

        memcpy(sorted, d->ho_next_ns, (size_t)n * sizeof(*sorted));
        for (int64_t i = 1; i < n; i++) /* a few dozen: insertion sort */
            for (int64_t j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
                int64_t x = sorted[j];

                sorted[j] = sorted[j - 1];
                sorted[j - 1] = x;
            }
        printf("handoff            %d (%d by the operator's request, %d by the call; %d calls "
               "took at most %d ms): %d named, the successor led next in %d; %d to the best, a "
               "known candidate led next in %d",
               d->ho_named + d->ho_best, d->ho_request, d->ho_named + d->ho_best - d->ho_request,
               d->ho_calls, d->ho_call_max_ms, d->ho_named, d->ho_named_won, d->ho_best,
               d->ho_best_known);
        if (n)
            printf("; next term began p50 %.1f / max %.1f ms after the handoff was asked (%d)",
                   (double)sorted[n / 2] / CHAOS_NS_PER_MS, (double)sorted[n - 1] / CHAOS_NS_PER_MS,
                   (int)n);
        printf("\n");
    }
    if (!d->etcd) {
        printf("fleet              ");
        for (int i = 0; i < d->ncand; i++) {
            const proc *p = &d->p[i];

            printf("%s %s%s", p->name,
                   p->seed    ? "seed ABI"
                   : p->known ? "known"
                              : "unknown",
                   p->poll ? " poll_only" : "");
            if (p->known)
                printf(" (revision %s, priority %d)", p->revision, p->priority);
            printf("%s", i + 1 < d->ncand ? ", " : "\n");
        }
    }
    printf("frozen leaders     %d frozen beyond lease_duration, %d CONT checks, all woke up "
           "as not leader unless reported above",
           d->frozen_leaders, d->frozen_checked);
    if (d->nseed)
        printf("; %d on the seed ABI, WaitLost within %.0f ms of SIGCONT unless reported above",
               d->seed_thawed, (double)THAW_LIMIT_NS / CHAOS_NS_PER_MS);
    printf("\n");
    if (d->nseed) {
        int timeouts = 0, lines[4] = {0};

        for (int i = 0; i < d->nseed; i++) {
            timeouts += d->p[i].timeouts;
            for (int k = 0; k < 4; k++)
                lines[k] += d->p[i].log_lines[k];
        }
        printf("seed ABI           %d terms (%d ended by WaitLost: %d cancelled by the program, "
               "%d ended by the library, %d frozen; %d killed or open)%s\n",
               r->seed_terms, r->seed_closed, r->seed_cancelled,
               r->seed_closed - r->seed_cancelled - r->seed_frozen, r->seed_frozen,
               r->seed_terms - r->seed_closed, d->naive_seed ? ", MUTANT (must fail)" : "");
        printf("seed-ABI margin    ");
        if (r->seed_min_margin_ns == INT64_MAX)
            printf("none (no seed-ABI term was followed by another)");
        else
            printf("min %.3f ms over %d terms (next term's start - WaitLost's return; a frozen "
                   "term: - its freeze)",
                   (double)r->seed_min_margin_ns / CHAOS_NS_PER_MS, r->seed_margins);
        if (r->seed_min_margin_lost != INT64_MAX)
            printf("; terms the library ended: min %.3f ms",
                   (double)r->seed_min_margin_lost / CHAOS_NS_PER_MS);
        printf("\n");
        printf("seed-ABI leaders   %d handovers to them before a fault, %d won by them\n",
               d->handovers, d->handovers_won);
        printf("seed-ABI WaitLost  at most %.3f ms after K8sLeaseCancelElection, %.3f ms after "
               "SIGCONT (limit %.0f ms); %d WaitElected timeouts; log lines: %d error, %d warn, "
               "%d info\n",
               (double)r->seed_worst_cancel_ns / CHAOS_NS_PER_MS,
               (double)r->seed_worst_thaw_ns / CHAOS_NS_PER_MS,
               (double)THAW_LIMIT_NS / CHAOS_NS_PER_MS, timeouts, lines[0], lines[1], lines[2]);
    }
    printf("restarts           ");
    for (int i = 0; i < d->ncand; i++)
        printf("%s %d%s", d->p[i].name, d->p[i].restarts, i + 1 < d->ncand ? ", " : "\n");
    printf("violations         %d\n", r->violations);
}

/* A mixed fleet (Kubernetes backends): the native candidates in turn a
 * handoff candidate (revision r1), a handoff candidate polling as
 * client-go does (r1, priority 1), one unknown to the choice, and (the
 * fifth of --long) a handoff candidate of revision r2. The seed-ABI ones
 * are unknown to the choice (the seed ABI has no such option). */
static void roles(drv *d)
{
    size_t len = 0;

    for (int i = 0, j = 0; i < d->ncand; i++) {
        proc *p = &d->p[i];

        len +=
            (size_t)snprintf(d->peers + len, sizeof(d->peers) - len, "%s%s", i ? "," : "", p->name);
        if (d->etcd || p->seed)
            continue;
        switch (j++ % 4) {
        case 0:
            p->known = 1;
            p->revision = "r1";
            break;
        case 1:
            p->known = p->poll = 1;
            p->revision = "r1";
            p->priority = 1;
            break;
        case 2:
            break;
        default:
            p->known = 1;
            p->revision = "r2";
            break;
        }
    }
}

int main(int argc, char **argv)
{
    static drv dd;
    drv *d = &dd;
    struct sigaction sa;
    obs_params op;
    obs_result r;
    chaos_fault_kind cards[64];
    int ncards = 0, next = 0, rc, steered = -1;
    int64_t end;

    if ((rc = parse_args(d, argc, argv)) != 0)
        return rc;
    d->cand_path = getenv("K8SLEASE_CHAOS_CANDIDATE");
#ifdef CHAOS_CANDIDATE_PATH
    if (!d->cand_path || !*d->cand_path)
        d->cand_path = CHAOS_CANDIDATE_PATH;
#endif
    if (!d->cand_path) {
        fprintf(stderr, "k8slease-chaos: set K8SLEASE_CHAOS_CANDIDATE\n");
        return 2;
    }
    for (int i = 0; i < d->ncand; i++) {
        snprintf(d->p[i].name, sizeof(d->p[i].name), "cand-%c", 'a' + i);
        d->p[i].pid = -1;
        d->p[i].fd = -1;
        d->p[i].efd = -1;
        d->p[i].stop_term = -1;
        d->p[i].seed = i < d->nseed;
        d->p[i].t = d->p[i].seed ? d->seed_t : d->t;
        d->lease_ms[i] = d->p[i].t.lease_duration_ms;
        d->renew_ms[i] = d->p[i].t.renew_deadline_ms;
        d->names[i] = d->p[i].name;
    }
    roles(d);
    if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        return perror("pipe2"), 2;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    the_drv = d;
    atexit(kill_children);

    op = (obs_params){d->t,        d->allowance_ns, d->ncand,   d->names,
                      d->lease_ms, THAW_LIMIT_NS,   d->renew_ms};
    if (!(d->o = obs_new(&op)))
        return 2;
    printf("k8slease-chaos: %s, backend %s, seed %" PRIu64 " (rerun: --seed %" PRIu64
           "), %d candidates, lease %" PRId64 " / renew %" PRId64 " / retry %" PRId64
           " ms, recovery bound %.3f s\n",
           d->long_mode ? "--long" : "--quick", backend_name(d), d->seed, d->seed, d->ncand,
           d->t.lease_duration_ms, d->t.renew_deadline_ms, d->t.retry_period_ms,
           (double)(ms(d->t.lease_duration_ms + 2 * d->t.retry_period_ms) + d->allowance_ns) /
               CHAOS_NS_PER_S);
    if (d->nseed)
        printf(
            "k8slease-chaos: seed ABI (libk8s_lease_wrapper.h) for %s%s%s, lease %" PRId64
            " / renew %" PRId64 " / retry %" PRId64
            " s, recovery bound after their terms %.3f s%s\n",
            d->p[0].name, d->nseed > 1 ? " to " : "", d->nseed > 1 ? d->p[d->nseed - 1].name : "",
            d->seed_t.lease_duration_ms / 1000, d->seed_t.renew_deadline_ms / 1000,
            d->seed_t.retry_period_ms / 1000,
            (double)(ms(d->seed_t.lease_duration_ms + 2 * d->t.retry_period_ms) + d->allowance_ns) /
                CHAOS_NS_PER_S,
            d->naive_seed ? " (the mutant: this run must fail)" : "");
    fflush(stdout);
    if ((rc = setup_backend(d)) != 0 || (rc = crash_setup(d)) != 0) {
        obs_free(d->o);
        return rc;
    }

    d->t0 = chaos_now_ns();
    d->last_progress = d->t0;
    obs_begin(d->o, d->t0);
    for (int i = 0; i < d->ncand; i++)
        if (spawn(d, i) < 0) {
            perror("k8slease-chaos: spawn");
            return 2;
        }
    say(d, "started %d candidates on %s", d->ncand,
        d->etcd || d->envtest ? d->endpoint : ts_url(d->ts));

    /* Faults, one at a time, each from a steady state. */
    while (!finished(d, chaos_now_ns())) {
        int64_t now = chaos_now_ns();

        if (!pump_until(d, p_steady, 0, now + STEADY_LIMIT_NS)) {
            obs_violation(d->o, chaos_now_ns(), "no steady leader for %.0f s; ending the run",
                          (double)STEADY_LIMIT_NS / CHAOS_NS_PER_S);
            break;
        }
        /* Every other fault on a seed-ABI leader (one handover each). */
        if (d->nseed && d->deals % 2 == 0 && steered != d->deals && !d->p[leader(d)].seed) {
            int64_t back = 0;

            /* Not while a seed-ABI candidate sits out a release (SIGUSR2):
             * nobody could take the Lease but the native leader again. */
            for (int i = 0; i < d->nseed; i++)
                if (d->p[i].sits_out > back)
                    back = d->p[i].sits_out;
            if (back + ms(d->t.retry_period_ms) > chaos_now_ns()) {
                pump(d, back + ms(d->t.retry_period_ms));
                continue;
            }
            steered = d->deals;
            handover(d, leader(d));
            continue;
        }
        /* Let the term run a little: renewals, followers settled. */
        pump(d, chaos_now_ns() + ms(rnd(d, d->t.retry_period_ms, 4 * d->t.retry_period_ms)));
        if (!p_steady(d, 0))
            continue;
        if (next == ncards) {
            ncards = deck(d, cards);
            next = 0;
        }
        inject(d, cards[next++]);
        d->deals++;
        progress(d, chaos_now_ns());
    }

    /* Faults stopped: a leader must come (the gap check measures it). */
    if (d->ts)
        control(d, "DELETE", "/testserver/v1/faults", NULL, 200);
    for (int i = 0; i < d->ncand; i++)
        if (d->p[i].pid < 0 && d->p[i].restart_at)
            d->p[i].restart_at = chaos_now_ns();
    if (!pump_until(d, p_steady, 0, chaos_now_ns() + STEADY_LIMIT_NS))
        obs_violation(d->o, chaos_now_ns(), "no leader after the faults stopped");
    else
        pump(d, chaos_now_ns() + ms(2 * d->t.lease_duration_ms)); /* and it stays */
    end = chaos_now_ns();
    obs_end(d->o, end);
    shutdown_all(d);
    kubelet_cleanup(d);
    if (d->curl) {
        curl_easy_cleanup(d->curl);
        d->curl = NULL;
    }
    if (d->ts) {
        int st = ts_stop(d->ts);

        d->ts = NULL;
        if (st != 0)
            obs_violation(d->o, chaos_now_ns(), "the test server exited with status %d", st);
    }
#ifdef CHAOS_HAVE_ETCD
    if (d->eh) {
        eh_stop(d->eh);
        d->eh = NULL;
    }
#endif
    k8slease_client_free(d->probe);
    d->probe = NULL;
    k8slease_client_free(d->ho_client);
    d->ho_client = NULL;

    printf("\n");
    rc = obs_check(d->o, stdout, &r);
    if (d->long_mode && r.transitions < d->target_transitions) {
        printf("VIOLATION: --long reached %d leader transitions, not %d, within the time cap\n",
               r.transitions, d->target_transitions);
        rc++;
        r.violations++;
    }
    report(d, &r, end);
    if (rc) {
        printf("\nlast events:\n");
        for (int i = 0; i < RING_LINES; i++) {
            const char *line = d->ring[(d->ringpos + i) % RING_LINES];

            if (*line)
                printf("  %s\n", line);
        }
        printf("FAIL (rerun with --seed %" PRIu64 ")\n", d->seed);
    } else {
        printf("PASS\n");
    }
    if (d->log)
        fclose(d->log);
    obs_free(d->o);
    return rc ? 1 : 0;
}
