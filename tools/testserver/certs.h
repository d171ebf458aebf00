/*
 * certs.h - the test server's PKI and the files it hands to clients.
 *
 * One CA signs a serving certificate (127.0.0.1, ::1, localhost) and a client
 * certificate (CN=testserver-admin, O=system:masters). All keys are ECDSA
 * P-256: fast to generate at every start, accepted by GnuTLS, OpenSSL and Go.
 */
#ifndef TS_CERTS_H
#define TS_CERTS_H

#include <stddef.h>

/* PEM texts; libmicrohttpd keeps pointers to them while a daemon runs. */
typedef struct ts_pki {
    char *ca_crt, *ca_key;
    char *server_crt, *server_key;
    char *client_crt, *client_key;
} ts_pki;

/*
 * Loads DIR/ca.crt + DIR/ca.key if both exist (so a restarted server keeps
 * its CA), else creates a new CA. Leaf certificates are reused when present
 * and signed by that CA, else issued anew. Every file is (re)written to DIR;
 * keys with mode 0600. Returns 0 or -1 (a message was logged).
 */
int ts_pki_init(ts_pki *pki, const char *dir);
void ts_pki_free(ts_pki *pki);

/*
 * Writes DIR/kubeconfig (embedded bearer token), DIR/kubeconfig-cert (client
 * certificate) and DIR/kubeconfig-tokenfile (tokenFile: DIR/token), all with
 * the CA embedded, context "testserver", namespace "default".
 */
int ts_write_kubeconfigs(const ts_pki *pki, const char *dir, const char *server_url,
                         const char *token);

/* Writes DIR/token atomically (no trailing newline, as a projected token). */
int ts_write_token(const char *dir, const char *token);

#endif
