/* k8slease elect: campaign for a Lease; report events, or run CMD only
 * while leader. One elector per term (the library's rule): when a term
 * ends, CMD is stopped, the elector freed, and a new one campaigns.
 *
 * Threads: the main thread owns all the state below and handles one event
 * at a time (events.h); library callbacks and signals only post events.
 * The sidecar and the labeler have threads of their own and share only
 * the cli_view (under its mutex) and the labeler's wish. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "child.h"
#include "cli.h"
#include "events.h"
#include "labeler.h"
#include "sidecar.h"

static const char usage[] =
    "usage: k8slease elect --lease [NS/]NAME [options] [--] [CMD [ARG...]]\n"
    "\n"
    "Campaign for leadership of a Lease until interrupted. Without CMD, print one\n"
    "line per event on stdout:\n"
    "  elected epoch=N | lost | leader=ID epoch=N | released epoch=N\n"
    "With CMD, run it only while leader, with K8SLEASE_EPOCH, K8SLEASE_IDENTITY and\n"
    "K8SLEASE_LEASE in its environment; events (and started/stopping/killed/exited\n"
    "pid=N) go to stderr. On loss of leadership CMD gets SIGTERM, then SIGKILL after\n"
    "--grace; once it is gone, the Lease is released; after --lease-duration (time\n"
    "for the others to take it), a new term is campaigned for (with --once,\n"
    "k8slease exits).\n"
    "\n"
    "  --lease [NS/]NAME      the Lease (required); with etcd, the election name\n"
    "  --identity ID          our identity (default: $POD_NAME, else the host name)\n"
    "  --unique               append \"-<8 random hex digits>\" to the identity\n"
    "  --lease-duration D     how long a lease is valid without renewal (default 15s)\n"
    "  --renew-deadline D     leader steps down if it cannot renew for D (default 10s);\n"
    "                         less than --lease-duration\n"
    "  --retry-period D       time between attempts and renewals (default 2s);\n"
    "                         1.2 x D less than --renew-deadline\n"
    "  --no-release           leave the Lease to expire when stopping (default: release)\n"
    "  --poll-only            follow the Lease by polling every retry period, as\n"
    "                         client-go does, not with a watch (for comparisons)\n"
    "  --once                 exit with status 3 when the term ends\n"
    "  --grace D              CMD's time between SIGTERM and SIGKILL (default 10s)\n"
    "  --json                 events as JSON lines\n"
    "  --label-pod [NS/]POD   keep a label on this Pod while leader\n"
    "  --label KEY=VALUE      that label (default role=leader)\n"
    "  --http HOST:PORT       serve /healthz, /leader, / and /metrics on HOST:PORT\n"
    "                         (numeric IPv4 or [IPv6]; port 0: any free port)\n"
    "  --crash-failover       take the Lease at once when the kubelet reports its\n"
    "                         holder's container terminated (a crash), not at its\n"
    "                         expiry; this process's Pod is $POD_NAME in\n"
    "                         $POD_NAMESPACE (default: the Lease's namespace), set\n"
    "                         from the Downward API (see k8slease(1))\n"
    "  --container NAME       with --crash-failover: the container this process runs\n"
    "                         in (default: the Pod's only one)\n"
    "  --handoff, --no-handoff  planned handoff (default: on in a Pod, $POD_NAME set):\n"
    "                         make this candidate known to the leader (a Lease\n"
    "                         object of its own, owned by the Pod), and on SIGTERM,\n"
    "                         SIGINT or SIGHUP while leading, hand the Lease over to\n"
    "                         the best candidate instead of releasing it: it leads\n"
    "                         within a round trip (see k8slease(1), k8slease handoff)\n"
    "  --revision REV         with handoff: this candidate's revision (default: the\n"
    "                         Pod's pod-template-hash label); the newest is chosen\n"
    "  --priority N           with handoff: among the newest revision's candidates,\n"
    "                         the highest N is chosen (default 0)\n"
    "  --coordinated          coordinated leader election (KEP-4355): publish a\n"
    "                         LeaseCandidate; kube-apiserver's controller picks the\n"
    "                         leader, the oldest emulation version first; the\n"
    "                         identity must be a DNS subdomain name; a new term is\n"
    "                         campaigned for at once (see k8slease(1))\n"
    "  --binary-version V     with --coordinated (required): this binary's version,\n"
    "                         MAJOR.MINOR.PATCH (semver, no \"v\")\n"
    "  --emulation-version V  with --coordinated: the version whose behaviour it\n"
    "                         keeps, at most --binary-version (default: the same)\n"
    "  --strategy S           with --coordinated: OldestEmulationVersion (default)\n"
    "                         or PREFIX/NAME, a strategy another controller applies\n"
    "  --kubeconfig FILE, --context NAME, --namespace NS, --log-level error|warn|info|debug,\n"
    "  --help, --version\n"
    "  --backend etcd --etcd-endpoints URL[,URL...] [--etcd-cacert FILE]\n"
    "  [--etcd-cert FILE --etcd-key FILE] [--etcd-user NAME]\n"
    "  [--etcd-password-file FILE]: campaign in an etcd election instead, as\n"
    "                         `etcdctl elect NAME ID` (see k8slease --help);\n"
    "                         --lease-duration is the etcd lease TTL (whole\n"
    "                         seconds); no --label-pod, --coordinated or\n"
    "                         --crash-failover\n"
    "\n"
    "D is a duration: 500ms, 15s, 1m30s, 1.5s. SIGTERM, SIGINT or SIGHUP stop CMD,\n"
    "release the Lease and exit 0; a second one kills CMD at once.\n"
    "\n"
    "Exit status: 0 stopped by a signal; 1 error; 2 usage; 3 term over (--once);\n"
    "CMD's status when it exits by itself while leader (128+N if killed by signal N,\n"
    "126 or 127 if it could not be run).\n";

enum {
    OPT_LEASE = 1,
    OPT_IDENTITY,
    OPT_UNIQUE,
    OPT_LEASE_DURATION,
    OPT_RENEW_DEADLINE,
    OPT_RETRY_PERIOD,
    OPT_NO_RELEASE,
    OPT_ONCE,
    OPT_GRACE,
    OPT_JSON,
    OPT_LABEL_POD,
    OPT_LABEL,
    OPT_HTTP,
    OPT_COORDINATED,
    OPT_BINARY_VERSION,
    OPT_EMULATION_VERSION,
    OPT_STRATEGY,
    OPT_CRASH_FAILOVER,
    OPT_CONTAINER,
    OPT_HANDOFF,
    OPT_NO_HANDOFF,
    OPT_REVISION,
    OPT_PRIORITY,
    OPT_POLL_ONLY
};

static const cli_opt opts[] = {
    {"--lease", OPT_LEASE, 1},
    {"--identity", OPT_IDENTITY, 1},
    {"--unique", OPT_UNIQUE, 0},
    {"--lease-duration", OPT_LEASE_DURATION, 1},
    {"--renew-deadline", OPT_RENEW_DEADLINE, 1},
    {"--retry-period", OPT_RETRY_PERIOD, 1},
    {"--no-release", OPT_NO_RELEASE, 0},
    {"--once", OPT_ONCE, 0},
    {"--grace", OPT_GRACE, 1},
    {"--json", OPT_JSON, 0},
    {"--label-pod", OPT_LABEL_POD, 1},
    {"--label", OPT_LABEL, 1},
    {"--http", OPT_HTTP, 1},
    {"--coordinated", OPT_COORDINATED, 0},
    {"--binary-version", OPT_BINARY_VERSION, 1},
    {"--emulation-version", OPT_EMULATION_VERSION, 1},
    {"--strategy", OPT_STRATEGY, 1},
    {"--crash-failover", OPT_CRASH_FAILOVER, 0},
    {"--container", OPT_CONTAINER, 1},
    {"--handoff", OPT_HANDOFF, 0},
    {"--no-handoff", OPT_NO_HANDOFF, 0},
    {"--revision", OPT_REVISION, 1},
    {"--priority", OPT_PRIORITY, 1},
    {"--poll-only", OPT_POLL_ONLY, 0},
    {NULL, 0, 0},
};

/* A timing flag: its value in ms and what the user wrote (NULL: default). */
typedef struct timing {
    const char *flag;
    const char *given;
    int64_t ms;
} timing;

typedef struct elect_config {
    cli_ref lease;
    const char *lease_value; /* --lease, checked once --backend is known */
    const char *identity_flag;
    int unique;
    timing ld, rd, rp;
    int64_t grace_ms;
    int no_release, once, json;
    cli_ref label_pod;
    int have_label_pod, have_label;
    char label_key[320];
    char label_value[64];
    int have_http;
    struct sockaddr_storage http_addr;
    socklen_t http_len;
    /* --coordinated and its flags; the library checks the values. */
    int coordinated;
    const char *binary_version, *emulation_version, *strategy;
    const char *coordinated_flag; /* the first of the three given, or NULL */
    /* --crash-failover: our Pod from $POD_NAME/$POD_NAMESPACE (ns "": the
     * Lease's), and --container (NULL: the Pod's only one). */
    int crash_failover;
    cli_ref crash_pod;
    const char *container;
    /* Planned handoff: -1 by default (on in a Pod), 0 or 1 as asked; our
     * Pod (as crash_pod, when known), --revision, --priority. */
    int handoff;
    cli_ref handoff_pod;
    int have_handoff_pod;
    const char *revision;
    long priority;
    int poll_only;
    char **cmd; /* NULL-terminated, or NULL: report events only */
} elect_config;

typedef struct elect {
    elect_config cfg;
    const cli_common *common;
    char identity[CLI_IDENTITY_MAX];
    char lease[CLI_LEASE_MAX]; /* "NS/NAME", or the etcd election name */
    k8slease_client *client;
    cli_events q;
    cli_view view;
    cli_sidecar *http;
    cli_labeler *labeler;
    k8slease_elector *e; /* this term's; NULL between terms */
    cli_child child;
    FILE *out;          /* events: stdout, or stderr while CMD owns stdout */
    const char *prefix; /* of text event lines on stderr */
    int leading;        /* between STARTED and STOPPED of the current elector */
    int term_over;      /* STOPPED seen: free the elector once CMD is gone */
    int stopping;       /* leave once CMD is gone */
    int signalled;      /* stopping for SIGTERM, SIGINT or SIGHUP: hand over, if on */
    int exit_code;
    int64_t restart_at;      /* monotonic ms of the next campaign while e is NULL */
    k8slease_watch *sit_out; /* between terms: ends the wait once another holds it */
    int have_shown;          /* the last holder line written: */
    int64_t shown_epoch;
    char shown[CLI_IDENTITY_MAX];
} elect;

/* ---- flags ------------------------------------------------------------- */

static int check_label(const cli_parser *p, elect_config *c)
{
    const char *eq = strchr(p->value, '=');
    const char *why;
    size_t n = eq ? (size_t)(eq - p->value) : 0;

    if (!eq)
        return cli_flag_error(p, "must be KEY=VALUE");
    if (n >= sizeof(c->label_key) || strlen(eq + 1) >= sizeof(c->label_value))
        return cli_flag_error(p, "too long (key at most 316 bytes, value at most 63)");
    memcpy(c->label_key, p->value, n);
    c->label_key[n] = '\0';
    snprintf(c->label_value, sizeof(c->label_value), "%s", eq + 1);
    if ((why = cli_label_key_error(c->label_key)) || (why = cli_label_value_error(c->label_value)))
        return cli_flag_error(p, "%s", why);
    return 0;
}

/* client-go's rules, naming the flags the user wrote. */
static int check_timings(const cli_parser *p, const elect_config *c)
{
    char a[32], b[32];

    if (c->rd.ms >= c->ld.ms) {
        const timing *blame = c->rd.given || !c->ld.given ? &c->rd : &c->ld;
        const timing *other = blame == &c->rd ? &c->ld : &c->rd;

        cli_format_duration(a, sizeof(a), blame->ms);
        cli_format_duration(b, sizeof(b), other->ms);
        return cli_usage_error(p, "%s %s: must be %s than %s (%s)", blame->flag,
                               blame->given ? blame->given : a,
                               blame == &c->rd ? "less" : "greater", other->flag, b);
    }
    /* renew_deadline > 1.2 * retry_period, in integers. */
    if (c->rd.ms * 5 <= c->rp.ms * 6) {
        if (c->rp.given || !c->rd.given) {
            cli_format_duration(b, sizeof(b), c->rd.ms);
            return cli_usage_error(p, "%s %s: 1.2 x %s must be less than %s (%s)", c->rp.flag,
                                   c->rp.given, c->rp.flag, c->rd.flag, b);
        }
        cli_format_duration(b, sizeof(b), c->rp.ms);
        return cli_usage_error(p, "%s %s: must be greater than 1.2 x %s (%s)", c->rd.flag,
                               c->rd.given, c->rp.flag, b);
    }
    return 0;
}

static int parse_timing(const cli_parser *p, timing *t)
{
    t->given = p->value;
    return cli_duration_value(p, 1, &t->ms);
}

static int parse_flags(cli_parser *p, elect_config *c)
{
    int id, rc;

    c->ld = (timing){"--lease-duration", NULL, 15000};
    c->rd = (timing){"--renew-deadline", NULL, 10000};
    c->rp = (timing){"--retry-period", NULL, 2000};
    c->grace_ms = 10000;
    c->handoff = -1;
    snprintf(c->label_key, sizeof(c->label_key), "role");
    snprintf(c->label_value, sizeof(c->label_value), "leader");
    while ((id = cli_next(p)) > 0) {
        rc = 0;
        switch (id) {
        case OPT_LEASE:
            c->lease_value = p->value;
            break;
        case OPT_IDENTITY:
            c->identity_flag = p->value;
            break;
        case OPT_UNIQUE:
            c->unique = 1;
            break;
        case OPT_LEASE_DURATION:
            rc = parse_timing(p, &c->ld);
            break;
        case OPT_RENEW_DEADLINE:
            rc = parse_timing(p, &c->rd);
            break;
        case OPT_RETRY_PERIOD:
            rc = parse_timing(p, &c->rp);
            break;
        case OPT_NO_RELEASE:
            c->no_release = 1;
            break;
        case OPT_ONCE:
            c->once = 1;
            break;
        case OPT_GRACE:
            rc = cli_duration_value(p, 0, &c->grace_ms);
            break;
        case OPT_JSON:
            c->json = 1;
            break;
        case OPT_LABEL_POD:
            rc = cli_ref_value(p, "pod", &c->label_pod);
            c->have_label_pod = 1;
            break;
        case OPT_LABEL:
            rc = check_label(p, c);
            c->have_label = 1;
            break;
        case OPT_HTTP:
            if (cli_sidecar_parse_addr(p->value, &c->http_addr, &c->http_len) != 0)
                rc = cli_flag_error(p, "must be HOST:PORT with a numeric IPv4 address or a "
                                       "[bracketed] IPv6 address, and a port 0-65535");
            c->have_http = 1;
            break;
        case OPT_COORDINATED:
            c->coordinated = 1;
            break;
        case OPT_CRASH_FAILOVER:
            c->crash_failover = 1;
            break;
        case OPT_CONTAINER:
            if (!cli_is_dns_label(p->value))
                rc = cli_flag_error(p, "container name must be a lowercase RFC 1123 label (a-z, "
                                       "0-9 and '-', at most 63 characters)");
            c->container = p->value;
            break;
        case OPT_POLL_ONLY:
            c->poll_only = 1;
            break;
        case OPT_HANDOFF:
        case OPT_NO_HANDOFF:
            c->handoff = id == OPT_HANDOFF;
            break;
        case OPT_REVISION:
            if (!p->value[0] || strlen(p->value) > 253)
                rc = cli_flag_error(p, "must be 1 to 253 characters");
            c->revision = p->value;
            break;
        case OPT_PRIORITY: {
            char *end;

            errno = 0;
            c->priority = strtol(p->value, &end, 10);
            if (!p->value[0] || *end || errno || c->priority < -1000000 || c->priority > 1000000)
                rc = cli_flag_error(p, "must be an integer from -1000000 to 1000000");
            break;
        }
        case OPT_BINARY_VERSION:
        case OPT_EMULATION_VERSION:
        case OPT_STRATEGY:
            if (!p->value[0])
                rc = cli_flag_error(p, "must not be empty");
            *(id == OPT_BINARY_VERSION      ? &c->binary_version
              : id == OPT_EMULATION_VERSION ? &c->emulation_version
                                            : &c->strategy) = p->value;
            if (!c->coordinated_flag)
                c->coordinated_flag = id == OPT_BINARY_VERSION      ? "--binary-version"
                                      : id == OPT_EMULATION_VERSION ? "--emulation-version"
                                                                    : "--strategy";
            break;
        }
        if (rc)
            return rc;
    }
    if (id == CLI_STOP)
        return p->exit_code == CLI_OK ? -1 : p->exit_code;
    /* CMD: the first positional argument or whatever follows "--". */
    if (id == CLI_ARG)
        p->i--;
    if (p->i < p->argc)
        c->cmd = p->argv + p->i;
    if (!c->lease_value)
        return cli_usage_error(p, "--lease is required (see %s --help)", p->cmd);
    if (c->have_label && !c->have_label_pod)
        return cli_usage_error(p, "--label needs --label-pod");
    if (c->container && !c->crash_failover)
        return cli_usage_error(p, "--container needs --crash-failover");
    if (c->coordinated_flag && !c->coordinated)
        return cli_usage_error(p, "%s needs --coordinated (it is a LeaseCandidate's field)",
                               c->coordinated_flag);
    if (c->coordinated && !c->binary_version)
        return cli_usage_error(p, "--coordinated needs --binary-version V (this binary's "
                                  "version, MAJOR.MINOR.PATCH)");
    if ((rc = cli_backend_check(p, NULL)) != CLI_OK)
        return rc;
    if (c->have_label_pod && p->common.backend == K8SLEASE_BACKEND_ETCD)
        return cli_usage_error(p, "--label-pod: Kubernetes only (a Pod), not with --backend etcd");
    if (c->coordinated && p->common.backend == K8SLEASE_BACKEND_ETCD)
        return cli_usage_error(p, "--coordinated: Kubernetes only (LeaseCandidates), not with "
                                  "--backend etcd");
    if (c->crash_failover && p->common.backend == K8SLEASE_BACKEND_ETCD)
        return cli_usage_error(p, "--crash-failover: Kubernetes only (the kubelet's report on a "
                                  "Pod), not with --backend etcd");
    if (c->crash_failover && c->coordinated)
        return cli_usage_error(p, "--crash-failover: not with --coordinated (kube-apiserver's "
                                  "controller picks the holder)");
    if (c->crash_failover && (rc = cli_pod_env(p, "--crash-failover", &c->crash_pod)) != 0)
        return rc;
    /* Handoff: on in a Pod unless said otherwise; Kubernetes, not coordinated. */
    if (c->handoff < 0)
        c->handoff = getenv("POD_NAME") && getenv("POD_NAME")[0] &&
                     p->common.backend != K8SLEASE_BACKEND_ETCD && !c->coordinated;
    if (c->handoff && p->common.backend == K8SLEASE_BACKEND_ETCD)
        return cli_usage_error(p, "--handoff: Kubernetes only, not with --backend etcd");
    if (c->handoff && c->coordinated)
        return cli_usage_error(p, "--handoff: not with --coordinated (kube-apiserver's "
                                  "controller picks the holder)");
    if ((c->revision || c->priority) && !c->handoff)
        return cli_usage_error(p, "--revision and --priority are for --handoff");
    if (c->handoff && getenv("POD_NAME") && getenv("POD_NAME")[0]) {
        if ((rc = cli_pod_env(p, "--handoff", &c->handoff_pod)) != 0)
            return rc;
        c->have_handoff_pod = 1;
    }
    if ((rc = cli_lease_value(p, c->lease_value, &c->lease)) != 0)
        return rc;
    return check_timings(p, c);
}

/* ---- output -------------------------------------------------------------- */

/* Nobody reads the events any more (a closed pipe): stop, status 1. */
static void output_failed(elect *el)
{
    if (el->stopping)
        return;
    el->stopping = 1;
    el->exit_code = CLI_ERROR;
    cli_child_terminate(&el->child, el->cfg.grace_ms);
}

static void emit(elect *el, const char *event, const cli_field *f, size_t n)
{
    if (cli_emit(el->out, el->cfg.json, el->prefix, event, 1, f, n) != 0)
        output_failed(el);
}

static void emit_pid(elect *el, const char *event, int pid)
{
    cli_field f = {"pid", NULL, pid};

    emit(el, event, &f, 1);
}

/* ---- terms ---------------------------------------------------------------- */

/* Between terms: follow the Lease, so that the wait before the next
 * campaign ends as soon as another identity holds it (a handoff, a
 * takeover, a candidate that took what we released): campaigning then
 * cannot take it back, and keeps this replica a candidate (and a known
 * one, for the next handoff). Its first report is the Lease as it is now.
 * Without the watch (out of memory) the wait runs its course. */
static void sit_out(elect *el, int64_t ms)
{
    el->restart_at = cli_now_ms() + ms;
    if (ms > 0 &&
        k8slease_watch_start(&el->sit_out, el->client, cli_ref_ns(&el->cfg.lease, el->common),
                             el->cfg.lease.name, cli_events_on_leader, &el->q) != 0)
        cli_warn("%s; campaigning again in %lld ms", k8slease_error_last(), (long long)ms);
}

static void sit_out_end(elect *el)
{
    k8slease_watch_free(el->sit_out);
    el->sit_out = NULL;
}

/* CLI_OK, or the exit code (message printed): CLI_USAGE when the library
 * refuses a flag's value (EINVAL: e.g. a version, or an identity that is
 * no DNS name with --coordinated), else CLI_ERROR. */
static int start_term(elect *el)
{
    k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
    int err;

    sit_out_end(el);
    o.ns = cli_ref_ns(&el->cfg.lease, el->common);
    o.name = el->cfg.lease.name;
    o.identity = el->identity;
    o.lease_duration_ms = el->cfg.ld.ms;
    o.renew_deadline_ms = el->cfg.rd.ms;
    o.retry_period_ms = el->cfg.rp.ms;
    /* With CMD, the library must not release the Lease when a term is
     * lost: CMD may run for --grace more, and a release would let the next
     * leader start at once. release_lost_term() does it once CMD is gone. */
    o.release_on_cancel = !el->cfg.no_release && !el->cfg.cmd;
    o.on_started_leading = cli_events_on_started;
    o.on_stopped_leading = cli_events_on_stopped;
    o.on_new_leader = cli_events_on_leader;
    o.user_data = &el->q;
    o.coordinated = el->cfg.coordinated;
    o.poll_only = el->cfg.poll_only;
    o.binary_version = el->cfg.binary_version;
    o.emulation_version = el->cfg.emulation_version;
    o.strategy = el->cfg.strategy;
    if (el->cfg.crash_failover) {
        o.crash_failover = 1;
        o.pod_namespace = el->cfg.crash_pod.ns[0] ? el->cfg.crash_pod.ns : NULL;
        o.pod_name = el->cfg.crash_pod.name;
        o.container = el->cfg.container;
    }
    if (el->cfg.handoff) {
        o.handoff_candidate = 1;
        o.revision = el->cfg.revision;
        o.priority = (int)el->cfg.priority;
        if (el->cfg.have_handoff_pod) {
            o.pod_namespace = el->cfg.handoff_pod.ns[0] ? el->cfg.handoff_pod.ns : NULL;
            o.pod_name = el->cfg.handoff_pod.name;
        }
    }
    if ((err = k8slease_elector_start(&el->e, el->client, &o)) != 0) {
        cli_error("%s", k8slease_error_last());
        return err == K8SLEASE_EINVAL ? CLI_USAGE : CLI_ERROR;
    }
    el->term_over = 0;
    cli_view_set_elector(&el->view, el->e);
    return CLI_OK;
}

/* Stop (releasing unless --no-release) and free this term's elector.
 * Callbacks it made meanwhile are still queued and handled later.
 * Returns the epoch of its term, -1 if it did not lead. */
static int64_t end_term(elect *el)
{
    int64_t epoch;

    if (!el->e)
        return -1;
    k8slease_elector_stop(el->e, el->cfg.no_release ? 0 : 1);
    epoch = k8slease_elector_epoch(el->e);
    cli_view_retire(&el->view);
    k8slease_elector_free(el->e);
    el->e = NULL;
    el->leading = 0;
    return epoch;
}

/* A term with CMD was lost and CMD is gone: now take the label off and
 * release the Lease, if it still names this term (a newer holder, or a
 * newer term of an identity twin, is left alone). */
static void release_lost_term(elect *el, int64_t epoch)
{
    const char *ns = cli_ref_ns(&el->cfg.lease, el->common);
    k8slease_holder *h = NULL;
    int err;

    cli_labeler_remove(el->labeler, el->cfg.rd.ms);
    err = k8slease_holder_get(el->client, ns, el->cfg.lease.name, el->cfg.rd.ms, &h);
    if (err == 0 && strcmp(h->identity, el->identity) == 0 && h->epoch == epoch)
        err = k8slease_lease_release(el->client, ns, el->cfg.lease.name, el->identity, 0,
                                     el->cfg.rd.ms);
    if (err != 0 && err != K8SLEASE_ENOTFOUND && err != K8SLEASE_ECONFLICT)
        cli_warn("%s; the lease is left to expire", k8slease_error_last());
    k8slease_holder_free(h);
}

static void start_cmd(elect *el, int64_t epoch)
{
    char epoch_var[48], identity_var[CLI_IDENTITY_MAX + 32], lease_var[CLI_LEASE_MAX + 32];
    char *env[] = {epoch_var, identity_var, lease_var, NULL};
    int err;

    snprintf(epoch_var, sizeof(epoch_var), "K8SLEASE_EPOCH=%lld", (long long)epoch);
    snprintf(identity_var, sizeof(identity_var), "K8SLEASE_IDENTITY=%s", el->identity);
    snprintf(lease_var, sizeof(lease_var), "K8SLEASE_LEASE=%s", el->lease);
    if ((err = cli_child_start(&el->child, el->cfg.cmd, env)) != 0) {
        cli_error("cannot run %s: %s", el->cfg.cmd[0], strerror(err));
        /* As a shell: 127 not found, 126 found but not runnable. */
        el->exit_code = err == ENOENT ? 127 : 126;
        el->stopping = 1;
        return;
    }
    emit_pid(el, "started", (int)el->child.pid);
}

static void on_child_exit(elect *el, int pid, int status)
{
    cli_field f[2] = {{"pid", NULL, pid}, {"status", NULL, 0}};

    if (WIFSIGNALED(status)) {
        f[1].key = "signal";
        f[1].n = WTERMSIG(status);
    } else {
        f[1].n = WEXITSTATUS(status);
    }
    emit(el, "exited", f, 2);
    /* CMD quit while we lead and nobody asked it to: we are done too. */
    if (!el->child.terminating && !el->stopping) {
        el->stopping = 1;
        el->exit_code = cli_child_exit_code(status);
    }
}

/* ---- events ----------------------------------------------------------------- */

static void shut_down(elect *el, int sig)
{
    if (el->stopping && el->child.pid) {
        /* A second signal: do not wait for the grace period. */
        cli_child_kill(&el->child);
        emit_pid(el, "killed", (int)el->child.pid);
        return;
    }
    if (!el->stopping)
        el->exit_code = CLI_OK;
    el->stopping = 1;
    el->signalled = 1;
    cli_info("%s: stopping", sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "SIGHUP");
    if (el->child.pid && !el->child.terminating) {
        cli_child_terminate(&el->child, el->cfg.grace_ms);
        emit_pid(el, "stopping", (int)el->child.pid);
    }
}

static void handle(elect *el, const cli_event *ev)
{
    cli_field f = {"epoch", NULL, ev->epoch};
    int status;

    switch (ev->type) {
    case CLI_EV_STARTED:
        el->leading = 1;
        cli_view_set_leading(&el->view, 1);
        emit(el, "elected", &f, 1);
        if (el->stopping)
            break; /* won just as we stop: no label, no CMD */
        cli_labeler_want(el->labeler, 1);
        if (el->cfg.cmd)
            start_cmd(el, ev->epoch);
        break;
    case CLI_EV_STOPPED:
        el->term_over = 1;
        if (!el->leading) {
            /* The election ended without a term: we stopped it; or, in
             * coordinated mode, the library gave up (it logged why: no
             * LeaseCandidate API, the name taken by another Lease's
             * candidate, a version the server refuses). Campaigning again
             * would fail the same way. */
            if (el->cfg.coordinated && !el->stopping) {
                cli_error("coordinated election ended without a term (see the error above)");
                el->exit_code = CLI_ERROR;
                el->stopping = 1;
            }
            break;
        }
        el->leading = 0;
        cli_view_set_leading(&el->view, 0);
        emit(el, "lost", NULL, 0);
        cli_labeler_want(el->labeler, 0);
        if (el->child.pid && !el->child.terminating) {
            cli_child_terminate(&el->child, el->cfg.grace_ms);
            emit_pid(el, "stopping", (int)el->child.pid);
        }
        break;
    case CLI_EV_LEADER:
        if (!el->e && el->sit_out && ev->identity[0] && strcmp(ev->identity, el->identity) != 0)
            el->restart_at = 0; /* another holds it: nothing to take back */
        cli_view_set_holder(&el->view, ev->identity, ev->epoch);
        /* A change only: the next term's elector first reports what the
         * watch between terms (or the last term's) reported already. */
        if (el->have_shown && el->shown_epoch == ev->epoch && !strcmp(el->shown, ev->identity))
            break;
        el->have_shown = 1;
        el->shown_epoch = ev->epoch;
        snprintf(el->shown, sizeof(el->shown), "%s", ev->identity);
        if (cli_emit_holder(el->out, el->cfg.json, el->prefix, ev->identity, ev->epoch) != 0)
            output_failed(el);
        break;
    case CLI_EV_SIGNAL:
        if (ev->sig != SIGCHLD) {
            shut_down(el, ev->sig);
        } else {
            int pid = (int)el->child.pid;

            if (cli_child_reap(&el->child, 0, &status))
                on_child_exit(el, pid, status);
        }
        break;
    }
}

static int64_t next_timeout(const elect *el)
{
    int64_t t = cli_child_timeout(&el->child);

    if (!el->e && !el->stopping && !el->child.pid) {
        int64_t left = el->restart_at - cli_now_ms();

        if (left < 0)
            left = 0;
        if (t < 0 || left < t)
            t = left;
    }
    return t;
}

static void run(elect *el)
{
    for (;;) {
        cli_event *ev;
        int r, status;

        if (!el->child.pid) {
            if (el->stopping)
                return;
            if (el->e && el->term_over) {
                int64_t epoch = end_term(el);

                if (epoch >= 0 && el->cfg.cmd && !el->cfg.no_release)
                    release_lost_term(el, epoch);
                if (el->cfg.once) {
                    el->exit_code = CLI_TERM_OVER;
                    return;
                }
                /* Give the others a lease duration to take the Lease we
                 * lost or gave up: candidates retry within 2.2 retry
                 * periods, less than that. Otherwise an operator's
                 * `k8slease release` would just hand it back to us. The
                 * wait ends once another holds it (sit_out).
                 * Coordinated: the controller picks the holder whatever we
                 * do, and our LeaseCandidate is gone until the next term
                 * starts: waiting would only leave us out of its choice
                 * meanwhile (a newer version put in charge, then moved
                 * back to us: two handovers instead of none). */
                sit_out(el, el->cfg.coordinated ? 0 : el->cfg.ld.ms);
            }
            if (!el->e && cli_now_ms() >= el->restart_at && (r = start_term(el)) != CLI_OK) {
                el->exit_code = r;
                return;
            }
        }
        if (cli_child_tick(&el->child))
            emit_pid(el, "killed", (int)el->child.pid);
        r = cli_events_wait(&el->q, next_timeout(el), &ev);
        if (r < 0) {
            cli_error("out of memory: events lost");
            el->exit_code = CLI_ERROR;
            el->stopping = 1;
            /* No event can tell us when CMD is gone: kill it and wait. */
            cli_child_kill(&el->child);
            cli_child_reap(&el->child, 1, &status);
            return;
        }
        if (r > 0) {
            handle(el, ev);
            free(ev);
        }
    }
}

/* ---- the command --------------------------------------------------------- */

static int setup(elect *el, const cli_parser *p)
{
    const elect_config *c = &el->cfg;
    const char *pod_ns;

    if (cli_client_new(&p->common, &el->client) != CLI_OK)
        return -1;
    cli_ref_format(el->lease, sizeof(el->lease), &c->lease, el->common, el->client);
    snprintf(el->view.lease, sizeof(el->view.lease), "%s", el->lease);
    snprintf(el->view.name, sizeof(el->view.name), "%s", c->lease.name);
    snprintf(el->view.identity, sizeof(el->view.identity), "%s", el->identity);
    el->view.lease_duration_ms = c->ld.ms;
    el->view.renew_deadline_ms = c->rd.ms;
    el->view.backend = cli_backend_name(p->common.backend);
    el->view.coordinated = c->coordinated;
    el->view.handoff = c->handoff;
    cli_info("%s %s, identity %s, server %s%s", cli_lease_noun(el->common), el->lease, el->identity,
             k8slease_client_server(el->client), c->coordinated ? ", coordinated" : "");
    if (c->crash_failover) {
        /* The Pod's namespace defaults to the Lease's. */
        const char *ns = c->crash_pod.ns[0] ? c->crash_pod.ns : cli_ref_ns(&c->lease, el->common);

        cli_info("crash failover: pod %s/%s, container %s",
                 ns ? ns : k8slease_client_namespace(el->client), c->crash_pod.name,
                 c->container ? c->container : "(the pod's only one)");
    }
    if (c->have_http && cli_sidecar_start(&el->http, &c->http_addr, c->http_len, &el->view) != 0)
        return -1;
    pod_ns = cli_ref_ns(&c->label_pod, el->common);
    if (c->have_label_pod && cli_labeler_start(&el->labeler, el->client, pod_ns, c->label_pod.name,
                                               c->label_key, c->label_value) != 0)
        return -1;
    return 0;
}

static void teardown(elect *el)
{
    cli_event *ev;
    int64_t epoch;

    /* Label off before the release, so that two pods never carry it
     * because of us; the release itself is bounded by renew_deadline. */
    cli_labeler_stop(el->labeler, el->cfg.rd.ms);
    el->labeler = NULL;
    if (el->e) {
        /* A signal while leading: hand over to the best candidate (it leads
         * within a round trip), else release as ever. */
        if (el->cfg.handoff && el->signalled && el->leading && !el->cfg.no_release &&
            k8slease_elector_handoff(el->e, NULL, 0) != 0)
            cli_warn("%s; releasing instead", k8slease_error_last());
        k8slease_elector_stop(el->e, el->cfg.no_release ? 0 : 1);
        /* Report what the stop caused ("lost"), quietly if output fails. */
        el->stopping = 1;
        while (cli_events_wait(&el->q, 0, &ev) > 0) {
            if (ev->type != CLI_EV_SIGNAL)
                handle(el, ev);
            free(ev);
        }
        /* A term lost just before (the elector did not release it, CMD
         * being there) is released now; a no-op if the stop did it. */
        if ((epoch = end_term(el)) >= 0 && el->cfg.cmd && !el->cfg.no_release)
            release_lost_term(el, epoch);
    }
    sit_out_end(el);
    cli_sidecar_stop(el->http);
    k8slease_client_free(el->client);
}

int cli_elect(int argc, char **argv)
{
    cli_parser p;
    elect el;
    int rc;

    memset(&el, 0, sizeof(el));
    cli_child_note_inherited_fds();
    cli_parser_init(&p, "k8slease elect", usage, opts, argc, argv);
    if ((rc = parse_flags(&p, &el.cfg)) != 0)
        return rc < 0 ? CLI_OK : rc;
    if ((rc = cli_identity(&p, el.cfg.identity_flag, el.cfg.unique, el.identity,
                           sizeof(el.identity))) != CLI_OK)
        return rc;
    el.common = &p.common;
    el.out = el.cfg.cmd ? stderr : stdout;
    el.prefix = el.cfg.cmd ? "k8slease elect: " : NULL;
    cli_view_init(&el.view);
    /* Before any thread exists, so that all of them block the signals. */
    if (cli_events_init(&el.q, 1) != 0) {
        cli_view_fini(&el.view);
        return CLI_ERROR;
    }
    if (setup(&el, &p) == 0)
        run(&el);
    else
        el.exit_code = CLI_ERROR;
    teardown(&el);
    cli_events_fini(&el.q);
    cli_view_fini(&el.view);
    return el.exit_code;
}
