/* Kubeconfig, in-cluster config and exec credential plugins, against files
 * written into a fresh temporary directory per test.
 *
 * Length: one test per rule of the loader (each field, each source, each
 * error message); they are independent and need no server. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/common.h"
#include "core/credential.h"
#include "k8s/kubeconfig.h"
#include "testlib.h"

#define API_V1      "client.authentication.k8s.io/v1"
#define API_V1BETA1 "client.authentication.k8s.io/v1beta1"

static const char *const env_vars[] = {"KUBECONFIG",
                                       "HOME",
                                       "KUBERNETES_SERVICE_HOST",
                                       "KUBERNETES_SERVICE_PORT",
                                       "K8SLEASE_SERVICEACCOUNT_DIR",
                                       "KL_TEST_OUTER",
                                       "KL_TEST_VAR"};
static char *saved_env[KL_ARRAY_LEN(env_vars)];
static char tmpdir[PATH_MAX];

/* Rotating buffers so that several results can live in one expression. */
static char *scratch(void)
{
    static char bufs[8][8192];
    static unsigned next;

    return bufs[next++ % KL_ARRAY_LEN(bufs)];
}

static const char *fmt(const char *format, ...) KL_PRINTF(1, 2);

static const char *fmt(const char *format, ...)
{
    char *buf = scratch();
    va_list ap;

    va_start(ap, format);
    vsnprintf(buf, 8192, format, ap);
    va_end(ap);
    return buf;
}

/* Path of name inside the test's temporary directory. */
static const char *tp(const char *name)
{
    return fmt("%s/%s", tmpdir, name);
}

static const char *b64(const char *data)
{
    char *enc = kl_test_base64(data), *out = scratch();

    assert_true(strlen(enc) < 8192);
    strcpy(out, enc);
    free(enc);
    return out;
}

static const char *write_file(const char *name, const char *content)
{
    const char *path = tp(name);
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    assert_int_equal(fputs(content, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    return path;
}

static const char *write_script(const char *name, const char *body)
{
    const char *path = write_file(name, fmt("#!/bin/sh\n%s\n", body));

    assert_int_equal(chmod(path, 0755), 0);
    return path;
}

static void make_dir(const char *name)
{
    assert_int_equal(mkdir(tp(name), 0755), 0);
}

static void rm_rf(const char *path)
{
    struct stat st;
    DIR *d;
    struct dirent *e;

    if (lstat(path, &st) < 0)
        return;
    if (S_ISDIR(st.st_mode) && (d = opendir(path)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            char child[PATH_MAX];

            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
            rm_rf(child);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int setup(void **state)
{
    size_t i;

    (void)state;
    strcpy(tmpdir, "/tmp/kl_kubeconfig_XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    for (i = 0; i < KL_ARRAY_LEN(env_vars); i++) {
        const char *v = getenv(env_vars[i]);

        saved_env[i] = v ? strdup(v) : NULL;
        unsetenv(env_vars[i]);
    }
    kl__error_clear();
    return 0;
}

static int teardown(void **state)
{
    size_t i;

    (void)state;
    kl__alloc_fail_after(-1);
    kl__exec_set_timeout_ms(0);
    rm_rf(tmpdir);
    for (i = 0; i < KL_ARRAY_LEN(env_vars); i++) {
        if (saved_env[i])
            setenv(env_vars[i], saved_env[i], 1);
        else
            unsetenv(env_vars[i]);
        free(saved_env[i]);
        saved_env[i] = NULL;
    }
    return 0;
}

/* err must be code and the message must contain sub. */
#define assert_fails(expr, code, sub)                                                              \
    do {                                                                                           \
        int err_ = (expr);                                                                         \
        const char *sub_ = (sub);                                                                  \
        if (err_ != (code) || !strstr(kl__error_get(), sub_))                                      \
            print_error("got %d \"%s\"\nwant %d containing \"%s\"\n", err_, kl__error_get(),       \
                        (code), sub_);                                                             \
        assert_int_equal(err_, (code));                                                            \
        assert_non_null(strstr(kl__error_get(), sub_));                                            \
    } while (0)

#define CA_PEM   "-----BEGIN CERTIFICATE-----\nMIIBcaCA\n-----END CERTIFICATE-----\n"
#define CERT_PEM "-----BEGIN CERTIFICATE-----\nMIIBclient\n-----END CERTIFICATE-----\n"
#define KEY_PEM  "-----BEGIN EC PRIVATE KEY-----\nMHckey\n-----END EC PRIVATE KEY-----\n"

/* A kubeconfig with one context "dev" over cluster "c" and user "u"; the
 * arguments are the indented bodies of the cluster and user mappings. */
static const char *simple_config(const char *cluster_body, const char *user_body)
{
    return fmt("apiVersion: v1\n"
               "kind: Config\n"
               "current-context: dev\n"
               "clusters:\n"
               "- name: c\n"
               "  cluster:\n%s"
               "contexts:\n"
               "- name: dev\n"
               "  context:\n"
               "    cluster: c\n"
               "    user: u\n"
               "users:\n"
               "- name: u\n"
               "  user:\n%s",
               cluster_body, user_body);
}

static kl__restconfig *load_ok(const char *path, const char *context)
{
    kl__restconfig *cfg = NULL;
    int err = kl__restconfig_load(&cfg, path, context);

    if (err)
        print_error("load: %d %s\n", err, kl__error_get());
    assert_int_equal(err, 0);
    assert_non_null(cfg);
    return cfg;
}

static void assert_load_fails(const char *path, const char *context, const char *sub)
{
    kl__restconfig *cfg = (kl__restconfig *)1;

    assert_fails(kl__restconfig_load(&cfg, path, context), K8SLEASE_ECONFIG, sub);
    assert_null(cfg);
}

/* ------------------------------------------------------------------------ */
/* base64                                                                   */
/* ------------------------------------------------------------------------ */

static void assert_b64(const char *in, const char *want, size_t want_len)
{
    size_t len = 99;
    int ok = 0;
    char *out = kl__base64_decode(in, strlen(in), &len, &ok);

    assert_int_equal(ok, 1);
    assert_non_null(out);
    assert_int_equal(len, want_len);
    assert_memory_equal(out, want, want_len);
    assert_int_equal(out[len], '\0');
    kl__free(out);
}

static void assert_b64_bad(const char *in)
{
    size_t len = 99;
    int ok = 1;
    char *out = kl__base64_decode(in, strlen(in), &len, &ok);

    if (out)
        print_error("\"%s\" decoded\n", in);
    assert_null(out);
    assert_int_equal(ok, 0);
}

static void test_base64_valid(void **state)
{
    (void)state;
    assert_b64("", "", 0);
    assert_b64("Zg==", "f", 1);
    assert_b64("Zm8=", "fo", 2);
    assert_b64("Zm9v", "foo", 3);
    assert_b64("Zm9vYmFy", "foobar", 6);
    assert_b64("AAE=", "\0\1", 2);
    assert_b64("+/+/", "\xfb\xff\xbf", 3);
}

static void test_base64_whitespace(void **state)
{
    (void)state;
    assert_b64("Zm9v\nYmFy\n", "foobar", 6);
    assert_b64("  Zm 9v\r\n\tYm\nFy  ", "foobar", 6);
    assert_b64("Zg=\n=\n", "f", 1);
    assert_b64("\n\n", "", 0);
}

static void test_base64_invalid(void **state)
{
    (void)state;
    assert_b64_bad("Zg");       /* padding required */
    assert_b64_bad("Zm9");      /* padding required */
    assert_b64_bad("Zm9v!");    /* bad character */
    assert_b64_bad("Zm9v-_");   /* URL alphabet */
    assert_b64_bad("Zg==Zg=="); /* data after padding */
    assert_b64_bad("Zg==x");
    assert_b64_bad("Z===");
    assert_b64_bad("====");
    assert_b64_bad("=");
    assert_b64_bad("Zm=v");
    assert_b64_bad("Zg=");
}

static void test_base64_binary_roundtrip(void **state)
{
    char raw[256];
    const char *enc;
    size_t len, i;
    char *out;
    int ok;

    (void)state;
    /* Every byte value but NUL (the test encoder takes C strings). */
    for (i = 0; i < 255; i++)
        raw[i] = (char)(i + 1);
    raw[255] = '\0';
    enc = b64(raw);
    out = kl__base64_decode(enc, strlen(enc), &len, &ok);
    assert_non_null(out);
    assert_int_equal(len, 255);
    assert_memory_equal(out, raw, 255);
    kl__free(out);
    /* out_len and ok are optional. */
    out = kl__base64_decode("Zm9v", 4, NULL, NULL);
    assert_string_equal(out, "foo");
    kl__free(out);
    /* in_len bounds the input: no NUL needed. */
    out = kl__base64_decode("Zm9vYmFy", 4, &len, &ok);
    assert_string_equal(out, "foo");
    kl__free(out);
}

static void test_base64_enomem(void **state)
{
    int ok = 0;

    (void)state;
    kl__alloc_fail_after(0);
    assert_null(kl__base64_decode("Zm9v", 4, NULL, &ok));
    kl__alloc_fail_after(-1);
    assert_int_equal(ok, 1);
}

/* ------------------------------------------------------------------------ */
/* Kubeconfig: fields                                                       */
/* ------------------------------------------------------------------------ */

static void test_kubeconfig_inline_data(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", fmt("apiVersion: v1\n"
                                    "kind: Config\n"
                                    "preferences: {}\n"
                                    "current-context: dev\n"
                                    "clusters:\n"
                                    "- name: other\n"
                                    "  cluster:\n"
                                    "    server: https://other.example:6443\n"
                                    "- name: dev-cluster\n"
                                    "  cluster:\n"
                                    "    server: https://127.0.0.1:6443/\n"
                                    "    certificate-authority-data: %s\n"
                                    "    tls-server-name: kubernetes.default\n"
                                    "contexts:\n"
                                    "- name: other\n"
                                    "  context: {cluster: other, user: nobody}\n"
                                    "- name: dev\n"
                                    "  context:\n"
                                    "    cluster: dev-cluster\n"
                                    "    user: alice\n"
                                    "    namespace: team-a\n"
                                    "users:\n"
                                    "- name: nobody\n"
                                    "  user: {token: nope}\n"
                                    "- name: alice\n"
                                    "  user:\n"
                                    "    client-certificate-data: %s\n"
                                    "    client-key-data: %s\n",
                                    b64(CA_PEM), b64(CERT_PEM), b64(KEY_PEM)));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://127.0.0.1:6443");
    assert_string_equal(cfg->source, path);
    assert_string_equal(cfg->ns, "team-a");
    assert_string_equal(cfg->tls_server_name, "kubernetes.default");
    assert_int_equal(cfg->insecure, 0);
    assert_int_equal(cfg->ca_pem_len, strlen(CA_PEM));
    assert_string_equal(cfg->ca_pem, CA_PEM);
    assert_int_equal(cfg->cert_pem_len, strlen(CERT_PEM));
    assert_string_equal(cfg->cert_pem, CERT_PEM);
    assert_int_equal(cfg->key_pem_len, strlen(KEY_PEM));
    assert_string_equal(cfg->key_pem, KEY_PEM);
    assert_null(cfg->ca_file);
    assert_null(cfg->cert_file);
    assert_null(cfg->key_file);
    assert_null(cfg->token);
    assert_null(cfg->token_file);
    assert_null(cfg->exec);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_files_relative(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    make_dir("kube");
    make_dir("kube/pki");
    write_file("kube/ca.crt", CA_PEM);
    write_file("kube/pki/client.crt", CERT_PEM);
    write_file("client.key", KEY_PEM);
    path = write_file("kube/config", simple_config(fmt("    server: https://k8s.example\n"
                                                       "    certificate-authority: ca.crt\n"),
                                                   fmt("    client-certificate: pki/client.crt\n"
                                                       "    client-key: %s\n",
                                                       tp("client.key"))));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://k8s.example");
    assert_string_equal(cfg->ca_file, tp("kube/ca.crt"));
    assert_string_equal(cfg->cert_file, tp("kube/pki/client.crt"));
    assert_string_equal(cfg->key_file, tp("client.key"));
    assert_null(cfg->ca_pem);
    assert_null(cfg->cert_pem);
    assert_null(cfg->key_pem);
    assert_string_equal(cfg->ns, "default");
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_file_and_data_both_kept(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    write_file("ca.crt", CA_PEM);
    write_file("tls.crt", CERT_PEM);
    write_file("tls.key", KEY_PEM);
    path = write_file("config", simple_config(fmt("    server: https://k8s.example\n"
                                                  "    certificate-authority: ca.crt\n"
                                                  "    certificate-authority-data: %s\n",
                                                  b64("data-ca")),
                                              fmt("    client-certificate: tls.crt\n"
                                                  "    client-key-data: %s\n",
                                                  b64("data-key"))));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->ca_file, tp("ca.crt"));
    assert_string_equal(cfg->ca_pem, "data-ca");
    assert_string_equal(cfg->cert_file, tp("tls.crt"));
    assert_null(cfg->cert_pem);
    assert_null(cfg->key_file);
    assert_string_equal(cfg->key_pem, "data-key");
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_token_inline(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example:443\n",
                                              "    token: \"abc.def-123\"\n"));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->token, "abc.def-123");
    assert_null(cfg->token_file);
    assert_null(cfg->exec);
    assert_null(cfg->cert_pem);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_token_file(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    make_dir("sub");
    path = write_file("sub/config", simple_config("    server: https://k8s.example\n",
                                                  "    tokenFile: secrets/token\n"));
    cfg = load_ok(path, NULL);
    /* Kept, not read: the file may not exist yet and is re-read later. */
    assert_string_equal(cfg->token_file, tp("sub/secrets/token"));
    assert_null(cfg->token);
    kl__restconfig_free(cfg);

    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              fmt("    tokenFile: %s\n", tp("abs-token"))));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->token_file, tp("abs-token"));
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_exec_config(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1BETA1 "\n"
                                              "      command: ./bin/plugin.sh\n"
                                              "      args: [get-token, --cluster, \"x y\"]\n"
                                              "      env:\n"
                                              "      - name: AWS_PROFILE\n"
                                              "        value: prod\n"
                                              "      - name: EMPTY\n"
                                              "        value: null\n"
                                              "      interactiveMode: Never\n"
                                              "      provideClusterInfo: false\n"));
    cfg = load_ok(path, NULL);
    assert_non_null(cfg->exec);
    assert_string_equal(cfg->exec->api_version, API_V1BETA1);
    assert_string_equal(cfg->exec->command, tp("./bin/plugin.sh"));
    assert_string_equal(cfg->exec->config_dir, tmpdir);
    assert_string_equal(cfg->exec->args[0], "get-token");
    assert_string_equal(cfg->exec->args[1], "--cluster");
    assert_string_equal(cfg->exec->args[2], "x y");
    assert_null(cfg->exec->args[3]);
    assert_string_equal(cfg->exec->env[0], "AWS_PROFILE=prod");
    assert_string_equal(cfg->exec->env[1], "EMPTY=");
    assert_null(cfg->exec->env[2]);
    assert_null(cfg->token);
    kl__restconfig_free(cfg);

    /* A bare command is left for the PATH search; no args/env is fine. */
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1 "\n"
                                              "      command: aws\n"));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->exec->command, "aws");
    assert_non_null(cfg->exec->args);
    assert_null(cfg->exec->args[0]);
    assert_non_null(cfg->exec->env);
    assert_null(cfg->exec->env[0]);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_insecure_anonymous(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", "current-context: local\n"
                                "clusters:\n"
                                "- name: local\n"
                                "  cluster:\n"
                                "    server: http://localhost:8080///\n"
                                "    insecure-skip-tls-verify: true\n"
                                "contexts:\n"
                                "- name: local\n"
                                "  context:\n"
                                "    cluster: local\n"
                                "    namespace: ~\n");
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "http://localhost:8080");
    assert_int_equal(cfg->insecure, 1);
    assert_string_equal(cfg->ns, "default");
    assert_null(cfg->token);
    assert_null(cfg->token_file);
    assert_null(cfg->cert_pem);
    assert_null(cfg->exec);
    assert_null(cfg->tls_server_name);
    kl__restconfig_free(cfg);

    path = write_file("config", simple_config("    server: https://k8s.example\n"
                                              "    insecure-skip-tls-verify: false\n",
                                              "    token: null\n"
                                              "    tokenFile: \"\"\n"));
    cfg = load_ok(path, NULL);
    assert_int_equal(cfg->insecure, 0);
    assert_null(cfg->token);
    assert_null(cfg->token_file);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_requested_context(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", "current-context: a\n"
                                "clusters:\n"
                                "- name: ca\n"
                                "  cluster: {server: \"https://a.example\"}\n"
                                "- name: cb\n"
                                "  cluster: {server: \"https://b.example\"}\n"
                                "contexts:\n"
                                "- name: a\n"
                                "  context: {cluster: ca, user: ua, namespace: ns-a}\n"
                                "- name: b\n"
                                "  context: {cluster: cb, user: ub, namespace: ns-b}\n"
                                "users:\n"
                                "- name: ua\n"
                                "  user: {token: token-a}\n"
                                "- name: ub\n"
                                "  user: {token: token-b}\n");
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://a.example");
    assert_string_equal(cfg->token, "token-a");
    assert_string_equal(cfg->ns, "ns-a");
    kl__restconfig_free(cfg);

    cfg = load_ok(path, "b");
    assert_string_equal(cfg->server, "https://b.example");
    assert_string_equal(cfg->token, "token-b");
    assert_string_equal(cfg->ns, "ns-b");
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_json_form(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config.json",
                      fmt("{\n"
                          "  \"kind\": \"Config\",\n"
                          "  \"apiVersion\": \"v1\",\n"
                          "  \"preferences\": {},\n"
                          "  \"clusters\": [{\"name\": \"c\", \"cluster\": {\n"
                          "    \"server\": \"https://10.0.0.1:6443\",\n"
                          "    \"certificate-authority-data\": \"%s\",\n"
                          "    \"insecure-skip-tls-verify\": false}}],\n"
                          "  \"users\": [{\"name\": \"u\", \"user\": {\n"
                          "    \"token\": \"json-token\",\n"
                          "    \"exec\": {\"apiVersion\": \"%s\", \"command\": \"/bin/plugin\",\n"
                          "      \"args\": [\"a\"], \"env\": [{\"name\": \"K\", \"value\": "
                          "\"V\"}]}}}],\n"
                          "  \"contexts\": [{\"name\": \"ctx\", \"context\": {\"cluster\": \"c\",\n"
                          "    \"user\": \"u\", \"namespace\": \"json-ns\"}}],\n"
                          "  \"current-context\": \"ctx\",\n"
                          "  \"extensions\": null\n"
                          "}\n",
                          b64(CA_PEM), API_V1));
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://10.0.0.1:6443");
    assert_string_equal(cfg->ca_pem, CA_PEM);
    assert_string_equal(cfg->token, "json-token");
    assert_string_equal(cfg->ns, "json-ns");
    assert_string_equal(cfg->exec->command, "/bin/plugin");
    assert_string_equal(cfg->exec->args[0], "a");
    assert_string_equal(cfg->exec->env[0], "K=V");
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_yaml_anchors_and_flow(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = write_file("config", "current-context: 'dev'\n"
                                "clusters:\n"
                                "- name: c\n"
                                "  cluster: &c {server: 'https://anchored.example/'}\n"
                                "contexts: [{name: dev, context: {cluster: c, user: u}}]\n"
                                "users:\n"
                                "- name: u\n"
                                "  user:\n"
                                "    token: |-\n"
                                "      block-token\n");
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://anchored.example");
    assert_string_equal(cfg->token, "block-token");
    kl__restconfig_free(cfg);
}

/* ------------------------------------------------------------------------ */
/* Kubeconfig: the chain                                                    */
/* ------------------------------------------------------------------------ */

static const char *server_config(const char *name, const char *current, const char *server)
{
    return write_file(name, fmt("%s%s%s"
                                "clusters:\n"
                                "- name: c\n"
                                "  cluster: {server: \"%s\"}\n"
                                "contexts:\n"
                                "- name: %s\n"
                                "  context: {cluster: c}\n",
                                current ? "current-context: " : "", current ? current : "",
                                current ? "\n" : "", server, current ? current : "only-here"));
}

static void test_kubeconfig_list_several_files(void **state)
{
    const char *none, *good, *second;
    kl__restconfig *cfg = NULL;

    (void)state;
    none = server_config("none", NULL, "https://none.example");
    good = server_config("good", "g", "https://good.example");
    second = server_config("second", "s", "https://second.example");
    setenv("KUBECONFIG", fmt("%s::%s:%s:%s", tp("missing"), none, good, second), 1);
    assert_int_equal(kl__restconfig_from_kubeconfig(&cfg, NULL, NULL), 0);
    assert_string_equal(cfg->server, "https://good.example");
    assert_string_equal(cfg->source, good);
    kl__restconfig_free(cfg);

    /* The list can also come as an argument; $KUBECONFIG is then ignored. */
    assert_int_equal(kl__restconfig_from_kubeconfig(&cfg, fmt("%s:%s", second, good), NULL), 0);
    assert_string_equal(cfg->server, "https://second.example");
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_list_requested_context(void **state)
{
    const char *good, *none;
    kl__restconfig *cfg = NULL;

    (void)state;
    good = server_config("good", "g", "https://good.example");
    none = server_config("none", NULL, "https://holder.example");
    /* "only-here" is only in the second file: the first is skipped. */
    assert_int_equal(kl__restconfig_from_kubeconfig(&cfg, fmt("%s:%s", good, none), "only-here"),
                     0);
    assert_string_equal(cfg->server, "https://holder.example");
    assert_string_equal(cfg->source, none);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_list_stops_at_broken_file(void **state)
{
    const char *bad, *good;
    kl__restconfig *cfg = NULL;

    (void)state;
    bad = write_file("bad", "current-context: [unclosed\n");
    good = server_config("good", "g", "https://good.example");
    /* A broken file is an error, not something to skip silently. */
    assert_fails(kl__restconfig_from_kubeconfig(&cfg, fmt("%s:%s", bad, good), NULL),
                 K8SLEASE_ECONFIG, fmt("%s: line ", bad));
    assert_null(cfg);
}

static void test_kubeconfig_default_home(void **state)
{
    const char *path;
    kl__restconfig *cfg = NULL;

    (void)state;
    make_dir(".kube");
    path = server_config(".kube/config", "home", "https://home.example");
    setenv("HOME", tmpdir, 1);
    assert_int_equal(kl__restconfig_from_kubeconfig(&cfg, NULL, NULL), 0);
    assert_string_equal(cfg->source, path);
    assert_string_equal(cfg->server, "https://home.example");
    kl__restconfig_free(cfg);

    /* An empty $KUBECONFIG, or one of only separators, counts as unset. */
    setenv("KUBECONFIG", "::", 1);
    cfg = load_ok(NULL, NULL);
    assert_string_equal(cfg->source, path);
    kl__restconfig_free(cfg);
}

static void test_kubeconfig_load_uses_env(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    path = server_config("envconfig", "e", "https://env.example");
    setenv("HOME", tp("nohome"), 1);
    setenv("KUBECONFIG", path, 1);
    cfg = load_ok(NULL, NULL);
    assert_string_equal(cfg->server, "https://env.example");
    kl__restconfig_free(cfg);

    /* An explicit path wins over $KUBECONFIG and over in-cluster. */
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    path = server_config("explicit", "x", "https://explicit.example");
    cfg = load_ok(path, NULL);
    assert_string_equal(cfg->server, "https://explicit.example");
    kl__restconfig_free(cfg);
}

/* ------------------------------------------------------------------------ */
/* Kubeconfig: errors                                                       */
/* ------------------------------------------------------------------------ */

static void test_err_missing_file(void **state)
{
    (void)state;
    assert_load_fails(tp("nope"), NULL,
                      fmt("%s: cannot read: No such file or directory", tp("nope")));
    setenv("KUBECONFIG", tp("nope"), 1);
    assert_load_fails(NULL, NULL, fmt("%s: cannot read: No such file or directory", tp("nope")));
}

static void test_err_unreadable_file(void **state)
{
    (void)state;
    /* chmod 000 does not stop root; a directory stops everyone. */
    make_dir("adir");
    assert_load_fails(tp("adir"), NULL, fmt("%s: cannot read: Is a directory", tp("adir")));
}

static void test_err_bad_yaml(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", "current-context: dev\n"
                                "clusters:\n"
                                "  - name: c\n"
                                " bad: [\n");
    assert_load_fails(path, NULL, fmt("%s: line ", path));
    assert_non_null(strstr(kl__error_get(), "YAML parse error: "));
    path = write_file("config", "a: b\n\tc: d\n");
    assert_load_fails(path, NULL, fmt("%s: line 2 column", path));
    /* Garbage after the document is an error too, not ignored. */
    path = write_file("config", "{\"current-context\": \"x\"}\n}\n");
    assert_load_fails(path, NULL, fmt("%s: line 2 column 1: YAML parse error", path));
}

static void test_err_top_level(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", "- just\n- a list\n");
    assert_load_fails(path, NULL, fmt("%s: top level: expected a mapping", path));
    path = write_file("config", "current-context: dev\n"
                                "clusters: {c: 1}\n"
                                "contexts: [{name: dev, context: {cluster: c}}]\n");
    assert_load_fails(path, NULL, fmt("%s: clusters: expected a list", path));
    path = write_file("config", "current-context: dev\ncontexts: 3\n");
    assert_load_fails(path, NULL, fmt("%s: contexts: expected a list", path));
    path = write_file("config", "current-context: [dev]\n");
    assert_load_fails(path, NULL, fmt("%s: current-context: expected a string", path));
    path = write_file("config", "current-context: dev\ncontexts:\n- just-a-string\n");
    assert_load_fails(path, NULL, fmt("%s: contexts[0]: expected a mapping", path));
    path = write_file("config", "current-context: dev\ncontexts:\n- name: dev\n  context: [x]\n");
    assert_load_fails(path, NULL,
                      fmt("%s: contexts[0] (name \"dev\").context: expected a mapping", path));
}

static void test_err_unknown_context(void **state)
{
    const char *path;

    (void)state;
    path = server_config("config", "dev", "https://k8s.example");
    assert_load_fails(path, "nope", fmt("%s: context \"nope\" not found", path));
    path = write_file("config", "current-context: ghost\ncontexts: []\n");
    assert_load_fails(path, NULL, fmt("%s: context \"ghost\" not found", path));
}

static void test_err_no_current_context(void **state)
{
    const char *path;

    (void)state;
    path = server_config("config", NULL, "https://k8s.example");
    assert_load_fails(path, NULL, fmt("%s: current-context: not set", path));
    path = write_file("config", "");
    assert_load_fails(path, NULL, fmt("%s: current-context: not set", path));
    path = write_file("config", "current-context: \"\"\n");
    assert_load_fails(path, NULL, fmt("%s: current-context: not set", path));
}

static void test_err_missing_cluster_or_user(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", "current-context: dev\n"
                                "clusters: []\n"
                                "contexts:\n"
                                "- name: dev\n"
                                "  context: {cluster: gone, user: u}\n");
    assert_load_fails(
        path, NULL,
        fmt("%s: contexts[0] (name \"dev\").context.cluster: cluster \"gone\" not found", path));

    path = write_file("config", "current-context: dev\n"
                                "clusters:\n"
                                "- name: c\n"
                                "  cluster: {server: \"https://k8s.example\"}\n"
                                "contexts:\n"
                                "- name: x\n"
                                "  context: {cluster: c}\n"
                                "- name: dev\n"
                                "  context: {cluster: c, user: ghost}\n"
                                "users:\n"
                                "- name: other\n"
                                "  user: {token: t}\n");
    assert_load_fails(
        path, NULL,
        fmt("%s: contexts[1] (name \"dev\").context.user: user \"ghost\" not found", path));

    path = write_file("config", "current-context: dev\n"
                                "contexts:\n"
                                "- name: dev\n"
                                "  context: {user: u}\n");
    assert_load_fails(path, NULL,
                      fmt("%s: contexts[0] (name \"dev\").context.cluster: not set", path));
}

static void test_err_bad_base64(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              fmt("    client-certificate-data: %s\n"
                                                  "    client-key-data: \"not*base64\"\n",
                                                  b64(CERT_PEM))));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.client-key-data: invalid base64", path));

    path = write_file("config", simple_config("    server: https://k8s.example\n"
                                              "    certificate-authority-data: Zg\n",
                                              "    token: t\n"));
    assert_load_fails(
        path, NULL,
        fmt("%s: clusters[0] (name \"c\").cluster.certificate-authority-data: invalid base64",
            path));
}

static void test_err_cert_key_pairs(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config",
                      simple_config("    server: https://k8s.example\n",
                                    fmt("    client-certificate-data: %s\n", b64(CERT_PEM))));
    assert_load_fails(
        path, NULL,
        fmt("%s: users[0] (name \"u\").user: client-certificate without client-key", path));

    write_file("tls.key", KEY_PEM);
    path = write_file(
        "config", simple_config("    server: https://k8s.example\n", "    client-key: tls.key\n"));
    assert_load_fails(
        path, NULL,
        fmt("%s: users[0] (name \"u\").user: client-key without client-certificate", path));
}

static void test_err_missing_referenced_files(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example\n"
                                              "    certificate-authority: missing-ca.crt\n",
                                              "    token: t\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: clusters[0] (name \"c\").cluster.certificate-authority: %s: No "
                          "such file or directory",
                          path, tp("missing-ca.crt")));

    write_file("tls.key", KEY_PEM);
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    client-certificate: /nonexistent/tls.crt\n"
                                              "    client-key: tls.key\n"));
    assert_load_fails(
        path, NULL,
        fmt("%s: users[0] (name \"u\").user.client-certificate: /nonexistent/tls.crt", path));
}

static void test_err_server(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config",
                      simple_config("    insecure-skip-tls-verify: true\n", "    token: t\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: clusters[0] (name \"c\").cluster.server: not set", path));
    path = write_file("config", simple_config("    server: k8s.example:6443\n", "    token: t\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: clusters[0] (name \"c\").cluster.server: \"k8s.example:6443\" does "
                          "not start with https:// or http://",
                          path));
    path = write_file("config", simple_config("    server: https:///\n", "    token: t\n"));
    assert_load_fails(
        path, NULL,
        fmt("%s: clusters[0] (name \"c\").cluster.server: \"https:///\" has no host", path));
    path = write_file("config", simple_config("    server: {url: x}\n", "    token: t\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: clusters[0] (name \"c\").cluster.server: expected a string", path));
}

static void test_err_bad_bool(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example\n"
                                              "    insecure-skip-tls-verify: maybe\n",
                                              "    token: t\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: clusters[0] (name \"c\").cluster.insecure-skip-tls-verify: "
                          "\"maybe\" is not a boolean",
                          path));
}

static void test_err_exec_config(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: client.authentication.k8s.io/"
                                              "v1alpha1\n"
                                              "      command: x\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec.apiVersion: "
                          "\"client.authentication.k8s.io/v1alpha1\" is not supported",
                          path));
    path = write_file("config",
                      simple_config("    server: https://k8s.example\n", "    exec:\n"
                                                                         "      command: x\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec.apiVersion: not set", path));
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1 "\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec.command: not set", path));
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1 "\n"
                                              "      command: x\n"
                                              "      args: --flag\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec.args: expected a list", path));
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1 "\n"
                                              "      command: x\n"
                                              "      env:\n"
                                              "      - value: v\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec.env[0].name: missing", path));
    path = write_file(
        "config", simple_config("    server: https://k8s.example\n", "    exec: just-a-string\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.exec: expected a mapping", path));
}

static void test_err_unsupported_auth(void **state)
{
    const char *path;

    (void)state;
    path = write_file("config",
                      simple_config("    server: https://k8s.example\n", "    auth-provider:\n"
                                                                         "      name: gcp\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.auth-provider: not supported", path));
    path = write_file("config",
                      simple_config("    server: https://k8s.example\n", "    username: admin\n"
                                                                         "    password: secret\n"));
    assert_load_fails(path, NULL,
                      fmt("%s: users[0] (name \"u\").user.username: not supported", path));
}

static void test_err_list_none_usable(void **state)
{
    const char *none;
    kl__restconfig *cfg = NULL;

    (void)state;
    none = server_config("none", NULL, "https://none.example");
    setenv("KUBECONFIG", fmt("%s:%s", tp("missing"), none), 1);
    assert_fails(kl__restconfig_from_kubeconfig(&cfg, NULL, NULL), K8SLEASE_ECONFIG,
                 "no usable kubeconfig in ");
    assert_non_null(
        strstr(kl__error_get(), fmt("%s: cannot read: No such file or directory", tp("missing"))));
    assert_non_null(strstr(kl__error_get(), fmt("%s: current-context: not set", none)));
    assert_null(cfg);

    assert_fails(kl__restconfig_from_kubeconfig(&cfg, NULL, "wanted"), K8SLEASE_ECONFIG,
                 fmt("%s: context \"wanted\" not found", none));
    assert_null(cfg);
}

static void test_err_no_home(void **state)
{
    kl__restconfig *cfg = NULL;

    (void)state;
    assert_fails(kl__restconfig_from_kubeconfig(&cfg, NULL, NULL), K8SLEASE_ECONFIG,
                 "KUBECONFIG and HOME are unset");
    setenv("HOME", tmpdir, 1);
    assert_fails(kl__restconfig_from_kubeconfig(&cfg, NULL, NULL), K8SLEASE_ECONFIG,
                 fmt("%s/.kube/config: cannot read: No such file or directory", tmpdir));
    assert_null(cfg);
}

/* ------------------------------------------------------------------------ */
/* In-cluster                                                               */
/* ------------------------------------------------------------------------ */

static const char *make_sa_dir(const char *name, const char *token, const char *ns)
{
    make_dir(name);
    if (token)
        write_file(fmt("%s/token", name), token);
    write_file(fmt("%s/ca.crt", name), CA_PEM);
    if (ns)
        write_file(fmt("%s/namespace", name), ns);
    return tp(name);
}

static void set_service_env(const char *host, const char *port)
{
    setenv("KUBERNETES_SERVICE_HOST", host, 1);
    setenv("KUBERNETES_SERVICE_PORT", port, 1);
}

static void test_incluster_ok(void **state)
{
    const char *dir;
    kl__restconfig *cfg = NULL;

    (void)state;
    dir = make_sa_dir("sa", "eyJhbGciOi.token\n", "  kube-system\n");
    set_service_env("10.96.0.1", "443");
    assert_int_equal(kl__restconfig_incluster(&cfg, dir), 0);
    assert_string_equal(cfg->server, "https://10.96.0.1:443");
    assert_string_equal(cfg->source, "in-cluster");
    assert_string_equal(cfg->ns, "kube-system");
    assert_string_equal(cfg->token_file, fmt("%s/token", dir));
    assert_string_equal(cfg->ca_file, fmt("%s/ca.crt", dir));
    assert_null(cfg->token);
    assert_null(cfg->ca_pem);
    assert_int_equal(cfg->insecure, 0);
    kl__restconfig_free(cfg);
}

static void test_incluster_ipv6_and_default_namespace(void **state)
{
    const char *dir;
    kl__restconfig *cfg = NULL;

    (void)state;
    dir = make_sa_dir("sa", "tok", NULL);
    set_service_env("fd00::1", "6443");
    assert_int_equal(kl__restconfig_incluster(&cfg, dir), 0);
    assert_string_equal(cfg->server, "https://[fd00::1]:6443");
    assert_string_equal(cfg->ns, "default");
    kl__restconfig_free(cfg);

    /* An empty namespace file also means "default". */
    write_file("sa/namespace", "\n");
    set_service_env("kubernetes.default.svc", "443");
    assert_int_equal(kl__restconfig_incluster(&cfg, dir), 0);
    assert_string_equal(cfg->server, "https://kubernetes.default.svc:443");
    assert_string_equal(cfg->ns, "default");
    kl__restconfig_free(cfg);
}

static void test_incluster_errors(void **state)
{
    const char *dir;
    kl__restconfig *cfg = NULL;

    (void)state;
    dir = make_sa_dir("sa", NULL, "ns");
    assert_fails(kl__restconfig_incluster(&cfg, dir), K8SLEASE_ECONFIG,
                 "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set");
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    assert_fails(kl__restconfig_incluster(&cfg, dir), K8SLEASE_ECONFIG,
                 "KUBERNETES_SERVICE_PORT must be set");
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);

    assert_fails(kl__restconfig_incluster(&cfg, dir), K8SLEASE_ECONFIG,
                 fmt("%s/token: cannot read: No such file or directory", dir));
    assert_null(cfg);

    write_file("sa/token", " \n");
    assert_fails(kl__restconfig_incluster(&cfg, dir), K8SLEASE_ECONFIG,
                 fmt("%s/token: empty", dir));

    write_file("sa/token", "tok");
    assert_int_equal(unlink(tp("sa/ca.crt")), 0);
    assert_fails(kl__restconfig_incluster(&cfg, dir), K8SLEASE_ECONFIG,
                 fmt("%s/ca.crt: cannot read: No such file or directory", dir));
    assert_null(cfg);

    assert_fails(kl__restconfig_incluster(&cfg, tp("no-such-dir")), K8SLEASE_ECONFIG,
                 fmt("%s/token: cannot read", tp("no-such-dir")));
}

static void test_load_prefers_incluster(void **state)
{
    const char *dir;
    kl__restconfig *cfg;

    (void)state;
    dir = make_sa_dir("sa", "tok", "ns-from-sa");
    setenv("KUBECONFIG", server_config("config", "dev", "https://kubeconfig.example"), 1);
    setenv("K8SLEASE_SERVICEACCOUNT_DIR", dir, 1);
    set_service_env("10.0.0.1", "443");
    cfg = load_ok(NULL, NULL);
    assert_string_equal(cfg->source, "in-cluster");
    assert_string_equal(cfg->ns, "ns-from-sa");
    kl__restconfig_free(cfg);

    /* A requested context can only be a kubeconfig's. */
    cfg = load_ok(NULL, "dev");
    assert_string_equal(cfg->server, "https://kubeconfig.example");
    kl__restconfig_free(cfg);
}

static void test_load_incluster_falls_back(void **state)
{
    const char *path;
    kl__restconfig *cfg;

    (void)state;
    make_dir("sa");
    path = server_config("config", "dev", "https://fallback.example");
    setenv("KUBECONFIG", path, 1);
    setenv("K8SLEASE_SERVICEACCOUNT_DIR", tp("sa"), 1);
    set_service_env("10.0.0.1", "443");
    cfg = load_ok(NULL, NULL);
    assert_string_equal(cfg->source, path);
    assert_string_equal(cfg->server, "https://fallback.example");
    kl__restconfig_free(cfg);
}

static void test_load_both_fail(void **state)
{
    (void)state;
    make_dir("sa");
    setenv("KUBECONFIG", tp("missing-config"), 1);
    setenv("K8SLEASE_SERVICEACCOUNT_DIR", tp("sa"), 1);
    set_service_env("10.0.0.1", "443");
    assert_load_fails(NULL, NULL,
                      fmt("in-cluster config: %s: cannot read: No such file or directory; "
                          "kubeconfig: %s: cannot read: No such file or directory",
                          tp("sa/token"), tp("missing-config")));
}

/* ------------------------------------------------------------------------ */
/* ExecCredential parsing                                                   */
/* ------------------------------------------------------------------------ */

static int parse(const char *json, const char *expected, kl__exec_credential *cred)
{
    return kl__exec_credential_parse(json, strlen(json), expected, cred);
}

static void test_exec_parse_ok(void **state)
{
    kl__exec_credential cred;

    (void)state;
    assert_int_equal(parse("{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                           "\"status\":{\"token\":\"t1\","
                           "\"expirationTimestamp\":\"2024-05-01T10:00:00Z\"}}",
                           API_V1, &cred),
                     0);
    assert_string_equal(cred.token, "t1");
    assert_null(cred.cert_pem);
    assert_null(cred.key_pem);
    assert_int_equal(cred.expiry_us, INT64_C(1714557600) * 1000000);
    kl__exec_credential_clear(&cred);
    assert_null(cred.token);

    assert_int_equal(parse("{\"apiVersion\":\"" API_V1BETA1 "\",\"kind\":\"ExecCredential\","
                           "\"spec\":{\"interactive\":false},"
                           "\"status\":{\"clientCertificateData\":\"CERT\\nPEM\","
                           "\"clientKeyData\":\"KEY\\nPEM\",\"token\":\"\","
                           "\"expirationTimestamp\":null}}",
                           NULL, &cred),
                     0);
    assert_null(cred.token);
    assert_string_equal(cred.cert_pem, "CERT\nPEM");
    assert_string_equal(cred.key_pem, "KEY\nPEM");
    assert_int_equal(cred.expiry_us, 0);
    kl__exec_credential_clear(&cred);
    kl__exec_credential_clear(NULL);
}

static void assert_expiry(const char *ts, int64_t want_us)
{
    kl__exec_credential cred;

    if (parse(fmt("{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                  "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}}",
                  ts),
              NULL, &cred) != 0)
        print_error("%s: %s\n", ts, kl__error_get());
    assert_int_equal(cred.expiry_us, want_us);
    kl__exec_credential_clear(&cred);
}

static void assert_expiry_bad(const char *ts)
{
    kl__exec_credential cred;

    assert_fails(parse(fmt("{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                           "\"status\":{\"token\":\"t\",\"expirationTimestamp\":\"%s\"}}",
                           ts),
                       NULL, &cred),
                 K8SLEASE_ECONFIG, "status.expirationTimestamp: ");
    assert_null(cred.token);
}

static void test_exec_parse_timestamps(void **state)
{
    (void)state;
    assert_expiry("2024-05-01T10:00:00Z", INT64_C(1714557600000000));
    assert_expiry("2024-05-01t10:00:00z", INT64_C(1714557600000000));
    assert_expiry("2024-05-01T12:30:00+02:30", INT64_C(1714557600000000));
    assert_expiry("2024-05-01T07:00:00-03:00", INT64_C(1714557600000000));
    assert_expiry("2024-02-29T23:59:59.5Z", INT64_C(1709251199500000));
    assert_expiry("2024-02-29T23:59:59.123456789Z", INT64_C(1709251199123456));
    assert_expiry("2030-01-01T00:00:00Z", INT64_C(1893456000000000));
    assert_expiry("1969-12-31T23:59:59Z", INT64_C(-1000000));
    assert_expiry_bad("2023-02-29T00:00:00Z");
    assert_expiry_bad("2024-13-01T00:00:00Z");
    assert_expiry_bad("2024-01-01T24:00:00Z");
    assert_expiry_bad("2024-01-01T00:00:00");
    assert_expiry_bad("2024-01-01 00:00:00Z");
    assert_expiry_bad("2024-01-01T00:00:00.Z");
    assert_expiry_bad("2024-01-01T00:00:00+0100");
    assert_expiry_bad("2024-01-01T00:00:00Zjunk");
    assert_expiry_bad("24-01-01T00:00:00Z");
    /* "" is treated like an absent field: no expiry. */
    assert_expiry("", 0);
}

static void test_exec_parse_errors(void **state)
{
    static const struct {
        const char *json;
        const char *expected_api;
        const char *message;
    } cases[] = {
        {"", NULL, "ExecCredential: invalid JSON"},
        {"not json", NULL, "ExecCredential: invalid JSON"},
        {"[1]", NULL, "ExecCredential: expected a JSON object"},
        {"{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}", NULL,
         "ExecCredential: apiVersion: \"\" is not supported"},
        {"{\"apiVersion\":\"v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}", NULL,
         "ExecCredential: apiVersion: \"v1\" is not supported"},
        {"{\"apiVersion\":\"" API_V1BETA1 "\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"t\"}}",
         API_V1, "apiVersion: \"" API_V1BETA1 "\" does not match the configured \"" API_V1 "\""},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"Secret\",\"status\":{\"token\":\"t\"}}", NULL,
         "ExecCredential: kind: \"Secret\" is not ExecCredential"},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\"}", NULL,
         "ExecCredential: status: missing"},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\",\"status\":{\"token\":1}}",
         NULL, "ExecCredential: status.token: expected a string"},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\",\"status\":{}}", NULL,
         "ExecCredential: status: neither token nor"},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
         "\"status\":{\"token\":\"t\",\"clientCertificateData\":\"c\"}}",
         NULL, "clientCertificateData and clientKeyData must be set together"},
        {"{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
         "\"status\":{\"clientKeyData\":\"k\"}}",
         NULL, "clientCertificateData and clientKeyData must be set together"},
    };
    size_t i;

    (void)state;
    for (i = 0; i < KL_ARRAY_LEN(cases); i++) {
        kl__exec_credential cred;

        assert_fails(parse(cases[i].json, cases[i].expected_api, &cred), K8SLEASE_ECONFIG,
                     cases[i].message);
        assert_null(cred.token);
        assert_null(cred.cert_pem);
        assert_null(cred.key_pem);
    }
}

/* ------------------------------------------------------------------------ */
/* Exec plugins                                                             */
/* ------------------------------------------------------------------------ */

/* An exec config over borrowed strings (NULL-terminated lists). */
typedef struct test_exec {
    kl__exec_config cfg;
    char *args[8];
    char *env[8];
} test_exec;

static kl__exec_config *exec_of(test_exec *t, const char *api, const char *command)
{
    memset(t, 0, sizeof(*t));
    t->cfg.api_version = (char *)api;
    t->cfg.command = (char *)command;
    t->cfg.args = t->args;
    t->cfg.env = t->env;
    t->cfg.config_dir = tmpdir;
    return &t->cfg;
}

static const char *credential_script(const char *name, const char *api, const char *status)
{
    return write_script(name, fmt("cat <<'EOF'\n"
                                  "{\"apiVersion\": \"%s\", \"kind\": \"ExecCredential\",\n"
                                  " \"status\": %s}\n"
                                  "EOF",
                                  api, status));
}

static int count_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* Every run must close its pipes and reap its child, on every path. */
static void assert_exec_fails(const kl__exec_config *exec, const char *sub)
{
    kl__exec_credential cred;
    int fds = count_open_fds();

    assert_fails(kl__exec_credential_run(exec, &cred), K8SLEASE_ECONFIG, sub);
    assert_non_null(strstr(kl__error_get(), fmt("exec plugin \"%s\"", exec->command)));
    assert_null(cred.token);
    assert_null(cred.cert_pem);
    assert_int_equal(count_open_fds(), fds);
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

static void test_exec_run_v1_token(void **state)
{
    test_exec t;
    kl__exec_credential cred;
    const char *cmd;

    (void)state;
    cmd = credential_script("plugin.sh", API_V1,
                            "{\"token\": \"tok-v1\", "
                            "\"expirationTimestamp\": \"2024-05-01T10:00:00Z\"}");
    assert_int_equal(kl__exec_credential_run(exec_of(&t, API_V1, cmd), &cred), 0);
    assert_string_equal(cred.token, "tok-v1");
    assert_int_equal(cred.expiry_us, INT64_C(1714557600000000));
    kl__exec_credential_clear(&cred);
}

static void test_exec_run_v1beta1_cert(void **state)
{
    test_exec t;
    kl__exec_credential cred;
    const char *cmd;

    (void)state;
    cmd = credential_script("plugin.sh", API_V1BETA1,
                            "{\"clientCertificateData\": \"CERT\\n\", "
                            "\"clientKeyData\": \"KEY\\n\"}");
    assert_int_equal(kl__exec_credential_run(exec_of(&t, API_V1BETA1, cmd), &cred), 0);
    assert_null(cred.token);
    assert_string_equal(cred.cert_pem, "CERT\n");
    assert_string_equal(cred.key_pem, "KEY\n");
    assert_int_equal(cred.expiry_us, 0);
    kl__exec_credential_clear(&cred);
}

static void test_exec_run_args_env_info(void **state)
{
    test_exec t;
    kl__exec_credential cred;
    kl__exec_config *exec;
    const char *cmd;

    (void)state;
    /* The token reports what the plugin saw: args, env, exec info, stdin. */
    cmd = write_script(
        "plugin.sh",
        "case \"$KUBERNETES_EXEC_INFO\" in\n"
        "*'\"apiVersion\":\"" API_V1 "\"'*'\"interactive\":false'*) info=ok ;;\n"
        "*) info=bad ;;\n"
        "esac\n"
        "stdin=$(readlink /proc/$$/fd/0)\n"
        "printf "
        "'{\"apiVersion\":\"%s\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' "
        "\"" API_V1 "\" \"$1|$2|$KL_TEST_VAR|$KL_TEST_OUTER|$info|$stdin\"");
    setenv("KL_TEST_OUTER", "outer", 1);
    setenv("KL_TEST_VAR", "overridden", 1);
    exec = exec_of(&t, API_V1, cmd);
    t.args[0] = "first arg";
    t.args[1] = "second";
    t.env[0] = "KL_TEST_VAR=from-config";
    assert_int_equal(kl__exec_credential_run(exec, &cred), 0);
    assert_string_equal(cred.token, "first arg|second|from-config|outer|ok|/dev/null");
    kl__exec_credential_clear(&cred);
}

static void test_exec_run_path_lookup(void **state)
{
    test_exec t;
    kl__exec_credential cred;
    kl__exec_config *exec;

    (void)state;
    exec = exec_of(&t, API_V1, "sh");
    t.args[0] = "-c";
    t.args[1] = "echo '{\"apiVersion\":\"" API_V1 "\",\"kind\":\"ExecCredential\","
                "\"status\":{\"token\":\"from-sh\"}}'";
    assert_int_equal(kl__exec_credential_run(exec, &cred), 0);
    assert_string_equal(cred.token, "from-sh");
    kl__exec_credential_clear(&cred);
}

static void test_exec_run_from_kubeconfig(void **state)
{
    const char *path;
    kl__restconfig *cfg;
    kl__exec_credential cred;

    (void)state;
    make_dir("bin");
    credential_script("bin/plugin.sh", API_V1BETA1, "{\"token\": \"via-kubeconfig\"}");
    path = write_file("config", simple_config("    server: https://k8s.example\n",
                                              "    exec:\n"
                                              "      apiVersion: " API_V1BETA1 "\n"
                                              "      command: ./bin/plugin.sh\n"));
    cfg = load_ok(path, NULL);
    assert_int_equal(kl__exec_credential_run(cfg->exec, &cred), 0);
    assert_string_equal(cred.token, "via-kubeconfig");
    kl__exec_credential_clear(&cred);
    kl__restconfig_free(cfg);
}

static void test_exec_run_nonzero_exit(void **state)
{
    test_exec t;
    const char *cmd;
    const char *msg;
    size_t xs = 0;

    (void)state;
    cmd = write_script("fail.sh", "echo 'boom: credentials expired' >&2\nexit 3");
    assert_exec_fails(
        exec_of(&t, API_V1, cmd),
        fmt("exec plugin \"%s\": exited with status 3: boom: credentials expired", cmd));

    /* Only the head of stderr reaches the message. */
    cmd = write_script("noisy.sh", "i=0\n"
                                   "while [ $i -lt 50 ]; do printf xxxxxxxxxx >&2; i=$((i+1)); "
                                   "done\n"
                                   "exit 1");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "exited with status 1: xxxxxxxxxx");
    for (msg = strstr(kl__error_get(), "status 1: "); *msg; msg++)
        xs += *msg == 'x';
    assert_int_equal(xs, 200);

    cmd = write_script("killed.sh", "kill -9 $$");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "killed by signal 9");
}

static void test_exec_run_bad_output(void **state)
{
    test_exec t;
    const char *cmd;

    (void)state;
    cmd = write_script("garbage.sh", "echo 'this is not json'");
    assert_exec_fails(exec_of(&t, API_V1, cmd),
                      fmt("exec plugin \"%s\": ExecCredential: invalid JSON", cmd));

    cmd = write_script("silent.sh", "exit 0");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "ExecCredential: invalid JSON");

    cmd = credential_script("beta.sh", API_V1BETA1, "{\"token\": \"t\"}");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "ExecCredential: apiVersion: \"" API_V1BETA1
                                                "\" does not match the configured \"" API_V1 "\"");

    cmd = write_script("big.sh", "head -c 1100000 /dev/zero | tr '\\0' a");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "output exceeds 1048576 bytes");
}

static void test_exec_run_timeout(void **state)
{
    test_exec t;
    const char *cmd;
    int64_t start;

    (void)state;
    cmd = write_script("slow.sh", "exec sleep 30");
    kl__exec_set_timeout_ms(200);
    start = kl__clock_mono_ns();
    assert_exec_fails(exec_of(&t, API_V1, cmd), "timed out after 200 ms");
    assert_true(kl__clock_mono_ns() - start < 10 * KL_NS_PER_S);
}

static void test_exec_run_cannot_start(void **state)
{
    test_exec t;
    const char *cmd;

    (void)state;
    assert_exec_fails(exec_of(&t, API_V1, tp("no-such-plugin")),
                      "cannot run: No such file or directory");
    assert_exec_fails(exec_of(&t, API_V1, "kl-no-such-plugin-in-path"), "cannot run: ");
    cmd = write_file("not-executable.sh", "#!/bin/sh\nexit 0\n");
    assert_exec_fails(exec_of(&t, API_V1, cmd), "cannot run: Permission denied");
    assert_exec_fails(exec_of(&t, "client.authentication.k8s.io/v1alpha1", cmd),
                      "apiVersion \"client.authentication.k8s.io/v1alpha1\" is not supported");
}

/* ------------------------------------------------------------------------ */
/* Failing allocator                                                        */
/* ------------------------------------------------------------------------ */

/* Fails the 1st, 2nd, ... allocation of call until it succeeds; every
 * failure must be a clean ENOMEM (ASan/LSan catch the leaks). */
static void fail_each_allocation(int (*call)(void))
{
    long n;
    int err, failures = 0;

    for (n = 0; n < 10000; n++) {
        kl__alloc_fail_after(n);
        err = call();
        kl__alloc_fail_after(-1);
        if (err == 0)
            break;
        if (err != K8SLEASE_ENOMEM)
            print_error("allocation %ld: %d %s\n", n, err, kl__error_get());
        assert_int_equal(err, K8SLEASE_ENOMEM);
        failures++;
    }
    if (err != 0 || failures < 5)
        print_error("after %d failures: %d %s\n", failures, err, kl__error_get());
    assert_int_equal(err, 0);
    assert_true(failures >= 5);
}

static int load_full_config(void)
{
    kl__restconfig *cfg = NULL;
    int err = kl__restconfig_load(&cfg, tp("full"), NULL);

    kl__restconfig_free(cfg);
    return err;
}

static int load_list(void)
{
    kl__restconfig *cfg = NULL;
    int err = kl__restconfig_from_kubeconfig(
        &cfg, fmt("%s:%s:%s", tp("missing"), tp("none"), tp("full")), NULL);

    kl__restconfig_free(cfg);
    return err;
}

static int load_incluster(void)
{
    kl__restconfig *cfg = NULL;
    int err = kl__restconfig_load(&cfg, NULL, NULL);

    kl__restconfig_free(cfg);
    return err;
}

static int run_plugin(void)
{
    test_exec t;
    kl__exec_credential cred;
    kl__exec_config *exec = exec_of(&t, API_V1, tp("plugin.sh"));
    int err;

    t.args[0] = "a";
    t.env[0] = "X=y";
    err = kl__exec_credential_run(exec, &cred);
    kl__exec_credential_clear(&cred);
    return err;
}

static void test_alloc_failures(void **state)
{
    (void)state;
    write_file("ca.crt", CA_PEM);
    write_file("full", simple_config(fmt("    server: https://k8s.example/\n"
                                         "    certificate-authority: ca.crt\n"
                                         "    certificate-authority-data: %s\n"
                                         "    tls-server-name: sni\n",
                                         b64(CA_PEM)),
                                     fmt("    client-certificate-data: %s\n"
                                         "    client-key-data: %s\n"
                                         "    token: t\n"
                                         "    tokenFile: tok\n"
                                         "    exec:\n"
                                         "      apiVersion: " API_V1 "\n"
                                         "      command: ./plugin.sh\n"
                                         "      args: [a, b]\n"
                                         "      env: [{name: A, value: b}]\n",
                                         b64(CERT_PEM), b64(KEY_PEM))));
    server_config("none", NULL, "https://none.example");
    fail_each_allocation(load_full_config);
    fail_each_allocation(load_list);

    make_sa_dir("sa", "tok", "ns");
    setenv("K8SLEASE_SERVICEACCOUNT_DIR", tp("sa"), 1);
    set_service_env("fd00::1", "443");
    fail_each_allocation(load_incluster);

    credential_script("plugin.sh", API_V1,
                      "{\"clientCertificateData\": \"C\", \"clientKeyData\": \"K\", "
                      "\"token\": \"t\", \"expirationTimestamp\": \"2030-01-01T00:00:00Z\"}");
    fail_each_allocation(run_plugin);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
    const struct CMUnitTest tests[] = {
        T(test_base64_valid),
        T(test_base64_whitespace),
        T(test_base64_invalid),
        T(test_base64_binary_roundtrip),
        T(test_base64_enomem),
        T(test_kubeconfig_inline_data),
        T(test_kubeconfig_files_relative),
        T(test_kubeconfig_file_and_data_both_kept),
        T(test_kubeconfig_token_inline),
        T(test_kubeconfig_token_file),
        T(test_kubeconfig_exec_config),
        T(test_kubeconfig_insecure_anonymous),
        T(test_kubeconfig_requested_context),
        T(test_kubeconfig_json_form),
        T(test_kubeconfig_yaml_anchors_and_flow),
        T(test_kubeconfig_list_several_files),
        T(test_kubeconfig_list_requested_context),
        T(test_kubeconfig_list_stops_at_broken_file),
        T(test_kubeconfig_default_home),
        T(test_kubeconfig_load_uses_env),
        T(test_err_missing_file),
        T(test_err_unreadable_file),
        T(test_err_bad_yaml),
        T(test_err_top_level),
        T(test_err_unknown_context),
        T(test_err_no_current_context),
        T(test_err_missing_cluster_or_user),
        T(test_err_bad_base64),
        T(test_err_cert_key_pairs),
        T(test_err_missing_referenced_files),
        T(test_err_server),
        T(test_err_bad_bool),
        T(test_err_exec_config),
        T(test_err_unsupported_auth),
        T(test_err_list_none_usable),
        T(test_err_no_home),
        T(test_incluster_ok),
        T(test_incluster_ipv6_and_default_namespace),
        T(test_incluster_errors),
        T(test_load_prefers_incluster),
        T(test_load_incluster_falls_back),
        T(test_load_both_fail),
        T(test_exec_parse_ok),
        T(test_exec_parse_timestamps),
        T(test_exec_parse_errors),
        T(test_exec_run_v1_token),
        T(test_exec_run_v1beta1_cert),
        T(test_exec_run_args_env_info),
        T(test_exec_run_path_lookup),
        T(test_exec_run_from_kubeconfig),
        T(test_exec_run_nonzero_exit),
        T(test_exec_run_bad_output),
        T(test_exec_run_timeout),
        T(test_exec_run_cannot_start),
        T(test_alloc_failures),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
