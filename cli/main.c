/* k8slease: command-line front end of the library. Dispatch only; each
 * subcommand parses its own flags (common.c does the shared ones). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"elect", cli_elect},     {"holder", cli_holder},   {"watch", cli_watch},
    {"release", cli_release}, {"handoff", cli_handoff}, {"label", cli_label},
    {"demo", cli_demo},
};

static const char usage[] =
    "usage: k8slease <command> [options]\n"
    "\n"
    "Leader election over Kubernetes Leases (coordination.k8s.io/v1), or over etcd v3\n"
    "elections (--backend etcd).\n"
    "\n"
    "commands:\n"
    "  elect     campaign for a Lease; print events, or run a command only while\n"
    "            leader; optional pod label and HTTP sidecar (health, leader, metrics)\n"
    "  holder    print who holds a Lease (exit 0 held, 3 no holder, 4 no Lease)\n"
    "  watch     print the holder, then every change of holder or epoch\n"
    "  release   release a Lease held by an identity\n"
    "  handoff   ask the leader of a Lease to hand it over (to the best candidate)\n"
    "  label     set or clear a label on a Pod\n"
    "  demo      three candidates on one Lease: election, crash failover, handover\n"
    "\n"
    "Run 'k8slease <command> --help' for its flags; see also k8slease(1).\n"
    "Flags of every command: --kubeconfig FILE, --context NAME, --namespace NS,\n"
    "--log-level error|warn|info|debug, --help, --version.\n"
    "\n"
    "etcd (elect, holder, watch, release): the election of `etcdctl elect NAME`,\n"
    "named by --lease NAME (any non-empty string); epoch: the create revision of\n"
    "the leader's key.\n"
    "  --backend k8s|etcd         where elections live (default k8s)\n"
    "  --etcd-endpoints URL[,URL...]\n"
    "                             http:// or https:// URLs, tried in turn\n"
    "                             (default $ETCDCTL_ENDPOINTS)\n"
    "  --etcd-cacert FILE         CA of the servers (default $ETCDCTL_CACERT, else\n"
    "                             the system's)\n"
    "  --etcd-cert FILE, --etcd-key FILE\n"
    "                             client certificate and key (default\n"
    "                             $ETCDCTL_CERT, $ETCDCTL_KEY)\n"
    "  --etcd-user NAME           authenticate as NAME, with the password in\n"
    "                             --etcd-password-file FILE, else in\n"
    "                             $K8SLEASE_ETCD_PASSWORD (never on the command\n"
    "                             line: ps(1) would show it)\n";

int main(int argc, char **argv)
{
    /* Writes to a closed pipe fail with EPIPE and are reported; children
     * get the default disposition back (child.c). */
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2) {
        fputs(usage, stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage, stdout);
        return CLI_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("k8slease %s\n", k8slease_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < CLI_ARRAY_LEN(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "k8slease: unknown command \"%s\" (see k8slease --help)\n", argv[1]);
    return CLI_USAGE;
}
