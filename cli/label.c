/* k8slease label set|clear: put a label on a Pod, or take it off. */
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: k8slease label set --pod [NS/]POD KEY=VALUE\n"
    "       k8slease label clear --pod [NS/]POD KEY\n"
    "\n"
    "Set or remove metadata.labels[KEY] of a Pod (a JSON merge patch). To keep a\n"
    "label on the leader's Pod, see k8slease elect --label-pod.\n"
    "\n"
    "  --pod [NS/]POD         the Pod (required)\n"
    "  --kubeconfig FILE, --context NAME, --namespace NS, --log-level error|warn|info|debug,\n"
    "  --help, --version\n"
    "\n"
    "Exit status: 0 done; 1 error; 2 usage; 4 no such Pod.\n";

enum { OPT_POD = 1 };

static const cli_opt opts[] = {
    {"--pod", OPT_POD, 1},
    {NULL, 0, 0},
};

/* KEY=VALUE for set, KEY for clear, into key/value. */
static int parse_label(const cli_parser *p, int set, const char *arg, char *key, size_t key_size,
                       char *value, size_t value_size)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
    const char *why;

    if (set && !eq)
        return cli_usage_error(p, "%s: must be KEY=VALUE", arg);
    if (!set && eq)
        return cli_usage_error(p, "%s: must be KEY (clear takes no value)", arg);
    if (n >= key_size || (eq && strlen(eq + 1) >= value_size))
        return cli_usage_error(p, "%s: too long", arg);
    memcpy(key, arg, n);
    key[n] = '\0';
    snprintf(value, value_size, "%s", eq ? eq + 1 : "");
    if ((why = cli_label_key_error(key)) || (set && (why = cli_label_value_error(value))))
        return cli_usage_error(p, "%s: %s", arg, why);
    return 0;
}

int cli_label(int argc, char **argv)
{
    k8slease_client *client = NULL;
    const char *arg = NULL;
    char key[320], value[64], name[CLI_LEASE_MAX];
    cli_parser p;
    cli_ref pod;
    int id, set, have_pod = 0, rc, err;

    cli_parser_init(&p, "k8slease label", usage, opts, argc, argv);
    if (argc < 2 || (strcmp(argv[1], "set") != 0 && strcmp(argv[1], "clear") != 0)) {
        /* Let "label --help" and "label --version" work. */
        if (argc >= 2 && argv[1][0] == '-' && cli_next(&p) == CLI_STOP)
            return p.exit_code;
        return cli_usage_error(&p, "expected \"set\" or \"clear\" (see k8slease label --help)");
    }
    set = strcmp(argv[1], "set") == 0;
    cli_parser_init(&p, set ? "k8slease label set" : "k8slease label clear", usage, opts, argc - 1,
                    argv + 1);
    while ((id = cli_next(&p)) != CLI_END) {
        if (id == CLI_STOP)
            return p.exit_code;
        if (id == OPT_POD) {
            if ((rc = cli_ref_value(&p, "pod", &pod)) != 0)
                return rc;
            have_pod = 1;
        } else if (id == CLI_ARG) {
            if (arg)
                return cli_usage_error(&p, "one label at a time (got \"%s\" and \"%s\")", arg,
                                       p.value);
            arg = p.value;
        }
    }
    if (p.i < p.argc && !arg)
        arg = p.argv[p.i++];
    if (p.i < p.argc)
        return cli_usage_error(&p, "unexpected argument \"%s\"", p.argv[p.i]);
    if (!have_pod)
        return cli_usage_error(&p, "--pod is required (see k8slease label --help)");
    if (!arg)
        return cli_usage_error(&p, "missing %s", set ? "KEY=VALUE" : "KEY");
    if ((rc = parse_label(&p, set, arg, key, sizeof(key), value, sizeof(value))) != 0)
        return rc;
    if ((rc = cli_backend_check(&p, "Pods are Kubernetes objects")) != CLI_OK)
        return rc;

    if ((rc = cli_client_new(&p.common, &client)) != CLI_OK)
        return rc;
    cli_ref_format(name, sizeof(name), &pod, &p.common, client);
    err =
        k8slease_pod_label(client, cli_ref_ns(&pod, &p.common), pod.name, key, set ? value : NULL);
    if (err == K8SLEASE_ENOTFOUND) {
        cli_error("pod %s not found", name);
    } else if (err != 0) {
        cli_error("%s", k8slease_error_last());
    } else if (set) {
        printf("pod %s: label %s=%s set\n", name, key, value);
    } else {
        printf("pod %s: label %s removed\n", name, key);
    }
    rc = err ? cli_exit_code(err) : CLI_OK;
    if (fflush(stdout) != 0 && rc == CLI_OK)
        rc = CLI_ERROR;
    k8slease_client_free(client);
    return rc;
}
