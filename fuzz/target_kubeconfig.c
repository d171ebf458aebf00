/* Fuzz target "kubeconfig" (fuzz/corpus/kubeconfig): kubeconfig files (YAML), through the loader.
 * See targets.h. */
#include "targets.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/common.h"
#include "etcd/codec.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* Kubeconfig                                                               */
/* ------------------------------------------------------------------------ */

/* The loader reads files only: the input goes to one temporary file per
 * process, rewritten for every run. */
static char kc_path[PATH_MAX];

static void kc_remove(void)
{
    if (kc_path[0])
        unlink(kc_path);
}

static const char *kc_write(const uint8_t *data, size_t size)
{
    int fd;

    if (!kc_path[0]) {
        const char *dir = getenv("TMPDIR");

        /* A ':' would split the path as a KUBECONFIG list. */
        if (!dir || !dir[0] || strchr(dir, ':') || strlen(dir) > PATH_MAX - 64)
            dir = "/tmp";
        snprintf(kc_path, sizeof(kc_path), "%s/kl_fuzz_kubeconfig_XXXXXX", dir);
        fd = mkstemp(kc_path);
        CHECK_MSG(fd >= 0, "mkstemp %s", kc_path);
        close(fd);
        atexit(kc_remove);
    }
    fd = open(kc_path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    CHECK(fd >= 0);
    while (size > 0) {
        ssize_t n = write(fd, data, size);

        CHECK(n > 0);
        data += n;
        size -= (size_t)n;
    }
    close(fd);
    return kc_path;
}

static void check_restconfig(int err, const kl__restconfig *cfg, const char *path)
{
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(cfg == NULL);
        CHECK_MSG(strstr(kl__error_get(), path) != NULL, "message does not name the file");
        return;
    }
    CHECK(cfg != NULL);
    CHECK(cfg->server != NULL);
    CHECK(!strncmp(cfg->server, "https://", 8) || !strncmp(cfg->server, "http://", 7));
    CHECK(cfg->server[strlen(cfg->server) - 1] != '/');
    CHECK(cfg->ns != NULL && cfg->ns[0] != '\0' && cfg->source != NULL);
    CHECK(!cfg->ca_pem || cfg->ca_pem[cfg->ca_pem_len] == '\0');
    CHECK(!cfg->cert_pem || cfg->cert_pem[cfg->cert_pem_len] == '\0');
    CHECK(!cfg->key_pem || cfg->key_pem[cfg->key_pem_len] == '\0');
    CHECK(!(cfg->cert_file || cfg->cert_pem) == !(cfg->key_file || cfg->key_pem));
    if (cfg->exec) {
        CHECK(cfg->exec->api_version != NULL && cfg->exec->command != NULL);
        CHECK(cfg->exec->args != NULL && cfg->exec->env != NULL);
        for (char **e = cfg->exec->env; *e; e++)
            CHECK(strchr(*e, '=') != NULL);
    }
}

int kl_fuzz_kubeconfig(const uint8_t *data, size_t size)
{
    const char *path = kc_write(data, size);
    kl__restconfig *cfg = NULL;
    int err;

    err = kl__restconfig_from_kubeconfig(&cfg, path, NULL);
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);

    /* A requested context takes the other path through the lookup. */
    cfg = NULL;
    err = kl__restconfig_from_kubeconfig(&cfg, path, "fuzz");
    check_restconfig(err, cfg, path);
    kl__restconfig_free(cfg);
    return 0;
}
