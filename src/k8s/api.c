/* Kubernetes API conventions shared by the driver, the watch and the
 * one-shot calls: RFC 1123 names, Lease paths, Lease answers, errors from
 * Status bodies. */
#include "k8s/api.h"

#include <stdio.h>
#include <string.h>

static int is_alnum_lower(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* RFC 1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most max bytes. */
static int is_dns_label(const char *s, size_t len)
{
    if (len == 0 || len > 63 || !is_alnum_lower(s[0]) || !is_alnum_lower(s[len - 1]))
        return 0;
    for (size_t i = 0; i < len; i++)
        if (!is_alnum_lower(s[i]) && s[i] != '-')
            return 0;
    return 1;
}

int kl__check_namespace(const char *ns)
{
    if (!ns)
        return kl__error_set(K8SLEASE_EINVAL, "namespace is NULL");
    if (!is_dns_label(ns, strlen(ns)))
        return kl__error_set(K8SLEASE_EINVAL,
                             "namespace \"%.80s\": must be a lowercase RFC 1123 label "
                             "(a-z, 0-9, '-', at most 63 characters)",
                             ns);
    return 0;
}

int kl__check_name(const char *what, const char *name)
{
    size_t len;
    const char *p;

    if (!name)
        return kl__error_set(K8SLEASE_EINVAL, "%s is NULL", what);
    len = strlen(name);
    if (len == 0 || len > 253)
        goto bad;
    /* A subdomain is dot-separated labels. */
    for (p = name; p <= name + len;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);

        if (!is_dns_label(p, n))
            goto bad;
        if (!dot)
            break;
        p = dot + 1;
    }
    return 0;
bad:
    return kl__error_set(K8SLEASE_EINVAL,
                         "%s \"%.80s\": must be a lowercase RFC 1123 subdomain (a-z, 0-9, '-', "
                         "'.', at most 253 characters)",
                         what, name);
}

char *kl__lease_path(const char *ns, const char *name)
{
    /* Checked names need no escaping. */
    if (name)
        return kl__sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s", ns, name);
    return kl__sprintf("/apis/coordination.k8s.io/v1/namespaces/%s/leases", ns);
}

int kl__lease_result(const kl__http_result *res, const char *what, kl__lease **lease)
{
    int err;

    *lease = NULL;
    if (res->err)
        return kl__error_set(res->err, "%s: %s", what, res->errmsg);
    if (res->status != 200 && res->status != 201)
        return kl__http_status_error(res->status, res->body, res->body_len, what);
    /* EPROTOCOL for a body that is no Lease; ENOMEM stays ENOMEM. */
    if ((err = kl__lease_parse(lease, res->body, res->body_len)) < 0)
        return kl__error_wrap(err, "%s", what);
    return 0;
}

/* The Kubernetes API answers errors with a Status body (k8s/codec.h); anything
 * else (a proxy's page) is quoted as printable text. */
int kl__http_status_error(long status, const char *body, size_t body_len, const char *what)
{
    kl__status st = {0};
    const char *message = NULL, *reason = NULL;
    int code;

    if (!what)
        what = "request";
    if (status == 404)
        code = K8SLEASE_ENOTFOUND;
    else if (status == 409)
        code = K8SLEASE_ECONFLICT;
    else if (status == 401 || status == 403)
        code = K8SLEASE_EAUTH;
    else
        code = K8SLEASE_ESERVER;
    if (body && body_len && kl__status_parse(&st, body, body_len) == 0) {
        message = st.message;
        reason = st.reason;
    }
    if (message && message[0]) {
        if (reason && reason[0])
            kl__error_set(code, "%s: HTTP %ld %s: %s", what, status, reason, message);
        else
            kl__error_set(code, "%s: HTTP %ld: %s", what, status, message);
    } else if (reason && reason[0]) {
        kl__error_set(code, "%s: HTTP %ld %s", what, status, reason);
    } else {
        /* Not a Status (a proxy's HTML page, plain text): a printable prefix. */
        char snippet[201];
        size_t i, n = body && body_len < 200 ? body_len : (body ? 200 : 0);

        for (i = 0; i < n; i++)
            snippet[i] = (body[i] >= 0x20 && body[i] < 0x7f) ? body[i] : ' ';
        while (n > 0 && snippet[n - 1] == ' ')
            n--;
        snippet[n] = '\0';
        if (n > 0)
            kl__error_set(code, "%s: HTTP %ld: %s", what, status, snippet);
        else
            kl__error_set(code, "%s: HTTP %ld", what, status);
    }
    kl__status_clear(&st);
    return code;
}
