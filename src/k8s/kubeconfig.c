/* Rest configuration from a kubeconfig chain or the in-cluster service
 * account. The exec plugins a kubeconfig names are run by core/credential.c. */
#include "k8s/kubeconfig.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "core/common.h"
#include "core/credential.h" /* the exec apiVersions a kubeconfig may name */
#include "core/text.h"

#define KC_FILE_MAX (16u << 20)
#define SA_FILE_MAX (1u << 20)
#define WHERE_MAX   320

static int nomem(void)
{
    return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
}

/* 0 when path is a readable non-directory, else an errno value. Opening it
 * is the only check that holds for root, who passes every access() test. */
static int check_readable(const char *path)
{
    struct stat st;
    int fd, e = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    if (fstat(fd, &st) < 0)
        e = errno;
    else if (S_ISDIR(st.st_mode))
        e = EISDIR;
    close(fd);
    return e;
}

/* Whole file into a NUL-terminated buffer. On failure the message is
 * "<path>: cannot read: <reason>" and *errnum tells why, so that the
 * kubeconfig chain can skip a missing file. */
static int read_file(const char *path, size_t max, char **out, size_t *out_len, int *errnum)
{
    kl__buf b = {0};
    struct stat st;
    char chunk[4096], ebuf[128];
    int fd = -1, err = 0;

    *out = NULL;
    *errnum = 0;
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(fd, &st) < 0) {
        *errnum = errno;
        goto out;
    }
    if (S_ISDIR(st.st_mode)) {
        *errnum = EISDIR;
        goto out;
    }
    if ((err = kl__buf_append(&b, "", 0)) < 0)
        goto out;
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            *errnum = errno;
            goto out;
        }
        if (n == 0)
            break;
        if (b.len + (size_t)n > max) {
            *errnum = EFBIG;
            goto out;
        }
        if ((err = kl__buf_append(&b, chunk, (size_t)n)) < 0)
            goto out;
    }
    *out = b.data;
    *out_len = b.len;
    b.data = NULL;
out:
    if (fd >= 0)
        close(fd);
    kl__buf_free(&b);
    if (err < 0)
        return nomem();
    if (*errnum)
        return kl__error_set(K8SLEASE_ECONFIG, "%s: cannot read: %s", path,
                             kl__strerror(*errnum, ebuf, sizeof(ebuf)));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Kubeconfig                                                               */
/* ------------------------------------------------------------------------ */

typedef struct kc_file {
    const char *path;
    char *dir; /* relative paths in the file resolve against it */
    yaml_document_t doc;
    int loaded;
    yaml_node_t *root; /* a mapping, or NULL for an empty document */
} kc_file;

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');

    if (!slash)
        return kl__strdup(".");
    if (slash == path)
        return kl__strdup("/");
    return kl__strndup(path, (size_t)(slash - path));
}

static char *resolve_path(const char *dir, const char *p)
{
    if (p[0] == '/')
        return kl__strdup(p);
    return kl__sprintf("%s/%s", dir, p);
}

/* "<file>: <where>.<key>: <what>" */
static int field_error(const kc_file *k, const char *where, const char *key, const char *fmt, ...)
    KL_PRINTF(4, 5);

static int field_error(const kc_file *k, const char *where, const char *key, const char *fmt, ...)
{
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return kl__error_set(K8SLEASE_ECONFIG, "%s: %s%s%s: %s", k->path, where ? where : "",
                         where && key ? "." : "", key ? key : "", what);
}

static yaml_node_t *node_at(kc_file *k, int index)
{
    return yaml_document_get_node(&k->doc, index);
}

/* go-yaml reads these as null, and kubeconfig fields treat "" as unset. */
static int is_null(const yaml_node_t *n)
{
    const char *v;

    if (!n)
        return 1;
    if (n->type != YAML_SCALAR_NODE)
        return 0;
    v = (const char *)n->data.scalar.value;
    if (n->data.scalar.length == 0)
        return 1;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    return !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") || !strcmp(v, "NULL");
}

/* Value of map[key], NULL when absent or null. */
static yaml_node_t *map_get(kc_file *k, yaml_node_t *map, const char *key)
{
    yaml_node_pair_t *p;

    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *kn = node_at(k, p->key);

        if (kn && kn->type == YAML_SCALAR_NODE &&
            !strcmp((const char *)kn->data.scalar.value, key)) {
            yaml_node_t *v = node_at(k, p->value);

            return is_null(v) ? NULL : v;
        }
    }
    return NULL;
}

/* Borrowed scalar (never ""), NULL when absent. */
static int get_str(kc_file *k, yaml_node_t *map, const char *where, const char *key,
                   const char **out)
{
    yaml_node_t *n = map_get(k, map, key);

    *out = NULL;
    if (!n)
        return 0;
    if (n->type != YAML_SCALAR_NODE)
        return field_error(k, where, key, "expected a string");
    *out = (const char *)n->data.scalar.value;
    return 0;
}

static int get_bool(kc_file *k, yaml_node_t *map, const char *where, const char *key, int *out)
{
    static const char *const truthy[] = {"true", "yes", "on", "y"};
    static const char *const falsy[] = {"false", "no", "off", "n"};
    const char *v;
    size_t i;
    int err;

    *out = 0;
    if ((err = get_str(k, map, where, key, &v)) < 0 || !v)
        return err;
    for (i = 0; i < KL_ARRAY_LEN(truthy); i++) {
        if (!strcasecmp(v, truthy[i])) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(v, falsy[i]))
            return 0;
    }
    return field_error(k, where, key, "\"%s\" is not a boolean", v);
}

static int get_typed(kc_file *k, yaml_node_t *map, const char *where, const char *key,
                     yaml_node_type_t type, yaml_node_t **out)
{
    yaml_node_t *n = map_get(k, map, key);

    *out = NULL;
    if (!n)
        return 0;
    if (n->type != type)
        return field_error(k, where, key, "expected a %s",
                           type == YAML_MAPPING_NODE ? "mapping" : "list");
    *out = n;
    return 0;
}

static void kc_close(kc_file *k)
{
    if (k->loaded)
        yaml_document_delete(&k->doc);
    kl__free(k->dir);
    memset(k, 0, sizeof(*k));
}

static int parse_error(const char *path, const yaml_parser_t *parser)
{
    if (parser->error == YAML_MEMORY_ERROR)
        return nomem();
    return kl__error_set(K8SLEASE_ECONFIG, "%s: line %lu column %lu: YAML parse error: %s%s%s%s",
                         path, (unsigned long)parser->problem_mark.line + 1,
                         (unsigned long)parser->problem_mark.column + 1,
                         parser->problem ? parser->problem : "invalid document",
                         parser->context ? " (" : "", parser->context ? parser->context : "",
                         parser->context ? ")" : "");
}

static int kc_open(kc_file *k, const char *path, int *errnum)
{
    yaml_document_t extra;
    yaml_parser_t parser;
    char *data = NULL;
    size_t len = 0;
    int err, parser_ready = 0;

    memset(k, 0, sizeof(*k));
    k->path = path;
    if ((err = read_file(path, KC_FILE_MAX, &data, &len, errnum)) < 0)
        goto out;
    if (!(k->dir = dir_of(path))) {
        err = nomem();
        goto out;
    }
    if (!yaml_parser_initialize(&parser)) {
        err = nomem();
        goto out;
    }
    parser_ready = 1;
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    if (!yaml_parser_load(&parser, &k->doc)) {
        err = parse_error(path, &parser);
        goto out;
    }
    k->loaded = 1;
    /* Parse on to the end so that trailing garbage is an error too; later
     * documents, if any, are ignored. */
    if (!yaml_parser_load(&parser, &extra)) {
        err = parse_error(path, &parser);
        goto out;
    }
    yaml_document_delete(&extra);
    k->root = yaml_document_get_root_node(&k->doc);
    if (is_null(k->root))
        k->root = NULL;
    else if (k->root->type != YAML_MAPPING_NODE)
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: top level: expected a mapping", path);
out:
    if (parser_ready)
        yaml_parser_delete(&parser);
    kl__free(data);
    return err;
}

/* Finds the entry of a top-level list (contexts, clusters, users) named
 * name. *body is its <kind> mapping (NULL when empty) and where names that
 * mapping in messages: "users[1] (name \"bob\").user". */
static int find_named(kc_file *k, const char *list, const char *kind, const char *name,
                      yaml_node_t **body, char *where, int *found)
{
    yaml_node_t *seq;
    yaml_node_item_t *it;
    int err;

    *found = 0;
    *body = NULL;
    if ((err = get_typed(k, k->root, NULL, list, YAML_SEQUENCE_NODE, &seq)) < 0 || !seq)
        return err;
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++) {
        size_t i = (size_t)(it - seq->data.sequence.items.start);
        yaml_node_t *entry = node_at(k, *it);
        char entry_where[WHERE_MAX];
        const char *ename;

        snprintf(entry_where, sizeof(entry_where), "%s[%zu]", list, i);
        if (!entry || entry->type != YAML_MAPPING_NODE)
            return field_error(k, entry_where, NULL, "expected a mapping");
        if ((err = get_str(k, entry, entry_where, "name", &ename)) < 0)
            return err;
        if (!ename || strcmp(ename, name) != 0)
            continue;
        snprintf(where, WHERE_MAX, "%s[%zu] (name \"%s\").%s", list, i, ename, kind);
        *found = 1;
        *body = map_get(k, entry, kind);
        if (*body && (*body)->type != YAML_MAPPING_NODE)
            return field_error(k, where, NULL, "expected a mapping");
        return 0;
    }
    return 0;
}

static int dup_opt(const char *s, char **out)
{
    if (s && !(*out = kl__strdup(s)))
        return nomem();
    return 0;
}

/* A file field: resolved against the kubeconfig's directory and, as
 * client-go validates, required to be readable. */
static int file_field(kc_file *k, yaml_node_t *map, const char *where, const char *key, char **out)
{
    const char *v;
    char ebuf[128];
    int err, e;

    if ((err = get_str(k, map, where, key, &v)) < 0 || !v)
        return err;
    if (!(*out = resolve_path(k->dir, v)))
        return nomem();
    if ((e = check_readable(*out)) != 0)
        return field_error(k, where, key, "%s: %s", *out, kl__strerror(e, ebuf, sizeof(ebuf)));
    return 0;
}

static int data_field(kc_file *k, yaml_node_t *map, const char *where, const char *key, char **out,
                      size_t *out_len)
{
    const char *v;
    int err, ok;

    if ((err = get_str(k, map, where, key, &v)) < 0 || !v)
        return err;
    if (!(*out = kl__base64_decode(v, strlen(v), out_len, &ok)))
        return ok ? nomem() : field_error(k, where, key, "invalid base64");
    return 0;
}

static int load_cluster(kc_file *k, yaml_node_t *c, const char *where, kl__restconfig *cfg)
{
    const char *server, *sni;
    size_t n, scheme;
    int err;

    if ((err = get_str(k, c, where, "server", &server)) < 0)
        return err;
    if (!server)
        return field_error(k, where, "server", "not set");
    if (!strncmp(server, "https://", 8))
        scheme = 8;
    else if (!strncmp(server, "http://", 7))
        scheme = 7;
    else
        return field_error(k, where, "server", "\"%s\" does not start with https:// or http://",
                           server);
    n = strlen(server);
    while (n > scheme && server[n - 1] == '/')
        n--;
    if (n == scheme)
        return field_error(k, where, "server", "\"%s\" has no host", server);
    if (!(cfg->server = kl__strndup(server, n)))
        return nomem();
    if ((err = file_field(k, c, where, "certificate-authority", &cfg->ca_file)) < 0 ||
        (err = data_field(k, c, where, "certificate-authority-data", &cfg->ca_pem,
                          &cfg->ca_pem_len)) < 0 ||
        (err = get_bool(k, c, where, "insecure-skip-tls-verify", &cfg->insecure)) < 0 ||
        (err = get_str(k, c, where, "tls-server-name", &sni)) < 0 ||
        (err = dup_opt(sni, &cfg->tls_server_name)) < 0)
        return err;
    return 0;
}

/* exec.args (strings) or exec.env ({name, value} mappings) into a
 * NULL-terminated array. */
static int load_exec_list(kc_file *k, yaml_node_t *exec, const char *where, const char *key,
                          char ***out)
{
    yaml_node_t *seq;
    yaml_node_item_t *items = NULL;
    char **list;
    size_t i, n = 0;
    int err;

    if ((err = get_typed(k, exec, where, key, YAML_SEQUENCE_NODE, &seq)) < 0)
        return err;
    if (seq) {
        items = seq->data.sequence.items.start;
        n = (size_t)(seq->data.sequence.items.top - items);
    }
    if (!(list = *out = kl__calloc(n + 1, sizeof(*list))))
        return nomem();
    for (i = 0; i < n; i++) {
        yaml_node_t *item = node_at(k, items[i]);
        char item_where[WHERE_MAX + 64];
        const char *name, *value;

        snprintf(item_where, sizeof(item_where), "%s.%s[%zu]", where, key, i);
        if (!strcmp(key, "args")) {
            if (!item || item->type != YAML_SCALAR_NODE)
                return field_error(k, item_where, NULL, "expected a string");
            list[i] = kl__strdup((const char *)item->data.scalar.value);
        } else {
            if (!item || item->type != YAML_MAPPING_NODE)
                return field_error(k, item_where, NULL, "expected a mapping");
            if ((err = get_str(k, item, item_where, "name", &name)) < 0 ||
                (err = get_str(k, item, item_where, "value", &value)) < 0)
                return err;
            if (!name || strchr(name, '='))
                return field_error(k, item_where, "name", "missing or invalid");
            list[i] = kl__sprintf("%s=%s", name, value ? value : "");
        }
        if (!list[i])
            return nomem();
    }
    return 0;
}

static int load_exec(kc_file *k, yaml_node_t *e, const char *where, kl__exec_config **out)
{
    kl__exec_config *exec;
    const char *api, *command;
    int err;

    if (!(exec = *out = kl__calloc(1, sizeof(*exec))))
        return nomem();
    if ((err = get_str(k, e, where, "apiVersion", &api)) < 0 ||
        (err = get_str(k, e, where, "command", &command)) < 0)
        return err;
    if (!api)
        return field_error(k, where, "apiVersion", "not set");
    if (!kl__exec_api_supported(api))
        return field_error(k, where, "apiVersion", "\"%s\" is not supported (use %s or %s)", api,
                           KL_EXEC_API_V1, KL_EXEC_API_V1BETA1);
    if (!command)
        return field_error(k, where, "command", "not set");
    if (!(exec->api_version = kl__strdup(api)) || !(exec->config_dir = kl__strdup(k->dir)))
        return nomem();
    /* A bare name is looked up in PATH, as exec.Command does. */
    if (strchr(command, '/'))
        exec->command = resolve_path(k->dir, command);
    else
        exec->command = kl__strdup(command);
    if (!exec->command)
        return nomem();
    if ((err = load_exec_list(k, e, where, "args", &exec->args)) < 0 ||
        (err = load_exec_list(k, e, where, "env", &exec->env)) < 0)
        return err;
    return 0;
}

static int load_user(kc_file *k, yaml_node_t *u, const char *where, kl__restconfig *cfg)
{
    yaml_node_t *exec;
    const char *token, *unsupported;
    char exec_where[WHERE_MAX + 8];
    int err, has_cert, has_key;

    if ((err = file_field(k, u, where, "client-certificate", &cfg->cert_file)) < 0 ||
        (err = data_field(k, u, where, "client-certificate-data", &cfg->cert_pem,
                          &cfg->cert_pem_len)) < 0 ||
        (err = file_field(k, u, where, "client-key", &cfg->key_file)) < 0 ||
        (err = data_field(k, u, where, "client-key-data", &cfg->key_pem, &cfg->key_pem_len)) < 0)
        return err;
    has_cert = cfg->cert_file || cfg->cert_pem;
    has_key = cfg->key_file || cfg->key_pem;
    if (has_cert && !has_key)
        return field_error(k, where, NULL, "client-certificate without client-key");
    if (has_key && !has_cert)
        return field_error(k, where, NULL, "client-key without client-certificate");

    if ((err = get_str(k, u, where, "token", &token)) < 0 ||
        (err = dup_opt(token, &cfg->token)) < 0)
        return err;
    /* Not read here: the HTTP layer re-reads it as it rotates. */
    if ((err = get_str(k, u, where, "tokenFile", &token)) < 0)
        return err;
    if (token && !(cfg->token_file = resolve_path(k->dir, token)))
        return nomem();

    if ((err = get_typed(k, u, where, "exec", YAML_MAPPING_NODE, &exec)) < 0)
        return err;
    snprintf(exec_where, sizeof(exec_where), "%s.exec", where);
    if (exec && (err = load_exec(k, exec, exec_where, &cfg->exec)) < 0)
        return err;

    /* Ignoring these would turn into a puzzling 401 later. */
    unsupported = map_get(k, u, "auth-provider") ? "auth-provider"
                  : map_get(k, u, "username")    ? "username"
                  : map_get(k, u, "password")    ? "password"
                                                 : NULL;
    if (unsupported)
        return field_error(k, where, unsupported,
                           "not supported (use exec, token or certificates)");
    return 0;
}

/* Fills cfg from one kubeconfig. *skip is set when the file does not pick
 * a context (no current-context, or no requested context), so that the
 * chain tries the next one. */
static int kc_resolve(kc_file *k, const char *context, kl__restconfig *cfg, int *skip)
{
    yaml_node_t *ctx, *cluster, *user;
    const char *name = context, *cluster_name, *user_name, *ns;
    char ctx_where[WHERE_MAX], cluster_where[WHERE_MAX], user_where[WHERE_MAX];
    int err, found;

    *skip = 0;
    if (!name) {
        if ((err = get_str(k, k->root, NULL, "current-context", &name)) < 0)
            return err;
        if (!name) {
            *skip = 1;
            return field_error(k, NULL, "current-context", "not set");
        }
    }
    if ((err = find_named(k, "contexts", "context", name, &ctx, ctx_where, &found)) < 0)
        return err;
    if (!found) {
        *skip = context != NULL;
        return kl__error_set(K8SLEASE_ECONFIG, "%s: context \"%s\" not found", k->path, name);
    }
    if ((err = get_str(k, ctx, ctx_where, "cluster", &cluster_name)) < 0 ||
        (err = get_str(k, ctx, ctx_where, "user", &user_name)) < 0 ||
        (err = get_str(k, ctx, ctx_where, "namespace", &ns)) < 0)
        return err;

    if (!cluster_name)
        return field_error(k, ctx_where, "cluster", "not set");
    if ((err = find_named(k, "clusters", "cluster", cluster_name, &cluster, cluster_where,
                          &found)) < 0)
        return err;
    if (!found)
        return field_error(k, ctx_where, "cluster", "cluster \"%s\" not found", cluster_name);
    if ((err = load_cluster(k, cluster, cluster_where, cfg)) < 0)
        return err;

    /* No user is legal: anonymous access. */
    if (user_name) {
        if ((err = find_named(k, "users", "user", user_name, &user, user_where, &found)) < 0)
            return err;
        if (!found)
            return field_error(k, ctx_where, "user", "user \"%s\" not found", user_name);
        if ((err = load_user(k, user, user_where, cfg)) < 0)
            return err;
    }

    if (!(cfg->ns = kl__strdup(ns ? ns : "default")) || !(cfg->source = kl__strdup(k->path)))
        return nomem();
    return 0;
}

static int load_one(const char *path, const char *context, kl__restconfig **out, int *skip)
{
    kl__restconfig *cfg = NULL;
    kc_file k;
    int err, errnum = 0;

    *out = NULL;
    *skip = 0;
    if ((err = kc_open(&k, path, &errnum)) < 0) {
        *skip = errnum == ENOENT;
        goto out;
    }
    if (!(cfg = kl__calloc(1, sizeof(*cfg)))) {
        err = nomem();
        goto out;
    }
    if ((err = kc_resolve(&k, context, cfg, skip)) < 0)
        goto out;
    *out = cfg;
    cfg = NULL;
out:
    kl__restconfig_free(cfg);
    kc_close(&k);
    return err;
}

static int has_entry(const char *list)
{
    for (; list && *list; list++)
        if (*list != ':')
            return 1;
    return 0;
}

int kl__restconfig_from_kubeconfig(kl__restconfig **out, const char *path_list, const char *context)
{
    char *list = NULL, *p, *next, *path = NULL;
    const char *home;
    kl__buf tried = {0};
    int err = 0, skip, n = 0;

    *out = NULL;
    if (!path_list)
        path_list = getenv("KUBECONFIG");
    if (!has_entry(path_list)) {
        home = getenv("HOME");
        if (!home || !*home) {
            err = kl__error_set(K8SLEASE_ECONFIG, "no kubeconfig: KUBECONFIG and HOME are unset");
            goto out;
        }
        if (!(path = kl__sprintf("%s/.kube/config", home))) {
            err = nomem();
            goto out;
        }
        err = load_one(path, context, out, &skip);
        goto out;
    }
    if (!(list = kl__strdup(path_list))) {
        err = nomem();
        goto out;
    }
    for (p = list; p; p = next) {
        if ((next = strchr(p, ':')) != NULL)
            *next++ = '\0';
        if (!*p)
            continue;
        err = load_one(p, context, out, &skip);
        if (err == 0 || !skip)
            goto out;
        if (kl__buf_printf(&tried, "%s%s", n++ ? "; " : "", kl__error_get()) < 0) {
            err = nomem();
            goto out;
        }
    }
    if (n == 1)
        err = kl__error_set(K8SLEASE_ECONFIG, "%s", tried.data);
    else
        err = kl__error_set(K8SLEASE_ECONFIG, "no usable kubeconfig in \"%s\": %s", path_list,
                            tried.data);
out:
    kl__buf_free(&tried);
    kl__free(list);
    kl__free(path);
    return err;
}

int kl__restconfig_incluster(kl__restconfig **out, const char *sa_dir)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    kl__restconfig *cfg = NULL;
    char *token = NULL, *ns = NULL, *ns_path = NULL, ebuf[128];
    size_t len;
    int err = 0, e;

    *out = NULL;
    if (!host || !*host || !port || !*port) {
        err = kl__error_set(K8SLEASE_ECONFIG,
                            "in-cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT "
                            "must be set");
        goto out;
    }
    if (!(cfg = kl__calloc(1, sizeof(*cfg))) ||
        !(cfg->server =
              kl__sprintf(strchr(host, ':') && host[0] != '[' ? "https://[%s]:%s" : "https://%s:%s",
                          host, port)) ||
        !(cfg->source = kl__strdup("in-cluster")) ||
        !(cfg->token_file = kl__sprintf("%s/token", sa_dir)) ||
        !(cfg->ca_file = kl__sprintf("%s/ca.crt", sa_dir)) ||
        !(ns_path = kl__sprintf("%s/namespace", sa_dir))) {
        err = nomem();
        goto out;
    }
    /* Read once to fail early; the HTTP layer re-reads it as it rotates. */
    if ((err = read_file(cfg->token_file, SA_FILE_MAX, &token, &len, &e)) < 0)
        goto out;
    kl__trim(token);
    if (!*token) {
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: empty", cfg->token_file);
        goto out;
    }
    if ((e = check_readable(cfg->ca_file)) != 0) {
        err = kl__error_set(K8SLEASE_ECONFIG, "%s: cannot read: %s", cfg->ca_file,
                            kl__strerror(e, ebuf, sizeof(ebuf)));
        goto out;
    }
    if ((err = read_file(ns_path, SA_FILE_MAX, &ns, &len, &e)) < 0 && e != ENOENT)
        goto out;
    if (ns)
        kl__trim(ns);
    if (!(cfg->ns = kl__strdup(ns && *ns ? ns : "default"))) {
        err = nomem();
        goto out;
    }
    err = 0;
    *out = cfg;
    cfg = NULL;
out:
    kl__restconfig_free(cfg);
    kl__free(token);
    kl__free(ns);
    kl__free(ns_path);
    return err;
}

int kl__restconfig_load(kl__restconfig **out, const char *path, const char *context)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *dir = getenv("K8SLEASE_SERVICEACCOUNT_DIR");
    char *incluster_msg = NULL;
    int err, skip;

    *out = NULL;
    if (path)
        return load_one(path, context, out, &skip);
    /* A requested context can only come from a kubeconfig. */
    if (context || !host || !*host)
        return kl__restconfig_from_kubeconfig(out, NULL, context);
    if ((err = kl__restconfig_incluster(out, dir && *dir ? dir : KL_SA_DIR_DEFAULT)) == 0 ||
        err != K8SLEASE_ECONFIG)
        return err;
    /* Like the seed: InClusterConfig, then the kubeconfig chain. */
    if (!(incluster_msg = kl__strdup(kl__error_get())))
        return nomem();
    err = kl__restconfig_from_kubeconfig(out, NULL, NULL);
    if (err == K8SLEASE_ECONFIG)
        err = kl__error_wrap(err, "in-cluster config: %s; kubeconfig", incluster_msg);
    kl__free(incluster_msg);
    return err;
}
