/* The TLS a loop connects with, set up once from its rest config: the
 * trust anchors, the client certificate and key, the policy (TLS 1.2 at
 * least, the configured CA as the only trust anchor, as client-go). Both
 * transports take it from here: the native one (core/native.c) builds its
 * SSL_CTX with kl__tls_setup, libcurl (core/curl.c) calls kl__tls_setup on
 * each connection's SSL_CTX (CURLOPT_SSL_CTX_FUNCTION).
 *
 * Threads: kl__tls_new and kl__tls_free any; kl__tls_setup on one thread
 * at a time (the loop's). */
#ifndef KL_TLS_H
#define KL_TLS_H

#include <openssl/ssl.h>

#include "core/restconfig.h"

typedef struct kl__tls kl__tls;

/* Read and parse the rest config's CA, certificate and key (files or
 * data). A part OpenSSL cannot use is not an error here: kl__tls_error
 * says which and why, and the requests fail with it. K8SLEASE_ENOMEM. */
int kl__tls_new(kl__tls **out, const kl__restconfig *cfg);
void kl__tls_free(kl__tls *tls);
/* What of the configuration cannot be used ("the client key: <reason>"),
 * NULL when all can. */
const char *kl__tls_error(const kl__tls *tls);
/* insecure-skip-tls-verify: the server's certificate is not checked. */
int kl__tls_insecure(const kl__tls *tls);
/* Configure ctx as the rest config says: TLS 1.2 at least, the peer
 * verified against the configured CA (the system's when none is
 * configured) unless insecure, and the configured client certificate and
 * key unless ctx has a certificate already (an exec plugin's, which libcurl
 * loads). 0, or K8SLEASE_ENOMEM when OpenSSL refuses. */
int kl__tls_setup(const kl__tls *tls, SSL_CTX *ctx);

#endif
