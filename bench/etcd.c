/* The etcd of benchmarks 1-2 (mode "etcd"): where its binary is, and what
 * TTL it grants. The process itself is started and stopped with
 * tests/integration/etcd_harness.c (free loopback ports, plain http, data
 * directory in a fresh temporary directory, killed at exit). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "bench.h"

#define GRANT_TIMEOUT_MS 5000L

const char *bench_etcd_find(void)
{
    /* The harness's own rule: K8SLEASE_TEST_ETCD, else the path CMake found. */
    const char *env = getenv("K8SLEASE_TEST_ETCD");
    const char *bin = env && env[0] ? env : BENCH_ETCD_BIN;

    return bin[0] && access(bin, X_OK) == 0 ? bin : NULL;
}

typedef struct reply {
    char buf[2048];
    size_t len;
} reply;

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    reply *r = ud;
    size_t len = size * n;

    if (r->len + len < sizeof(r->buf)) {
        memcpy(r->buf + r->len, p, len);
        r->len += len;
        r->buf[r->len] = '\0';
    }
    return len;
}

/* POST a JSON body to endpoint+path; the parsed answer (200 only), or NULL. */
static json_t *post(const char *endpoint, const char *path, const char *body)
{
    char url[512];
    reply r = {.len = 0};
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = curl_easy_init();
    json_t *root = NULL;
    long status = 0;

    snprintf(url, sizeof(url), "%s%s", endpoint, path);
    if (c && hdr) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, GRANT_TIMEOUT_MS);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
        if (curl_easy_perform(c) == CURLE_OK &&
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status == 200)
            root = json_loads(r.buf, 0, NULL);
    }
    if (c)
        curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    return root;
}

/* The JSON gateway writes int64 fields as strings. */
static long long json_int64(const json_t *v)
{
    return json_is_string(v) ? strtoll(json_string_value(v), NULL, 10) : json_integer_value(v);
}

long bench_etcd_granted_ttl(const char *endpoint, long ttl_s)
{
    char body[96];
    json_t *grant, *revoke;
    long long id, ttl;

    snprintf(body, sizeof(body), "{\"TTL\":%ld}", ttl_s);
    if (!(grant = post(endpoint, "/v3/lease/grant", body)))
        return -1;
    id = json_int64(json_object_get(grant, "ID"));
    ttl = json_int64(json_object_get(grant, "TTL"));
    json_decref(grant);
    snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", id);
    if ((revoke = post(endpoint, "/v3/lease/revoke", body)))
        json_decref(revoke);
    return id > 0 && ttl > 0 ? (long)ttl : -1;
}
