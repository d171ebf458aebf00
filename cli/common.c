/* What the subcommands share: flag parsing, flag values (durations, object
 * references, identities, label rules), the client, messages and output. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* Set by the parser: the prefix and the threshold of every message. */
static const char *msg_prefix = "k8slease";
static k8slease_log_level msg_level = K8SLEASE_LOG_WARN;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* ---- messages --------------------------------------------------------- */

static void vmessage(k8slease_log_level level, const char *fmt, va_list ap)
{
    char line[2048];

    vsnprintf(line, sizeof(line), fmt, ap);
    /* One fprintf: lines from different threads do not interleave. */
    if (level == K8SLEASE_LOG_ERROR)
        fprintf(stderr, "%s: %s\n", msg_prefix, line);
    else
        fprintf(stderr, "%s: %s: %s\n", msg_prefix, level_names[level], line);
}

void cli_log(k8slease_log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level > msg_level)
        return;
    va_start(ap, fmt);
    vmessage(level, fmt, ap);
    va_end(ap);
}

void cli_notice(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmessage(K8SLEASE_LOG_ERROR, fmt, ap);
    va_end(ap);
}

static void library_log(k8slease_log_level level, const char *msg, void *user_data)
{
    (void)user_data;
    cli_log(level, "%s", msg);
}

int cli_exit_code(int err)
{
    return err == K8SLEASE_ENOTFOUND ? CLI_NOTFOUND : CLI_ERROR;
}

/* The password read from --etcd-password-file; wiped once the client has
 * its copy. */
static char password_buf[4096];

static void wipe(void *p, size_t n)
{
    /* volatile: the stores must happen although nothing reads them. */
    volatile unsigned char *b = p;

    while (n--)
        *b++ = 0;
}

void cli_client_options(const cli_common *c, k8slease_client_options *o)
{
    o->kubeconfig = c->kubeconfig;
    o->context = c->context;
    o->log_cb = library_log;
    o->log_level = c->log_level;
    o->backend = c->backend;
    if (c->backend == K8SLEASE_BACKEND_ETCD) {
        o->etcd_endpoints = c->etcd_endpoints;
        o->etcd_ca_file = c->etcd_ca_file;
        o->etcd_cert_file = c->etcd_cert_file;
        o->etcd_key_file = c->etcd_key_file;
        o->etcd_username = c->etcd_username;
        o->etcd_password = c->etcd_username ? c->etcd_password : NULL;
    }
}

int cli_client_new(const cli_common *c, k8slease_client **client)
{
    k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
    const char *msg, *field = "etcd_endpoints: ";
    int err;

    cli_client_options(c, &o);
    err = k8slease_client_new(client, &o);
    wipe(password_buf, sizeof(password_buf));
    if (err == 0)
        return CLI_OK;
    msg = k8slease_error_last();
    if (c->backend != K8SLEASE_BACKEND_ETCD) {
        cli_error("%s", msg);
        return CLI_ERROR;
    }
    /* The library names its option; the user wrote a flag (or a variable). */
    if (strncmp(msg, field, strlen(field)) == 0)
        cli_error("%s: %s", c->etcd_endpoints_from, msg + strlen(field));
    else
        cli_error("%s", msg);
    /* Every etcd setting comes from a flag or a variable: the library
     * refusing one (EINVAL) is a bad flag value. */
    return err == K8SLEASE_EINVAL ? CLI_USAGE : CLI_ERROR;
}

/* ---- flags ------------------------------------------------------------ */

enum {
    OPT_KUBECONFIG = 1000,
    OPT_CONTEXT,
    OPT_NAMESPACE,
    OPT_LOG_LEVEL,
    OPT_HELP,
    OPT_VERSION,
    OPT_BACKEND,
    OPT_ETCD_ENDPOINTS,
    OPT_ETCD_CACERT,
    OPT_ETCD_CERT,
    OPT_ETCD_KEY,
    OPT_ETCD_USER,
    OPT_ETCD_PASSWORD_FILE,
    OPT_ETCD_PASSWORD
};

static const cli_opt common_opts[] = {
    {"--kubeconfig", OPT_KUBECONFIG, 1},
    {"--context", OPT_CONTEXT, 1},
    {"--namespace", OPT_NAMESPACE, 1},
    {"-n", OPT_NAMESPACE, 1},
    {"--log-level", OPT_LOG_LEVEL, 1},
    {"--help", OPT_HELP, 0},
    {"-h", OPT_HELP, 0},
    {"--version", OPT_VERSION, 0},
    {"--backend", OPT_BACKEND, 1},
    {"--etcd-endpoints", OPT_ETCD_ENDPOINTS, 1},
    {"--etcd-cacert", OPT_ETCD_CACERT, 1},
    {"--etcd-cert", OPT_ETCD_CERT, 1},
    {"--etcd-key", OPT_ETCD_KEY, 1},
    {"--etcd-user", OPT_ETCD_USER, 1},
    {"--etcd-password-file", OPT_ETCD_PASSWORD_FILE, 1},
    /* Refused before its value is looked at: see cli_next(). */
    {"--etcd-password", OPT_ETCD_PASSWORD, 0},
    {NULL, 0, 0},
};

void cli_parser_init(cli_parser *p, const char *cmd, const char *usage, const cli_opt *opts,
                     int argc, char **argv)
{
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->usage = usage;
    p->opts = opts;
    p->argc = argc;
    p->argv = argv;
    p->i = 1;
    p->common.log_level = K8SLEASE_LOG_WARN;
    msg_prefix = cmd;
    msg_level = p->common.log_level;
}

static const cli_opt *find_opt(const cli_opt *opts, const char *name)
{
    for (; opts && opts->name; opts++)
        if (strcmp(opts->name, name) == 0)
            return opts;
    return NULL;
}

int cli_usage_error(const cli_parser *p, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", p->cmd, msg);
    return CLI_USAGE;
}

int cli_flag_error(const cli_parser *p, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s %s: %s\n", p->cmd, p->flag, p->value, msg);
    return CLI_USAGE;
}

static int is_dns_label(const char *s, size_t len)
{
    if (len == 0 || len > 63)
        return 0;
    for (size_t i = 0; i < len; i++) {
        int alnum = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9');

        if (!alnum && (s[i] != '-' || i == 0 || i == len - 1))
            return 0;
    }
    return 1;
}

static int is_dns_subdomain(const char *s)
{
    size_t len = strlen(s);

    if (len == 0 || len > 253)
        return 0;
    for (const char *p = s;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);

        if (!is_dns_label(p, n))
            return 0;
        if (!dot)
            return 1;
        p = dot + 1;
    }
}

static const char rule_namespace[] =
    "namespace must be a lowercase RFC 1123 label (a-z, 0-9 and '-', at most 63 characters)";
static const char rule_subdomain[] =
    "a lowercase RFC 1123 subdomain (a-z, 0-9, '-' and '.', at most 253 characters)";

/* A common flag o; CLI_OK to go on, or CLI_STOP with p->exit_code set. */
static int common_flag(cli_parser *p, const cli_opt *o)
{
    cli_common *c = &p->common;
    const char **etcd_value = NULL;

    switch (o->id) {
    case OPT_KUBECONFIG:
    case OPT_CONTEXT:
    case OPT_NAMESPACE:
        /* Kubernetes only: cli_backend_check() names it with etcd. */
        if (!c->k8s_flag)
            c->k8s_flag = o->name;
        break;
    case OPT_ETCD_ENDPOINTS:
    case OPT_ETCD_CACERT:
    case OPT_ETCD_CERT:
    case OPT_ETCD_KEY:
    case OPT_ETCD_USER:
    case OPT_ETCD_PASSWORD_FILE:
        if (!c->etcd_flag)
            c->etcd_flag = o->name;
        if (!p->value[0])
            goto bad_empty;
        break;
    }
    switch (o->id) {
    case OPT_KUBECONFIG:
        c->kubeconfig = p->value;
        break;
    case OPT_CONTEXT:
        if (!p->value[0])
            goto bad_empty;
        c->context = p->value;
        break;
    case OPT_NAMESPACE:
        if (!is_dns_label(p->value, strlen(p->value))) {
            p->exit_code = cli_flag_error(p, "%s", rule_namespace);
            return CLI_STOP;
        }
        c->ns = p->value;
        break;
    case OPT_BACKEND:
        if (strcmp(p->value, "k8s") == 0) {
            c->backend = K8SLEASE_BACKEND_K8S;
        } else if (strcmp(p->value, "etcd") == 0) {
            c->backend = K8SLEASE_BACKEND_ETCD;
        } else {
            p->exit_code = cli_flag_error(p, "must be k8s or etcd");
            return CLI_STOP;
        }
        break;
    case OPT_ETCD_ENDPOINTS:
        c->etcd_endpoints = p->value;
        c->etcd_endpoints_from = "--etcd-endpoints";
        break;
    case OPT_ETCD_CACERT:
        etcd_value = &c->etcd_ca_file;
        break;
    case OPT_ETCD_CERT:
        etcd_value = &c->etcd_cert_file;
        break;
    case OPT_ETCD_KEY:
        etcd_value = &c->etcd_key_file;
        break;
    case OPT_ETCD_USER:
        /* etcdctl's --user takes "NAME:PASSWORD": do not echo the value,
         * it may hold a password. */
        if (strchr(p->value, ':')) {
            p->exit_code = cli_usage_error(
                p, "--etcd-user: a user name without ':' (the password goes in "
                   "--etcd-password-file FILE or $K8SLEASE_ETCD_PASSWORD, never on the command "
                   "line)");
            return CLI_STOP;
        }
        c->etcd_username = p->value;
        break;
    case OPT_ETCD_PASSWORD_FILE:
        c->etcd_password_file = p->value;
        break;
    case OPT_LOG_LEVEL:
        for (size_t i = 0; i < CLI_ARRAY_LEN(level_names); i++)
            if (strcmp(p->value, level_names[i]) == 0) {
                p->common.log_level = (k8slease_log_level)i;
                msg_level = p->common.log_level;
                return CLI_OK;
            }
        p->exit_code = cli_flag_error(p, "must be error, warn, info or debug");
        return CLI_STOP;
    case OPT_HELP:
        fputs(p->usage, stdout);
        p->exit_code = CLI_OK;
        return CLI_STOP;
    case OPT_VERSION:
        printf("k8slease %s\n", k8slease_version());
        p->exit_code = CLI_OK;
        return CLI_STOP;
    }
    if (etcd_value)
        *etcd_value = p->value;
    return CLI_OK;
bad_empty:
    p->exit_code = cli_flag_error(p, "must not be empty");
    return CLI_STOP;
}

int cli_next(cli_parser *p)
{
    for (;;) {
        const char *a, *eq;
        const cli_opt *o;
        size_t len;

        p->flag = p->value = NULL;
        if (p->i >= p->argc)
            return CLI_END;
        a = p->argv[p->i++];
        if (strcmp(a, "--") == 0)
            return CLI_END;
        if (a[0] != '-' || a[1] == '\0') {
            p->value = a;
            return CLI_ARG;
        }
        eq = a[1] == '-' ? strchr(a, '=') : NULL;
        len = eq ? (size_t)(eq - a) : strlen(a);
        if (len >= sizeof(p->flagbuf))
            len = sizeof(p->flagbuf) - 1;
        memcpy(p->flagbuf, a, len);
        p->flagbuf[len] = '\0';
        p->flag = p->flagbuf;
        if (!(o = find_opt(p->opts, p->flag)) && !(o = find_opt(common_opts, p->flag))) {
            p->exit_code = cli_usage_error(p, "unknown flag %s (see %s --help)", p->flag, p->cmd);
            return CLI_STOP;
        }
        if (o->id == OPT_ETCD_PASSWORD) {
            p->exit_code = cli_usage_error(
                p,
                "%s: no such flag: a password on the command line shows in ps(1); use "
                "--etcd-password-file FILE or $K8SLEASE_ETCD_PASSWORD",
                p->flag);
            return CLI_STOP;
        }
        if (o->has_value) {
            /* "--identity --unique" is a forgotten value, not an identity. */
            if (eq)
                p->value = eq + 1;
            else if (p->i < p->argc && strncmp(p->argv[p->i], "--", 2) != 0)
                p->value = p->argv[p->i++];
            else {
                p->exit_code = cli_usage_error(p, "%s needs a value", p->flag);
                return CLI_STOP;
            }
        } else if (eq) {
            p->exit_code = cli_usage_error(p, "%s takes no value", p->flag);
            return CLI_STOP;
        }
        if (o->id < OPT_KUBECONFIG)
            return o->id;
        if (common_flag(p, o) == CLI_STOP)
            return CLI_STOP;
    }
}

/* ---- durations -------------------------------------------------------- */

int cli_parse_duration(const char *s, int64_t *ms)
{
    static const struct {
        const char *name;
        int64_t ns;
    } units[] = {
        /* "ms" before "m": the first prefix that matches wins. */
        {"ns", 1},
        {"us", 1000},
        {"\xc2\xb5s", 1000}, /* U+00B5 micro sign */
        {"\xce\xbcs", 1000}, /* U+03BC Greek mu */
        {"ms", 1000000},
        {"s", 1000000000},
        {"m", 60LL * 1000000000},
        {"h", 3600LL * 1000000000},
    };
    long double total = 0; /* ns; long double keeps every digit we care about */
    int negative = 0;

    if (*s == '+' || *s == '-')
        negative = *s++ == '-';
    if (strcmp(s, "0") == 0) {
        *ms = 0;
        return 0;
    }
    if (!*s)
        return -1;
    while (*s) {
        long double v = 0, scale = 1;
        int digits = 0;
        size_t u, n = 0;

        for (; *s >= '0' && *s <= '9'; s++, digits++)
            v = v * 10 + (*s - '0');
        if (*s == '.') {
            for (s++; *s >= '0' && *s <= '9'; s++, digits++)
                v += (*s - '0') / (scale *= 10);
        }
        if (digits == 0)
            return -1;
        for (u = 0; u < CLI_ARRAY_LEN(units); u++) {
            n = strlen(units[u].name);
            if (strncmp(s, units[u].name, n) == 0)
                break;
        }
        if (u == CLI_ARRAY_LEN(units))
            return -1;
        total += v * units[u].ns;
        s += n;
        if (total > (long double)INT64_MAX)
            return -1;
    }
    /* Whole milliseconds, rounded up: "1us" must not become 0. */
    *ms = (int64_t)((total + 999999) / 1000000);
    if (negative)
        *ms = -*ms;
    return 0;
}

void cli_format_duration(char *buf, size_t size, int64_t ms)
{
    int64_t h, m, s, frac;
    int n = 0;

    if (ms < 0) {
        n = snprintf(buf, size, "-");
        ms = -ms;
    }
    if ((size_t)n >= size)
        return;
    if (ms < 1000) {
        snprintf(buf + n, size - (size_t)n, "%lldms", (long long)ms);
        return;
    }
    h = ms / 3600000;
    m = ms / 60000 % 60;
    s = ms / 1000 % 60;
    frac = ms % 1000;
    if (h)
        n += snprintf(buf + n, size - (size_t)n, "%lldh", (long long)h);
    if ((h || m) && (size_t)n < size)
        n += snprintf(buf + n, size - (size_t)n, "%lldm", (long long)m);
    if ((size_t)n >= size)
        return;
    if (frac == 0) {
        snprintf(buf + n, size - (size_t)n, "%llds", (long long)s);
    } else {
        char f[8];
        size_t len = (size_t)snprintf(f, sizeof(f), "%03lld", (long long)frac);

        while (len > 0 && f[len - 1] == '0')
            f[--len] = '\0';
        snprintf(buf + n, size - (size_t)n, "%lld.%ss", (long long)s, f);
    }
}

int cli_duration_value(const cli_parser *p, int64_t min_ms, int64_t *ms)
{
    char min[32];

    if (cli_parse_duration(p->value, ms) != 0)
        return cli_flag_error(p, "not a duration (examples: 500ms, 15s, 1m30s, 1.5s)");
    if (*ms < min_ms) {
        if (min_ms == 0)
            return cli_flag_error(p, "must not be negative");
        if (min_ms == 1)
            return cli_flag_error(p, "must be greater than 0");
        cli_format_duration(min, sizeof(min), min_ms);
        return cli_flag_error(p, "must be at least %s", min);
    }
    return 0;
}

/* ---- object references, identities, labels ----------------------------- */

int cli_ref_value(const cli_parser *p, const char *what, cli_ref *ref)
{
    const char *v = p->value, *slash = strchr(v, '/');
    const char *name = slash ? slash + 1 : v;

    memset(ref, 0, sizeof(*ref));
    if (slash && strchr(name, '/'))
        return cli_flag_error(p, "must be NAME or NAMESPACE/NAME");
    if (slash) {
        size_t n = (size_t)(slash - v);

        if (!is_dns_label(v, n))
            return cli_flag_error(p, "%s", rule_namespace);
        memcpy(ref->ns, v, n);
        ref->ns[n] = '\0';
    }
    if (!is_dns_subdomain(name))
        return cli_flag_error(p, "%s name must be %s", what, rule_subdomain);
    snprintf(ref->name, sizeof(ref->name), "%s", name);
    return 0;
}

int cli_pod_env(const cli_parser *p, const char *flag, cli_ref *ref)
{
    const char *name = getenv("POD_NAME"), *ns = getenv("POD_NAMESPACE");

    memset(ref, 0, sizeof(*ref));
    if (!name || !name[0])
        return cli_usage_error(p,
                               "%s needs $POD_NAME (the Pod this process runs in: set it from "
                               "the Downward API, metadata.name)",
                               flag);
    if (!is_dns_subdomain(name))
        return cli_usage_error(p, "%s: $POD_NAME \"%.80s\": pod name must be %s", flag, name,
                               rule_subdomain);
    if (ns && ns[0] && !is_dns_label(ns, strlen(ns)))
        return cli_usage_error(p, "%s: $POD_NAMESPACE \"%.80s\": %s", flag, ns, rule_namespace);
    snprintf(ref->name, sizeof(ref->name), "%s", name);
    if (ns)
        snprintf(ref->ns, sizeof(ref->ns), "%s", ns);
    return 0;
}

int cli_is_dns_label(const char *s)
{
    return is_dns_label(s, strlen(s));
}

int cli_lease_value(cli_parser *p, const char *value, cli_ref *ref)
{
    size_t n = strlen(value);

    p->flag = "--lease";
    p->value = value;
    if (p->common.backend != K8SLEASE_BACKEND_ETCD)
        return cli_ref_value(p, "lease", ref);
    /* As `etcdctl elect NAME`: any bytes; "NS/" means nothing to etcd. */
    memset(ref, 0, sizeof(*ref));
    if (n == 0)
        return cli_usage_error(p, "--lease: the election name must not be empty");
    if (n >= sizeof(ref->name))
        return cli_usage_error(p,
                               "--lease \"%.40s...\": the election name must be at most %zu bytes",
                               value, sizeof(ref->name) - 1);
    memcpy(ref->name, value, n + 1);
    return 0;
}

const char *cli_ref_ns(const cli_ref *ref, const cli_common *c)
{
    return ref->ns[0] ? ref->ns : c->ns;
}

void cli_ref_format(char *buf, size_t size, const cli_ref *ref, const cli_common *c,
                    const k8slease_client *client)
{
    const char *ns = cli_ref_ns(ref, c);

    if (c->backend == K8SLEASE_BACKEND_ETCD)
        snprintf(buf, size, "%s", ref->name);
    else
        snprintf(buf, size, "%s/%s", ns ? ns : k8slease_client_namespace(client), ref->name);
}

const char *cli_lease_noun(const cli_common *c)
{
    return c->backend == K8SLEASE_BACKEND_ETCD ? "election" : "lease";
}

/* ---- backends ---------------------------------------------------------- */

const char *cli_backend_name(k8slease_backend b)
{
    return b == K8SLEASE_BACKEND_ETCD ? "etcd" : "k8s";
}

/* *field = the variable var ("$NAME") when no flag set it (an empty
 * variable counts as unset). Returns what to name in messages: flag, or
 * var when it was used. */
static const char *env_default(const char **field, const char *var, const char *flag)
{
    const char *v;

    if (*field || !(v = getenv(var + 1)) || !v[0])
        return flag;
    *field = v;
    return var;
}

/* A PEM file the library will read at the first request: say now, naming
 * the flag, that it cannot be read, rather than fail every request. */
static int check_readable(const char *what, const char *path)
{
    if (path && access(path, R_OK) != 0) {
        cli_error("%s %s: cannot read: %s", what, path, strerror(errno));
        return CLI_ERROR;
    }
    return CLI_OK;
}

/* The password from --etcd-password-file: the file's content, without one
 * final line end. */
static int read_password(const char *path, const char **out)
{
    const char *why = NULL;
    size_t n = 0;
    ssize_t r;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        cli_error("--etcd-password-file %s: cannot read: %s", path, strerror(errno));
        return CLI_ERROR;
    }
    while (n < sizeof(password_buf) &&
           (r = read(fd, password_buf + n, sizeof(password_buf) - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            why = strerror(errno);
            break;
        }
        n += (size_t)r;
    }
    close(fd);
    if (!why && n == sizeof(password_buf)) {
        why = "longer than 4095 bytes";
    } else if (!why) {
        if (n > 0 && password_buf[n - 1] == '\n')
            n--;
        if (n > 0 && password_buf[n - 1] == '\r')
            n--;
        password_buf[n] = '\0';
        if (n == 0)
            why = "is empty";
        else if (strlen(password_buf) != n)
            why = "contains a NUL byte";
        else if (strpbrk(password_buf, "\r\n"))
            why = "has more than one line";
    }
    if (why) {
        wipe(password_buf, sizeof(password_buf));
        cli_error("--etcd-password-file %s: %s", path, why);
        return CLI_ERROR;
    }
    *out = password_buf;
    return CLI_OK;
}

int cli_backend_check(cli_parser *p, const char *k8s_only)
{
    cli_common *c = &p->common;
    const char *ca, *cert, *key, *pw;
    int rc;

    if (k8s_only && (c->backend == K8SLEASE_BACKEND_ETCD || c->etcd_flag))
        return cli_usage_error(
            p, "%s: not with this command: %s",
            c->backend == K8SLEASE_BACKEND_ETCD ? "--backend etcd" : c->etcd_flag, k8s_only);
    if (c->backend != K8SLEASE_BACKEND_ETCD) {
        if (c->etcd_flag)
            return cli_usage_error(p, "%s needs --backend etcd", c->etcd_flag);
        return CLI_OK;
    }
    if (c->k8s_flag)
        return cli_usage_error(p, "%s: Kubernetes only, not with --backend etcd", c->k8s_flag);
    /* etcdctl's variables, so that a shell set up for etcdctl works. */
    c->etcd_endpoints_from =
        env_default(&c->etcd_endpoints, "$ETCDCTL_ENDPOINTS", "--etcd-endpoints");
    ca = env_default(&c->etcd_ca_file, "$ETCDCTL_CACERT", "--etcd-cacert");
    cert = env_default(&c->etcd_cert_file, "$ETCDCTL_CERT", "--etcd-cert");
    key = env_default(&c->etcd_key_file, "$ETCDCTL_KEY", "--etcd-key");
    if (!c->etcd_endpoints)
        return cli_usage_error(p, "--backend etcd needs --etcd-endpoints URL[,URL...] (or "
                                  "$ETCDCTL_ENDPOINTS)");
    if (c->etcd_cert_file && !c->etcd_key_file)
        return cli_usage_error(p, "%s needs --etcd-key FILE (or $ETCDCTL_KEY)", cert);
    if (c->etcd_key_file && !c->etcd_cert_file)
        return cli_usage_error(p, "%s needs --etcd-cert FILE (or $ETCDCTL_CERT)", key);
    if (c->etcd_password_file && !c->etcd_username)
        return cli_usage_error(p, "--etcd-password-file needs --etcd-user");
    if ((rc = check_readable(ca, c->etcd_ca_file)) != CLI_OK ||
        (rc = check_readable(cert, c->etcd_cert_file)) != CLI_OK ||
        (rc = check_readable(key, c->etcd_key_file)) != CLI_OK)
        return rc;
    if (!c->etcd_username)
        return CLI_OK;
    if (c->etcd_password_file)
        return read_password(c->etcd_password_file, &c->etcd_password);
    if ((pw = getenv("K8SLEASE_ETCD_PASSWORD")) && pw[0]) {
        c->etcd_password = pw;
        return CLI_OK;
    }
    return cli_usage_error(p,
                           "--etcd-user %s needs a password: --etcd-password-file FILE or "
                           "$K8SLEASE_ETCD_PASSWORD (not on the command line, where ps(1) "
                           "shows it)",
                           c->etcd_username);
}

/* [A-Za-z0-9._-]{0,63}, starting and ending alphanumeric. */
static int is_label_name(const char *s, size_t n)
{
    if (n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');

        if (!alnum && (i == 0 || i == n - 1 || (c != '-' && c != '_' && c != '.')))
            return 0;
    }
    return 1;
}

const char *cli_label_key_error(const char *key)
{
    const char *slash = strchr(key, '/');
    const char *name = slash ? slash + 1 : key;
    char prefix[254];

    if (slash) {
        size_t n = (size_t)(slash - key);

        if (n == 0 || n >= sizeof(prefix))
            goto bad;
        memcpy(prefix, key, n);
        prefix[n] = '\0';
        if (!is_dns_subdomain(prefix))
            goto bad;
    }
    if (name[0] && is_label_name(name, strlen(name)))
        return NULL;
bad:
    return "a label key must be [PREFIX/]NAME: NAME of 1 to 63 characters [A-Za-z0-9._-] "
           "starting and ending alphanumeric, PREFIX a DNS subdomain";
}

const char *cli_label_value_error(const char *value)
{
    if (is_label_name(value, strlen(value)))
        return NULL;
    return "a label value must be at most 63 characters [A-Za-z0-9._-] starting and ending "
           "alphanumeric";
}

static void random_hex(char *out, size_t digits)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char bytes[16];
    int fd = open("/dev/urandom", O_RDONLY);
    ssize_t n = fd >= 0 ? read(fd, bytes, sizeof(bytes)) : -1;

    if (fd >= 0)
        close(fd);
    if (n != (ssize_t)sizeof(bytes)) {
        /* No /dev/urandom (a bare chroot): time and pid still differ. */
        uint64_t x = (uint64_t)cli_wall_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)cli_now_ns();

        for (size_t i = 0; i < sizeof(bytes); i++, x = x * 6364136223846793005ULL + 1)
            bytes[i] = (unsigned char)(x >> 56);
    }
    for (size_t i = 0; i < digits && i / 2 < sizeof(bytes); i++)
        out[i] = hex[(bytes[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    out[digits] = '\0';
}

int cli_identity(const cli_parser *p, const char *flag_value, int unique, char *out, size_t size)
{
    const char *pod = getenv("POD_NAME");
    char host[HOST_NAME_MAX + 1], suffix[10];
    const char *base;
    int n;

    if (flag_value) {
        base = flag_value;
    } else if (pod && pod[0]) {
        base = pod;
    } else if (gethostname(host, sizeof(host)) == 0) {
        host[sizeof(host) - 1] = '\0';
        base = host;
    } else {
        cli_error("no --identity, no $POD_NAME, and gethostname failed: %s", strerror(errno));
        return CLI_ERROR;
    }
    if (!base[0])
        return cli_usage_error(p, "--identity: must not be empty");
    suffix[0] = '\0';
    if (unique) {
        suffix[0] = '-';
        random_hex(suffix + 1, 8);
    }
    n = snprintf(out, size, "%s%s", base, suffix);
    if (n < 0 || (size_t)n >= size)
        return cli_usage_error(p, "identity \"%.40s...\": must be shorter than %zu bytes", base,
                               size);
    return CLI_OK;
}

/* ---- clocks and output ------------------------------------------------ */

int64_t cli_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t cli_now_ms(void)
{
    return cli_now_ns() / 1000000;
}

int64_t cli_wall_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void cli_format_time(char *buf, size_t size, int64_t wall_us, int digits)
{
    time_t secs = (time_t)(wall_us / 1000000);
    long frac = (long)(wall_us % 1000000);
    struct tm tm;
    char date[32];

    if (frac < 0) {
        frac += 1000000;
        secs--;
    }
    gmtime_r(&secs, &tm);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
    if (digits == 3)
        snprintf(buf, size, "%s.%03ldZ", date, frac / 1000);
    else
        snprintf(buf, size, "%s.%06ldZ", date, frac);
}

void cli_json_string(FILE *f, const char *s)
{
    putc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*c < 0x20)
                fprintf(f, "\\u%04x", *c);
            else
                putc(*c, f);
        }
    }
    putc('"', f);
}

int cli_emit(FILE *f, int json, const char *prefix, const char *event, int show_event,
             const cli_field *fields, size_t n)
{
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    int ok;

    if (!m)
        return -1;
    if (json) {
        char now[40];

        cli_format_time(now, sizeof(now), cli_wall_us(), 3);
        fprintf(m, "{\"time\":\"%s\",\"event\":", now);
        cli_json_string(m, event);
        for (size_t i = 0; i < n; i++) {
            putc(',', m);
            cli_json_string(m, fields[i].key);
            putc(':', m);
            if (fields[i].s)
                cli_json_string(m, fields[i].s);
            else
                fprintf(m, "%lld", (long long)fields[i].n);
        }
        fputs("}\n", m);
    } else {
        const char *sep = "";

        fputs(prefix ? prefix : "", m);
        if (show_event) {
            fputs(event, m);
            sep = " ";
        }
        for (size_t i = 0; i < n; i++, sep = " ") {
            if (fields[i].s)
                fprintf(m, "%s%s=%s", sep, fields[i].key, fields[i].s);
            else
                fprintf(m, "%s%s=%lld", sep, fields[i].key, (long long)fields[i].n);
        }
        putc('\n', m);
    }
    ok = fclose(m) == 0;
    /* The whole line in one stdio call, flushed at once: on stderr (unbuffered)
     * one write(2), which neither a library log line of another thread nor the
     * command's own output (the same file) can tear. */
    ok = ok && fwrite(line, 1, len, f) == len;
    free(line);
    return ok && fflush(f) == 0 && !ferror(f) ? 0 : -1;
}

int cli_emit_holder(FILE *f, int json, const char *prefix, const char *identity, int64_t epoch)
{
    cli_field fields[] = {{"leader", identity, 0}, {"epoch", NULL, epoch}};

    if (epoch < 0)
        return cli_emit(f, json, prefix, "absent", 1, NULL, 0);
    if (!identity[0])
        return cli_emit(f, json, prefix, "released", 1, fields + 1, 1);
    return cli_emit(f, json, prefix, "leader", 0, fields, 2);
}
