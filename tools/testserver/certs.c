/*
 * certs.c - CA, serving and client certificates with OpenSSL's libcrypto,
 * and the kubeconfig/token files.
 */
#include "certs.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

enum cert_role { ROLE_CA, ROLE_SERVER, ROLE_CLIENT };

static void log_ssl(const char *what)
{
    char msg[256];
    unsigned long e = ERR_get_error();
    ERR_error_string_n(e, msg, sizeof(msg));
    ts_log("%s: %s", what, e ? msg : "unknown error");
    ERR_clear_error();
}

static char *bio_to_string(BIO *bio)
{
    char *data;
    long n = BIO_get_mem_data(bio, &data);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s) {
        memcpy(s, data, (size_t)n);
        s[n] = '\0';
    }
    return s;
}

static char *cert_pem(X509 *x)
{
    char *s = NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    if (bio && PEM_write_bio_X509(bio, x))
        s = bio_to_string(bio);
    BIO_free(bio);
    return s;
}

static char *key_pem(EVP_PKEY *k)
{
    char *s = NULL;
    BIO *bio = BIO_new(BIO_s_mem());
    /* PKCS#8 ("BEGIN PRIVATE KEY"): GnuTLS, OpenSSL and Go all read it. */
    if (bio && PEM_write_bio_PrivateKey(bio, k, NULL, NULL, 0, NULL, NULL))
        s = bio_to_string(bio);
    BIO_free(bio);
    return s;
}

static X509 *load_cert(const char *dir, const char *name)
{
    char *pem;
    size_t len;
    if (ts_read_file(dir, name, &pem, &len) < 0)
        return NULL;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    X509 *x = bio ? PEM_read_bio_X509(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    free(pem);
    return x;
}

static EVP_PKEY *load_key(const char *dir, const char *name)
{
    char *pem;
    size_t len;
    if (ts_read_file(dir, name, &pem, &len) < 0)
        return NULL;
    BIO *bio = BIO_new_mem_buf(pem, (int)len);
    EVP_PKEY *k = bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
    BIO_free(bio);
    free(pem);
    return k;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    if (!ext)
        return -1;
    int ok = X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

/*
 * Issues a certificate for key; issuer == NULL means self-signed (the CA).
 * Valid from an hour ago (clock skew between processes is not our test
 * subject) for ten years.
 */
static X509 *issue(EVP_PKEY *key, enum cert_role role, X509 *issuer, EVP_PKEY *issuer_key)
{
    X509 *x = X509_new();
    BIGNUM *bn = BN_new();
    unsigned char serial[16];
    X509_NAME *name;
    bool ok = false;

    if (!x || !bn || RAND_bytes(serial, sizeof(serial)) != 1)
        goto out;
    serial[0] &= 0x7f; /* a positive serial number */
    if (!BN_bin2bn(serial, sizeof(serial), bn) || !BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)))
        goto out;
    if (!X509_set_version(x, 2) || !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
        !X509_time_adj_ex(X509_getm_notAfter(x), 3650, 0, NULL) || !X509_set_pubkey(x, key))
        goto out;

    name = X509_get_subject_name(x);
    switch (role) {
    case ROLE_CA:
        ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        (const unsigned char *)"k8slease-testserver-ca", -1, -1, 0);
        break;
    case ROLE_SERVER:
        ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        (const unsigned char *)"kube-apiserver", -1, -1, 0);
        break;
    case ROLE_CLIENT:
        /* The apiserver maps O to groups and CN to the user name. */
        ok = X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                                        (const unsigned char *)"system:masters", -1, -1, 0) &&
             X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        (const unsigned char *)"testserver-admin", -1, -1, 0);
        break;
    }
    if (!ok)
        goto out;
    ok = false;
    if (!X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : name))
        goto out;

    X509 *signer = issuer ? issuer : x;
    if (add_ext(x, signer, NID_subject_key_identifier, "hash") < 0 ||
        add_ext(x, signer, NID_authority_key_identifier, "keyid:always") < 0)
        goto out;
    switch (role) {
    case ROLE_CA:
        if (add_ext(x, signer, NID_basic_constraints, "critical,CA:TRUE") < 0 ||
            add_ext(x, signer, NID_key_usage, "critical,keyCertSign,cRLSign,digitalSignature") < 0)
            goto out;
        break;
    case ROLE_SERVER:
        if (add_ext(x, signer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
            add_ext(x, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment") < 0 ||
            add_ext(x, signer, NID_ext_key_usage, "serverAuth") < 0 ||
            add_ext(x, signer, NID_subject_alt_name,
                    "IP:127.0.0.1,IP:0:0:0:0:0:0:0:1,DNS:localhost") < 0)
            goto out;
        break;
    case ROLE_CLIENT:
        if (add_ext(x, signer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
            add_ext(x, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment") < 0 ||
            add_ext(x, signer, NID_ext_key_usage, "clientAuth") < 0)
            goto out;
        break;
    }
    if (!X509_sign(x, issuer_key ? issuer_key : key, EVP_sha256()))
        goto out;
    ok = true;
out:
    BN_free(bn);
    if (!ok) {
        log_ssl("cannot issue certificate");
        X509_free(x);
        x = NULL;
    }
    return x;
}

/* Loads DIR/<crt>+<key> if both exist and the CA signed them, else issues. */
static int leaf(const char *dir, const char *crt_name, const char *key_name, enum cert_role role,
                X509 *ca, EVP_PKEY *ca_key, char **crt_pem, char **key_pem_out)
{
    X509 *x = load_cert(dir, crt_name);
    EVP_PKEY *k = load_key(dir, key_name);
    int rc = -1;

    if (x && k && X509_verify(x, ca_key) == 1 && X509_check_private_key(x, k) == 1) {
        /* Reused as found. */
    } else {
        X509_free(x);
        EVP_PKEY_free(k);
        x = NULL;
        ERR_clear_error();
        if (!(k = EVP_EC_gen("P-256"))) {
            log_ssl("cannot generate key");
            goto out;
        }
        if (!(x = issue(k, role, ca, ca_key)))
            goto out;
    }
    *crt_pem = cert_pem(x);
    *key_pem_out = key_pem(k);
    if (!*crt_pem || !*key_pem_out)
        goto out;
    rc = 0;
out:
    X509_free(x);
    EVP_PKEY_free(k);
    return rc;
}

static int save(const char *dir, const char *name, const char *pem, int mode)
{
    if (ts_write_file(dir, name, pem, strlen(pem), mode) < 0) {
        ts_log("cannot write %s/%s", dir, name);
        return -1;
    }
    return 0;
}

int ts_pki_init(ts_pki *pki, const char *dir)
{
    X509 *ca = NULL;
    EVP_PKEY *ca_key = NULL;
    int rc = -1;

    memset(pki, 0, sizeof(*pki));
    ca = load_cert(dir, "ca.crt");
    ca_key = load_key(dir, "ca.key");
    if (!ca || !ca_key || X509_check_private_key(ca, ca_key) != 1) {
        X509_free(ca);
        EVP_PKEY_free(ca_key);
        ca = NULL;
        ERR_clear_error();
        if (!(ca_key = EVP_EC_gen("P-256"))) {
            log_ssl("cannot generate CA key");
            goto out;
        }
        if (!(ca = issue(ca_key, ROLE_CA, NULL, NULL)))
            goto out;
    }
    if (!(pki->ca_crt = cert_pem(ca)) || !(pki->ca_key = key_pem(ca_key)))
        goto out;
    if (leaf(dir, "server.crt", "server.key", ROLE_SERVER, ca, ca_key, &pki->server_crt,
             &pki->server_key) < 0 ||
        leaf(dir, "client.crt", "client.key", ROLE_CLIENT, ca, ca_key, &pki->client_crt,
             &pki->client_key) < 0)
        goto out;
    if (save(dir, "ca.crt", pki->ca_crt, 0644) < 0 || save(dir, "ca.key", pki->ca_key, 0600) < 0 ||
        save(dir, "server.crt", pki->server_crt, 0644) < 0 ||
        save(dir, "server.key", pki->server_key, 0600) < 0 ||
        save(dir, "client.crt", pki->client_crt, 0644) < 0 ||
        save(dir, "client.key", pki->client_key, 0600) < 0)
        goto out;
    rc = 0;
out:
    X509_free(ca);
    EVP_PKEY_free(ca_key);
    if (rc < 0)
        ts_pki_free(pki);
    return rc;
}

void ts_pki_free(ts_pki *pki)
{
    free(pki->ca_crt);
    free(pki->ca_key);
    free(pki->server_crt);
    free(pki->server_key);
    free(pki->client_crt);
    free(pki->client_key);
    memset(pki, 0, sizeof(*pki));
}

static int write_kubeconfig(const char *dir, const char *name, const char *server_url,
                            const char *ca_b64, const char *user_lines)
{
    ts_buf b = {0};
    int rc = -1;
    if (ts_buf_printf(&b,
                      "apiVersion: v1\n"
                      "kind: Config\n"
                      "clusters:\n"
                      "- name: testserver\n"
                      "  cluster:\n"
                      "    server: %s\n"
                      "    certificate-authority-data: %s\n"
                      "contexts:\n"
                      "- name: testserver\n"
                      "  context:\n"
                      "    cluster: testserver\n"
                      "    user: testserver\n"
                      "    namespace: default\n"
                      "current-context: testserver\n"
                      "preferences: {}\n"
                      "users:\n"
                      "- name: testserver\n"
                      "  user:\n"
                      "%s",
                      server_url, ca_b64, user_lines) == 0)
        rc = save(dir, name, b.data, 0600);
    ts_buf_free(&b);
    return rc;
}

int ts_write_kubeconfigs(const ts_pki *pki, const char *dir, const char *server_url,
                         const char *token)
{
    char *ca = ts_base64_encode(pki->ca_crt, strlen(pki->ca_crt));
    char *crt = ts_base64_encode(pki->client_crt, strlen(pki->client_crt));
    char *key = ts_base64_encode(pki->client_key, strlen(pki->client_key));
    ts_buf user = {0};
    int rc = -1;

    if (!ca || !crt || !key)
        goto out;
    if (ts_buf_printf(&user, "    token: %s\n", token) < 0 ||
        write_kubeconfig(dir, "kubeconfig", server_url, ca, user.data) < 0)
        goto out;
    user.len = 0;
    if (ts_buf_printf(&user, "    client-certificate-data: %s\n    client-key-data: %s\n", crt,
                      key) < 0 ||
        write_kubeconfig(dir, "kubeconfig-cert", server_url, ca, user.data) < 0)
        goto out;
    user.len = 0;
    if (ts_buf_printf(&user, "    tokenFile: %s/token\n", dir) < 0 ||
        write_kubeconfig(dir, "kubeconfig-tokenfile", server_url, ca, user.data) < 0)
        goto out;
    rc = 0;
out:
    ts_buf_free(&user);
    free(ca);
    free(crt);
    free(key);
    return rc;
}

int ts_write_token(const char *dir, const char *token)
{
    return save(dir, "token", token, 0600);
}
