/* The TLS of a loop: see core/tls.h. Files are read once, when the loop is
 * made, as the data of a kubeconfig is; OpenSSL objects are built once and
 * shared by every connection (an X509_STORE is reference-counted). */
#include "core/tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "core/common.h"

/* A CA bundle, a certificate chain or a key: far less than this. */
#define PEM_FILE_MAX (4 * 1024 * 1024)

struct kl__tls {
    int insecure;
    X509_STORE *store;      /* the configured CA; NULL: the system's */
    X509 *cert;             /* the client certificate, NULL: none */
    STACK_OF(X509) * chain; /* what follows it in its PEM */
    EVP_PKEY *key;
    char *why; /* what cannot be used, NULL: all can */
};

/* A PEM file's bytes (kl__free, wiped when they may be a key). */
static int read_pem_file(const char *path, char **out, size_t *len, char *why, size_t why_len)
{
    kl__buf b = {0};
    char chunk[4096], e[128];
    FILE *f = fopen(path, "re");
    size_t n;
    int err = 0;

    *out = NULL;
    *len = 0;
    if (!f) {
        snprintf(why, why_len, "cannot read %s: %s", path, kl__strerror(errno, e, sizeof(e)));
        return K8SLEASE_ETLS;
    }
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (b.len + n > PEM_FILE_MAX) {
            snprintf(why, why_len, "%s is larger than %d bytes", path, PEM_FILE_MAX);
            err = K8SLEASE_ETLS;
            break;
        }
        if (kl__buf_append(&b, chunk, n) < 0) {
            err = K8SLEASE_ENOMEM;
            break;
        }
    }
    if (!err && ferror(f)) {
        snprintf(why, why_len, "cannot read %s", path);
        err = K8SLEASE_ETLS;
    }
    fclose(f);
    kl__wipe(chunk, sizeof(chunk));
    if (err) {
        kl__wipe(b.data, b.len);
        kl__buf_free(&b);
        return err;
    }
    *out = b.data ? b.data : kl__strdup("");
    *len = b.len;
    return *out ? 0 : K8SLEASE_ENOMEM;
}

/* OpenSSL's reason for the last failure, or what. */
static void ssl_why(char *why, size_t len, const char *what)
{
    unsigned long e = ERR_peek_last_error();

    if (e)
        ERR_error_string_n(e, why, len);
    else
        snprintf(why, len, "%s", what);
    ERR_clear_error();
}

/* The certificates of a PEM blob: into the store (trust anchors), or the
 * first as the client certificate and the rest as its chain. */
static int load_certs(kl__tls *tls, const char *pem, size_t len, int trust, char *why,
                      size_t why_len)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    X509 *x;
    int n = 0, ok = 1;

    if (!bio)
        return K8SLEASE_ENOMEM;
    while (ok && (x = PEM_read_bio_X509(bio, NULL, NULL, NULL))) {
        if (trust) {
            ok = X509_STORE_add_cert(tls->store, x) == 1;
        } else if (n == 0) {
            tls->cert = x; /* owned by tls */
            x = NULL;
        } else if ((ok = sk_X509_push(tls->chain, x) > 0)) {
            x = NULL;
        }
        X509_free(x);
        n++;
    }
    BIO_free(bio);
    if (!ok) {
        ssl_why(why, why_len, "cannot keep a certificate");
        return K8SLEASE_ETLS;
    }
    ERR_clear_error(); /* the end of the PEM data */
    if (n == 0) {
        snprintf(why, why_len, "no PEM certificate in it");
        return K8SLEASE_ETLS;
    }
    return 0;
}

static int load_trust(kl__tls *tls, const char *pem, size_t len, char *why, size_t why_len)
{
    return load_certs(tls, pem, len, 1, why, why_len);
}

static int load_key(kl__tls *tls, const char *pem, size_t len, char *why, size_t why_len)
{
    BIO *bio = BIO_new_mem_buf(pem, (int)len);

    if (!bio)
        return K8SLEASE_ENOMEM;
    tls->key = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    BIO_free(bio);
    if (!tls->key) {
        ssl_why(why, why_len, "no PEM private key in it");
        return K8SLEASE_ETLS;
    }
    return 0;
}

static int load_chain(kl__tls *tls, const char *pem, size_t len, char *why, size_t why_len)
{
    return load_certs(tls, pem, len, 0, why, why_len);
}

/* A client certificate with its key in the same PEM (a combined file, as
 * libcurl reads one). */
static int load_chain_and_key(kl__tls *tls, const char *pem, size_t len, char *why, size_t why_len)
{
    int err = load_certs(tls, pem, len, 0, why, why_len);

    return err < 0 ? err : load_key(tls, pem, len, why, why_len);
}

typedef int (*pem_loader)(kl__tls *tls, const char *pem, size_t len, char *why, size_t why_len);

/* One part of the config, PEM data or else a file, handed to load. A copy
 * read from a file is wiped (it may be a key). */
static int load_part(kl__tls *tls, const char *data, size_t data_len, const char *file,
                     pem_loader load, char *why, size_t why_len)
{
    char *owned = NULL;
    size_t len = data_len;
    int err;

    if (!data) {
        if ((err = read_pem_file(file, &owned, &len, why, why_len)) < 0)
            return err;
        data = owned;
    }
    err = load(tls, data, len, why, why_len);
    if (owned)
        kl__wipe(owned, len);
    kl__free(owned);
    return err;
}

/* Load the parts; the first that cannot be used is named in tls->why. */
static int load(kl__tls *tls, const kl__restconfig *cfg)
{
    char why[256] = "";
    const char *part = "the certificate authority";
    int err = 0;

    if (!tls->insecure && (cfg->ca_pem || cfg->ca_file)) {
        if (!(tls->store = X509_STORE_new()))
            return K8SLEASE_ENOMEM;
        if ((err = load_part(tls, cfg->ca_pem, cfg->ca_pem_len, cfg->ca_file, load_trust, why,
                             sizeof(why))) < 0)
            goto out;
    }
    if (cfg->cert_pem || cfg->cert_file) {
        int own_key = cfg->key_pem || cfg->key_file;

        part = own_key ? "the client certificate" : "the client certificate and key";
        if (!(tls->chain = sk_X509_new_null()))
            return K8SLEASE_ENOMEM;
        if ((err = load_part(tls, cfg->cert_pem, cfg->cert_pem_len, cfg->cert_file,
                             own_key ? load_chain : load_chain_and_key, why, sizeof(why))) < 0)
            goto out;
        part = "the client key";
        if (own_key && (err = load_part(tls, cfg->key_pem, cfg->key_pem_len, cfg->key_file,
                                        load_key, why, sizeof(why))) < 0)
            goto out;
        if (X509_check_private_key(tls->cert, tls->key) != 1) {
            ssl_why(why, sizeof(why), "it does not match the client certificate");
            err = K8SLEASE_ETLS;
        }
    }
out:
    if (err == K8SLEASE_ETLS && !(tls->why = kl__sprintf("%s: %s", part, why)))
        err = K8SLEASE_ENOMEM;
    return err == K8SLEASE_ETLS ? 0 : err;
}

int kl__tls_new(kl__tls **out, const kl__restconfig *cfg)
{
    kl__tls *tls = kl__calloc(1, sizeof(*tls));
    int err;

    *out = NULL;
    if (!tls)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    tls->insecure = cfg->insecure;
    if ((err = load(tls, cfg)) < 0) {
        kl__tls_free(tls);
        ERR_clear_error();
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    *out = tls;
    return 0;
}

void kl__tls_free(kl__tls *tls)
{
    if (!tls)
        return;
    X509_STORE_free(tls->store);
    X509_free(tls->cert);
    sk_X509_pop_free(tls->chain, X509_free);
    EVP_PKEY_free(tls->key);
    kl__free(tls->why);
    kl__free(tls);
}

const char *kl__tls_error(const kl__tls *tls)
{
    return tls->why;
}

int kl__tls_insecure(const kl__tls *tls)
{
    return tls->insecure;
}

int kl__tls_setup(const kl__tls *tls, SSL_CTX *ctx)
{
    int ok = 1;

    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (tls->insecure) {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        /* The configured CA is the only trust anchor: the system store
         * must not vouch for an API server. */
        if (tls->store)
            SSL_CTX_set1_cert_store(ctx, tls->store);
        else
            ok = SSL_CTX_set_default_verify_paths(ctx) == 1;
    }
    /* An unusable configuration is used by no request (kl__tls_error). */
    if (ok && !tls->why && tls->cert && tls->key && !SSL_CTX_get0_certificate(ctx)) {
        ok = SSL_CTX_use_certificate(ctx, tls->cert) == 1;
        for (int i = 0; ok && i < sk_X509_num(tls->chain); i++)
            ok = SSL_CTX_add1_chain_cert(ctx, sk_X509_value(tls->chain, i)) == 1;
        ok = ok && SSL_CTX_use_PrivateKey(ctx, tls->key) == 1;
    }
    ERR_clear_error();
    return ok ? 0 : K8SLEASE_ENOMEM;
}
