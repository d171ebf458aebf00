/* k8slease holder | watch | release | handoff: read, follow, release a
 * Lease, and ask its leader to hand it over. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "events.h"

enum { OPT_LEASE = 1, OPT_JSON, OPT_IDENTITY, OPT_FORCE, OPT_TO, OPT_TIMEOUT };

#define COMMON_HELP                                                                                \
    "  --kubeconfig FILE, --context NAME, --namespace NS, --log-level error|warn|info|debug,\n"    \
    "  --help, --version\n"                                                                        \
    "  --backend etcd --etcd-endpoints URL[,URL...] [--etcd-cacert FILE]\n"                        \
    "  [--etcd-cert FILE --etcd-key FILE] [--etcd-user NAME]\n"                                    \
    "  [--etcd-password-file FILE]: an etcd election instead (see k8slease --help)\n"

/* The flags of holder, watch and release; *lease is required. */
static int parse(cli_parser *p, cli_ref *lease, int *json, const char **identity, int *force)
{
    const char *lease_value = NULL;
    int id, rc;

    while ((id = cli_next(p)) > 0) {
        rc = 0;
        switch (id) {
        case OPT_LEASE:
            /* Checked once --backend is known. */
            lease_value = p->value;
            break;
        case OPT_JSON:
            *json = 1;
            break;
        case OPT_IDENTITY:
            if (!p->value[0])
                rc = cli_flag_error(p, "must not be empty");
            *identity = p->value;
            break;
        case OPT_FORCE:
            *force = 1;
            break;
        }
        if (rc)
            return rc;
    }
    if (id == CLI_STOP)
        return p->exit_code == CLI_OK ? -1 : p->exit_code;
    if (id == CLI_ARG || p->i < p->argc)
        return cli_usage_error(p, "unexpected argument \"%s\"",
                               id == CLI_ARG ? p->value : p->argv[p->i]);
    if (!lease_value)
        return cli_usage_error(p, "--lease is required (see %s --help)", p->cmd);
    if ((rc = cli_backend_check(p, NULL)) != CLI_OK)
        return rc;
    return cli_lease_value(p, lease_value, lease);
}

/* ---- holder ----------------------------------------------------------------- */

static const char holder_usage[] =
    "usage: k8slease holder --lease [NS/]NAME [--json]\n"
    "\n"
    "Print the holder of a Lease: identity, epoch (leaseTransitions), acquire and\n"
    "renew times, duration, and whether it expired (renewTime + duration past);\n"
    "with coordinated leader election also its strategy and preferred holder.\n"
    "With etcd: the leader of an election: identity (its key's value), epoch (its\n"
    "key's create revision) and lease TTL.\n"
    "\n"
    "  --lease [NS/]NAME      the Lease (required); with etcd, the election name\n"
    "  --json                 one JSON object\n" COMMON_HELP "\n"
    "Exit status: 0 held; 3 no holder, or expired (etcd: no candidate); 4 no such\n"
    "Lease; 1 error; 2 usage.\n";

static const cli_opt holder_opts[] = {
    {"--lease", OPT_LEASE, 1},
    {"--json", OPT_JSON, 0},
    {NULL, 0, 0},
};

static void print_time_json(FILE *f, const char *key, int64_t us)
{
    char t[40];

    fprintf(f, ",\"%s\":", key);
    if (us) {
        cli_format_time(t, sizeof(t), us, 6);
        fprintf(f, "\"%s\"", t);
    } else {
        fputs("null", f);
    }
}

static void print_time_text(FILE *f, const char *label, int64_t us)
{
    char t[40], ago[32];

    if (!us) {
        fprintf(f, "%-16s-\n", label);
        return;
    }
    cli_format_time(t, sizeof(t), us, 6);
    cli_format_duration(ago, sizeof(ago), (cli_wall_us() - us) / 1000);
    fprintf(f, "%-16s%s (%s ago)\n", label, t, ago);
}

/* etcd: the leader (h NULL: there is none). The times and "expired" mean
 * nothing there: a key is gone when its lease expires. */
static void print_etcd_holder(const char *election, const k8slease_holder *h, int json)
{
    const char *id = h ? h->identity : "";
    long long epoch = h ? (long long)h->epoch : -1, ttl = h ? (long long)h->lease_duration_s : 0;

    if (json) {
        fputs("{\"election\":", stdout);
        cli_json_string(stdout, election);
        fputs(",\"holder\":", stdout);
        cli_json_string(stdout, id);
        printf(",\"epoch\":%lld,\"lease_ttl_seconds\":%lld}\n", epoch, ttl);
        return;
    }
    printf("%-16s%s\n", "election:", election);
    printf("%-16s%s\n", "holder:", id[0] ? id : "(none)");
    if (!h)
        return;
    printf("%-16s%lld (create revision)\n", "epoch:", epoch);
    printf("%-16s%llds\n", "lease TTL:", ttl);
}

static void print_holder(const char *lease, const k8slease_holder *h, int json)
{
    if (json) {
        fputs("{\"lease\":", stdout);
        cli_json_string(stdout, lease);
        fputs(",\"holder\":", stdout);
        cli_json_string(stdout, h->identity);
        printf(",\"epoch\":%lld", (long long)h->epoch);
        print_time_json(stdout, "acquire_time", h->acquire_time_us);
        print_time_json(stdout, "renew_time", h->renew_time_us);
        printf(",\"lease_duration_seconds\":%lld,\"expired\":%s,\"resource_version\":",
               (long long)h->lease_duration_s, h->expired ? "true" : "false");
        cli_json_string(stdout, h->resource_version);
        /* Always there, "" when unset: one shape for every Lease. */
        fputs(",\"strategy\":", stdout);
        cli_json_string(stdout, h->strategy ? h->strategy : "");
        fputs(",\"preferred_holder\":", stdout);
        cli_json_string(stdout, h->preferred_holder ? h->preferred_holder : "");
        fputs("}\n", stdout);
        return;
    }
    printf("%-16s%s\n", "lease:", lease);
    printf("%-16s%s\n", "holder:", h->identity[0] ? h->identity : "(none)");
    printf("%-16s%lld\n", "epoch:", (long long)h->epoch);
    print_time_text(stdout, "acquired:", h->acquire_time_us);
    print_time_text(stdout, "renewed:", h->renew_time_us);
    printf("%-16s%llds\n", "lease duration:", (long long)h->lease_duration_s);
    printf("%-16s%s\n", "expired:", h->expired ? "yes" : "no");
    /* Coordinated leader election only: lines shown when set. */
    if (h->strategy && h->strategy[0])
        printf("%-16s%s\n", "strategy:", h->strategy);
    if (h->preferred_holder && h->preferred_holder[0])
        printf("preferred holder: %s\n", h->preferred_holder); /* wider than the rest */
}

int cli_holder(int argc, char **argv)
{
    k8slease_client *client = NULL;
    k8slease_holder *h = NULL;
    cli_parser p;
    cli_ref lease;
    char name[CLI_LEASE_MAX];
    int json = 0, rc, err;

    cli_parser_init(&p, "k8slease holder", holder_usage, holder_opts, argc, argv);
    if ((rc = parse(&p, &lease, &json, NULL, NULL)) != 0)
        return rc < 0 ? CLI_OK : rc;
    if ((rc = cli_client_new(&p.common, &client)) != CLI_OK)
        return rc;
    cli_ref_format(name, sizeof(name), &lease, &p.common, client);
    err = k8slease_holder_get(client, cli_ref_ns(&lease, &p.common), lease.name, 0, &h);
    if (p.common.backend == K8SLEASE_BACKEND_ETCD && (err == 0 || err == K8SLEASE_ENOTFOUND)) {
        /* No candidate is no holder: an election exists only while it has
         * candidates. */
        print_etcd_holder(name, err == 0 ? h : NULL, json);
        rc = err == 0 && h->identity[0] ? CLI_OK : CLI_NOHOLDER;
        if (fflush(stdout) != 0)
            rc = CLI_ERROR;
    } else if (err == K8SLEASE_ENOTFOUND) {
        cli_error("lease %s not found", name);
        rc = CLI_NOTFOUND;
    } else if (err != 0) {
        cli_error("%s", k8slease_error_last());
        rc = CLI_ERROR;
    } else {
        print_holder(name, h, json);
        rc = h->identity[0] && !h->expired ? CLI_OK : CLI_NOHOLDER;
        if (fflush(stdout) != 0)
            rc = CLI_ERROR;
    }
    k8slease_holder_free(h);
    k8slease_client_free(client);
    return rc;
}

/* ---- watch -------------------------------------------------------------------- */

static const char watch_usage[] =
    "usage: k8slease watch --lease [NS/]NAME [--json]\n"
    "\n"
    "Print the holder of a Lease, then one line per change of holder or epoch\n"
    "(not per renewal) until interrupted:\n"
    "  leader=ID epoch=N | released epoch=N | absent (no such Lease)\n"
    "With etcd: the leader of an election (epoch: its key's create revision), or\n"
    "absent when it has no candidate.\n"
    "\n"
    "  --lease [NS/]NAME      the Lease (required); with etcd, the election name\n"
    "  --json                 JSON lines\n" COMMON_HELP "\n"
    "Exit status: 0 interrupted (SIGINT, SIGTERM, SIGHUP); 1 error, or stdout closed;\n"
    "2 usage.\n";

int cli_watch(int argc, char **argv)
{
    k8slease_client *client = NULL;
    k8slease_watch *w = NULL;
    cli_events q;
    cli_parser p;
    cli_ref lease;
    int json = 0, rc;

    cli_parser_init(&p, "k8slease watch", watch_usage, holder_opts, argc, argv);
    if ((rc = parse(&p, &lease, &json, NULL, NULL)) != 0)
        return rc < 0 ? CLI_OK : rc;
    /* Before the client's thread exists: it must not take our signals. */
    if (cli_events_init(&q, 1) != 0)
        return CLI_ERROR;
    if ((rc = cli_client_new(&p.common, &client)) != CLI_OK)
        goto out;
    if (k8slease_watch_start(&w, client, cli_ref_ns(&lease, &p.common), lease.name,
                             cli_events_on_leader, &q) != 0) {
        cli_error("%s", k8slease_error_last());
        rc = CLI_ERROR;
        goto out;
    }
    /* Until a signal, or until nobody reads stdout any more. */
    for (rc = -1; rc < 0;) {
        cli_event *ev;

        if (cli_events_wait(&q, -1, &ev) < 0) {
            cli_error("out of memory: events lost");
            rc = CLI_ERROR;
            break;
        }
        if (ev->type == CLI_EV_LEADER) {
            if (cli_emit_holder(stdout, json, NULL, ev->identity, ev->epoch) != 0)
                rc = CLI_ERROR;
        } else if (ev->type == CLI_EV_SIGNAL && ev->sig != SIGCHLD) {
            rc = CLI_OK;
        }
        free(ev);
    }
out:
    k8slease_watch_free(w);
    k8slease_client_free(client);
    cli_events_fini(&q);
    return rc;
}

/* ---- release ------------------------------------------------------------------ */

static const char release_usage[] =
    "usage: k8slease release --lease [NS/]NAME --identity ID [--force]\n"
    "\n"
    "Release a Lease held by ID: holderIdentity \"\", so that a candidate takes it at\n"
    "once instead of waiting for it to expire (the epoch is kept). Refuses if\n"
    "another identity holds it, unless --force. With etcd: revoke the lease of the\n"
    "leader's key, which deletes the key and ends that candidate's session; the\n"
    "next candidate leads.\n"
    "\n"
    "  --lease [NS/]NAME      the Lease (required); with etcd, the election name\n"
    "  --identity ID          the holder we expect (required without --force)\n"
    "  --force                release whoever holds it\n" COMMON_HELP "\n"
    "Exit status: 0 released, or nobody held it; 1 error, or held by another\n"
    "identity; 2 usage; 4 no such Lease.\n";

static const cli_opt release_opts[] = {
    {"--lease", OPT_LEASE, 1},
    {"--identity", OPT_IDENTITY, 1},
    {"--force", OPT_FORCE, 0},
    {NULL, 0, 0},
};

int cli_release(int argc, char **argv)
{
    k8slease_client *client = NULL;
    k8slease_holder *h = NULL;
    const char *identity = NULL, *ns, *noun;
    cli_parser p;
    cli_ref lease;
    char name[CLI_LEASE_MAX];
    int force = 0, rc = CLI_OK, err;

    cli_parser_init(&p, "k8slease release", release_usage, release_opts, argc, argv);
    if ((rc = parse(&p, &lease, NULL, &identity, &force)) != 0)
        return rc < 0 ? CLI_OK : rc;
    if (!identity && !force)
        return cli_usage_error(&p, "--identity is required (or --force to release whoever "
                                   "holds the lease)");
    if ((rc = cli_client_new(&p.common, &client)) != CLI_OK)
        return rc;
    cli_ref_format(name, sizeof(name), &lease, &p.common, client);
    ns = cli_ref_ns(&lease, &p.common);
    noun = cli_lease_noun(&p.common);
    /* Read first, to say what happens; the release checks again itself. */
    err = k8slease_holder_get(client, ns, lease.name, 0, &h);
    if ((err == 0 && !h->identity[0]) ||
        (err == K8SLEASE_ENOTFOUND && p.common.backend == K8SLEASE_BACKEND_ETCD)) {
        printf("%s %s has no holder: nothing to release\n", noun, name);
        goto out;
    }
    if (err != 0)
        goto fail;
    if (!force && strcmp(h->identity, identity) != 0) {
        cli_error("%s %s is held by \"%s\", not \"%s\": not released (--force releases it "
                  "anyway)",
                  noun, name, h->identity, identity);
        rc = CLI_ERROR;
        goto out;
    }
    if ((err = k8slease_lease_release(client, ns, lease.name, identity ? identity : "", force,
                                      0)) != 0)
        goto fail;
    printf("released %s %s (holder \"%s\", epoch %lld)\n", noun, name, h->identity,
           (long long)h->epoch);
    goto out;
fail:
    if (err == K8SLEASE_ENOTFOUND)
        cli_error("%s %s not found", noun, name);
    else
        cli_error("%s", k8slease_error_last());
    rc = cli_exit_code(err);
out:
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = CLI_ERROR;
    k8slease_holder_free(h);
    k8slease_client_free(client);
    return rc;
}

/* ---- handoff ------------------------------------------------------------------ */

static const char handoff_usage[] =
    "usage: k8slease handoff --lease [NS/]NAME [--to ID] [--timeout DURATION]\n"
    "\n"
    "Ask the leader of a Lease to hand it over (planned handoff): writes the\n"
    "Lease's annotation k8slease.io/handoff-request, which a k8slease leader acts\n"
    "on at once (the same as `kubectl annotate lease NAME\n"
    "k8slease.io/handoff-request=[ID]`), then waits for the new holder and prints\n"
    "  handed over from=OLD epoch=N to=NEW epoch=M ms=T\n"
    "(T: from the request to the new term). Kubernetes only.\n"
    "\n"
    "  --lease [NS/]NAME      the Lease (required)\n"
    "  --to ID                the successor (default: the best known candidate: not\n"
    "                         terminating, the newest revision, the highest\n"
    "                         priority, the longest-lived)\n"
    "  --timeout DURATION     how long to wait for the new holder (default 30s)\n"
    "  --json                 a JSON line\n"
    "  --kubeconfig FILE, --context NAME, --namespace NS, --log-level LEVEL,\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 handed over; 1 error, or no new holder before the timeout;\n"
    "2 usage; 3 nobody holds the Lease; 4 no such Lease.\n";

static const cli_opt handoff_opts[] = {
    {"--lease", OPT_LEASE, 1}, {"--to", OPT_TO, 1}, {"--timeout", OPT_TIMEOUT, 1},
    {"--json", OPT_JSON, 0},   {NULL, 0, 0},
};

int cli_handoff(int argc, char **argv)
{
    k8slease_client *client = NULL;
    k8slease_holder *h = NULL;
    k8slease_watch *w = NULL;
    const char *to = NULL, *lease_value = NULL, *ns;
    int64_t timeout_ms = 30000, t0;
    char old[CLI_IDENTITY_MAX] = "";
    int64_t old_epoch = -1;
    cli_events q;
    cli_parser p;
    cli_ref lease;
    int json = 0, id, rc, err, have_q = 0, released = 0;

    cli_parser_init(&p, "k8slease handoff", handoff_usage, handoff_opts, argc, argv);
    while ((id = cli_next(&p)) > 0) {
        rc = 0;
        if (id == OPT_LEASE)
            lease_value = p.value;
        else if (id == OPT_JSON)
            json = 1;
        else if (id == OPT_TO && !(to = p.value)[0])
            rc = cli_flag_error(&p, "must not be empty");
        else if (id == OPT_TIMEOUT)
            rc = cli_duration_value(&p, 1, &timeout_ms);
        if (rc)
            return rc;
    }
    if (id == CLI_STOP)
        return p.exit_code;
    if (id == CLI_ARG || p.i < p.argc)
        return cli_usage_error(&p, "unexpected argument \"%s\"",
                               id == CLI_ARG ? p.value : p.argv[p.i]);
    if (!lease_value)
        return cli_usage_error(&p, "--lease is required (see %s --help)", p.cmd);
    if (p.common.backend == K8SLEASE_BACKEND_ETCD)
        return cli_usage_error(&p, "handoff is for Kubernetes Leases (--backend k8s)");
    if ((rc = cli_lease_value(&p, lease_value, &lease)) != CLI_OK)
        return rc;
    if (cli_events_init(&q, 1) != 0)
        return CLI_ERROR;
    have_q = 1;
    if ((rc = cli_client_new(&p.common, &client)) != CLI_OK)
        goto out;
    ns = cli_ref_ns(&lease, &p.common);
    if ((err = k8slease_holder_get(client, ns, lease.name, 0, &h)) != 0) {
        if (err == K8SLEASE_ENOTFOUND)
            cli_error("lease %s not found", lease.name);
        else
            cli_error("%s", k8slease_error_last());
        rc = cli_exit_code(err);
        goto out;
    }
    if (!h->identity[0]) {
        cli_error("lease %s has no holder: nothing to hand over", lease.name);
        rc = CLI_NOHOLDER;
        goto out;
    }
    snprintf(old, sizeof(old), "%s", h->identity);
    old_epoch = h->epoch;
    /* The watch first: its first report is the state before the request. */
    if (k8slease_watch_start(&w, client, ns, lease.name, cli_events_on_leader, &q) != 0 ||
        (t0 = cli_now_ms(), k8slease_lease_handoff(client, ns, lease.name, to)) != 0) {
        cli_error("%s", k8slease_error_last());
        rc = CLI_ERROR;
        goto out;
    }
    for (rc = -1; rc < 0;) {
        int64_t left = t0 + timeout_ms - cli_now_ms();
        cli_event *ev = NULL;
        int r = left > 0 ? cli_events_wait(&q, left, &ev) : 0;

        if (r < 0) {
            cli_error("out of memory: events lost");
            rc = CLI_ERROR;
        } else if (r == 0) {
            cli_error("lease %s: still held by \"%s\" (epoch %lld) after %lld ms: no handoff "
                      "(is its leader a k8slease elector?)",
                      lease.name, old, (long long)old_epoch, (long long)timeout_ms);
            rc = CLI_ERROR;
        } else if (ev->type == CLI_EV_SIGNAL && ev->sig != SIGCHLD) {
            rc = CLI_ERROR;
        } else if (ev->type == CLI_EV_LEADER && !ev->identity[0] && ev->epoch >= old_epoch) {
            released = 1; /* no candidate known: a plain release, anyone's next */
        } else if (ev->type == CLI_EV_LEADER && ev->identity[0] && strcmp(ev->identity, old) != 0 &&
                   (ev->epoch >= old_epoch + 2 || (released && ev->epoch > old_epoch)) &&
                   (!to || strcmp(ev->identity, to) == 0)) {
            /* The successor's own term: the handoff write names it one
             * epoch before (k8s/handoff.h), the term it takes is + 2. */
            cli_field f[] = {{"from", old, 0},
                             {json ? "from_epoch" : "epoch", NULL, old_epoch},
                             {"to", ev->identity, 0},
                             {json ? "to_epoch" : "epoch", NULL, ev->epoch},
                             {"ms", NULL, cli_now_ms() - t0}};

            rc = cli_emit(stdout, json, NULL, "handed over", 1, f, 5) != 0 ? CLI_ERROR : CLI_OK;
        }
        free(ev);
    }
out:
    k8slease_watch_free(w);
    k8slease_holder_free(h);
    k8slease_client_free(client);
    if (have_q)
        cli_events_fini(&q);
    return rc;
}
