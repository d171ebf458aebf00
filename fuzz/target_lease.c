/* Fuzz target "lease" (fuzz/corpus/lease): Lease JSON: parse, encode, parse back; unowned fields
 * kept. See targets.h. */
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
/* Lease                                                                    */
/* ------------------------------------------------------------------------ */

static void check_same_spec(const kl__lease_spec *want, const kl__lease_spec *got)
{
    /* An absent holder is written as "". */
    CHECK(strcmp(str_or_empty(want->holder), str_or_empty(got->holder)) == 0);
    CHECK(want->duration_s == got->duration_s);
    CHECK(want->acquire_us == got->acquire_us);
    CHECK(want->renew_us == got->renew_us);
    CHECK(want->transitions == got->transitions);
}

/* The object without the spec fields the codec owns, with spec {} when it
 * had none: what an update must keep byte for byte. */
static json_t *unowned_fields(const json_t *root)
{
    static const char *const owned[] = {"holderIdentity", "leaseDurationSeconds", "acquireTime",
                                        "renewTime", "leaseTransitions"};
    json_t *copy = json_deep_copy(root), *spec;

    CHECK(copy != NULL);
    spec = json_object_get(copy, "spec");
    if (!json_is_object(spec)) {
        CHECK(json_object_set_new(copy, "spec", json_object()) == 0);
    } else {
        for (size_t i = 0; i < KL_ARRAY_LEN(owned); i++)
            json_object_del(spec, owned[i]);
    }
    return copy;
}

static kl__lease *parse_back(const char *body)
{
    kl__lease *l = NULL;
    int err = kl__lease_parse(&l, body, strlen(body));

    CHECK_MSG(err == 0, "encoded body does not parse back: %s", body);
    kl_fuzz_check_lease(l);
    return l;
}

/* The renewal path splices the text instead of parsing it: it gives the
 * same JSON value as the jansson path, in the same key order, or declines. */
static void check_splice(const uint8_t *data, size_t size, const kl__lease_spec *spec,
                         const char *body)
{
    char *spliced = NULL, *da, *db;
    json_t *a, *b;
    int rc = kl__lease_splice_update((const char *)data, size, spec, &spliced);

    CHECK(rc == 0 || rc == 1);
    if (rc == 1) {
        CHECK(spliced == NULL);
        return;
    }
    a = json_loads(spliced, 0, NULL);
    b = json_loads(body, 0, NULL);
    CHECK_MSG(a && b && json_equal(a, b), "splice %s differs from %s", spliced, body);
    da = json_dumps(a, JSON_COMPACT | JSON_PRESERVE_ORDER);
    db = json_dumps(b, JSON_COMPACT | JSON_PRESERVE_ORDER);
    CHECK_MSG(da && db && strcmp(da, db) == 0, "splice order %s differs from %s", da, db);
    free(da);
    free(db);
    json_decref(a);
    json_decref(b);
    kl__free(spliced);
}

/* The scanner accepts only what jansson accepts, and reads the same. */
static void check_scan(const uint8_t *data, size_t size)
{
    kl__lease *scanned = NULL, *parsed = NULL;
    int rc = kl__lease_scan(&scanned, (const char *)data, size);
    int err = kl__lease_parse_json(&parsed, (const char *)data, size);

    CHECK(rc == 0 || rc == 1);
    CHECK((rc == 0) == (scanned != NULL));
    if (rc == 0) {
        CHECK_MSG(err == 0, "the scanner accepted what jansson rejects: %s", kl__error_get());
        kl_fuzz_check_same_lease(scanned, parsed);
    }
    kl__lease_free(scanned);
    kl__lease_free(parsed);
}

int kl_fuzz_lease(const uint8_t *data, size_t size)
{
    kl__lease *l = NULL, *back;
    json_t *want, *got;
    char *body;
    int err;

    check_scan(data, size);
    err = kl__lease_parse(&l, (const char *)data, size);
    if (err < 0) {
        CHECK(err == K8SLEASE_EPROTOCOL);
        CHECK(l == NULL);
        CHECK(kl__error_get()[0] != '\0');
        return 0;
    }
    kl_fuzz_check_lease(l);

    /* An UPDATE with the parsed spec reads back as the same Lease. Times
     * outside years 0..9999 cannot be written as RFC 3339 (no server
     * stores one): only the encoding itself is checked then. */
    body = kl__lease_encode_update(l, &l->spec);
    CHECK(body != NULL);
    check_splice(data, size, &l->spec, body);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        CHECK(strcmp(back->rv, l->rv) == 0 && strcmp(back->uid, l->uid) == 0);
        check_same_spec(&l->spec, &back->spec);
        want = unowned_fields(kl__lease_root(l));
        got = unowned_fields(kl__lease_root(back));
        CHECK_MSG(json_equal(want, got), "update changed fields it does not own: %s", body);
        json_decref(want);
        json_decref(got);
        kl__lease_free(back);
    }
    kl__free(body);

    /* A CREATE of the same spec under the same name reads back too. */
    body = kl__lease_encode_create(l->ns, l->name, &l->spec);
    CHECK(body != NULL);
    if (in_rfc3339_range(l->spec.acquire_us) && in_rfc3339_range(l->spec.renew_us)) {
        back = parse_back(body);
        CHECK(strcmp(back->name, l->name) == 0 && strcmp(back->ns, l->ns) == 0);
        check_same_spec(&l->spec, &back->spec);
        kl__lease_free(back);
    }
    kl__free(body);
    kl__lease_free(l);
    return 0;
}
