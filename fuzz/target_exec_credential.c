/* Fuzz target "exec_credential" (fuzz/corpus/exec_credential): ExecCredential JSON from exec
 * plugins. See targets.h. */
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
#include "core/credential.h"
#include "etcd/codec.h"
#include "core/http.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* ExecCredential                                                           */
/* ------------------------------------------------------------------------ */

static void check_cred_empty(const kl__exec_credential *c)
{
    CHECK(!c->token && !c->cert_pem && !c->key_pem && c->expiry_us == 0);
}

static void check_same_cred(const kl__exec_credential *a, const kl__exec_credential *b)
{
    CHECK(strcmp(str_or_empty(a->token), str_or_empty(b->token)) == 0);
    CHECK(strcmp(str_or_empty(a->cert_pem), str_or_empty(b->cert_pem)) == 0);
    CHECK(strcmp(str_or_empty(a->key_pem), str_or_empty(b->key_pem)) == 0);
    CHECK(a->expiry_us == b->expiry_us);
}

int kl_fuzz_exec_credential(const uint8_t *data, size_t size)
{
    kl__exec_credential c, v1, v1beta1;
    const char *json = (const char *)data;
    int err, e1, e2;

    err = kl__exec_credential_parse(json, size, NULL, &c);
    if (err < 0) {
        CHECK(err == K8SLEASE_ECONFIG);
        CHECK(kl__error_get()[0] != '\0');
        check_cred_empty(&c);
        return 0;
    }
    CHECK(c.token || c.cert_pem);
    CHECK(!c.cert_pem == !c.key_pem);
    CHECK(!c.token || c.token[0]);

    /* With a configured apiVersion exactly one of the two is accepted, and
     * it gives the same credential. */
    e1 = kl__exec_credential_parse(json, size, API_V1, &v1);
    e2 = kl__exec_credential_parse(json, size, API_V1BETA1, &v1beta1);
    CHECK((e1 == 0) != (e2 == 0));
    check_same_cred(&c, e1 == 0 ? &v1 : &v1beta1);
    check_cred_empty(e1 == 0 ? &v1beta1 : &v1);
    kl__exec_credential_clear(&v1);
    kl__exec_credential_clear(&v1beta1);
    kl__exec_credential_clear(&c);
    return 0;
}
