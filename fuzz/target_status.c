/* Fuzz target "status" (fuzz/corpus/status): Status bodies. See targets.h. */
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
#include "k8s/api.h"
#include "k8s/kubeconfig.h"
#include "k8s/codec.h"

/* ------------------------------------------------------------------------ */
/* Status                                                                   */
/* ------------------------------------------------------------------------ */

int kl_fuzz_status(const uint8_t *data, size_t size)
{
    static const struct {
        long status;
        int code;
    } cases[] = {
        {400, K8SLEASE_ESERVER},   {401, K8SLEASE_EAUTH},     {403, K8SLEASE_EAUTH},
        {404, K8SLEASE_ENOTFOUND}, {409, K8SLEASE_ECONFLICT}, {410, K8SLEASE_ESERVER},
        {422, K8SLEASE_ESERVER},   {429, K8SLEASE_ESERVER},   {500, K8SLEASE_ESERVER},
        {503, K8SLEASE_ESERVER},
    };
    static const char what[] = "get lease fuzz/x";
    kl__status st;
    size_t i = size % KL_ARRAY_LEN(cases);
    int err;

    err = kl__status_parse(&st, (const char *)data, size);
    if (err == 0) {
        CHECK(st.reason != NULL && st.message != NULL);
    } else {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(st.reason == NULL && st.message == NULL && st.code == 0);
    }
    kl__status_clear(&st);

    /* The same body as the error body of an HTTP status. */
    kl__error_clear();
    err = kl__http_status_error(cases[i].status, (const char *)data, size, what);
    CHECK(err == cases[i].code);
    CHECK_MSG(strncmp(kl__error_get(), what, strlen(what)) == 0, "message: %s", kl__error_get());
    return 0;
}
