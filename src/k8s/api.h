/* Kubernetes API conventions: RFC 1123 names, Lease paths, Lease answers,
 * errors from Status bodies. */
#ifndef KL_K8S_API_H
#define KL_K8S_API_H

#include "core/http.h"
#include "k8s/codec.h"

/* Check a namespace (RFC 1123 label) and a Lease or Pod name (RFC 1123
 * subdomain). what names the argument in the message. 0 or K8SLEASE_EINVAL. */
int kl__check_namespace(const char *ns);
int kl__check_name(const char *what, const char *name);

/* "/apis/coordination.k8s.io/v1/namespaces/NS/leases" (+ "/NAME" when name
 * is not NULL). Inputs must have passed the checks above. NULL on ENOMEM. */
char *kl__lease_path(const char *ns, const char *name);

/* Map a completed request for a Lease to a code and message: 0 when the
 * status is 200/201 and *lease was parsed (caller frees), else the error. */
int kl__lease_result(const kl__http_result *res, const char *what, kl__lease **lease);

/* Map an HTTP error response to a K8SLEASE_E* code and set the thread's
 * error message: "<what>: HTTP <status> <reason>: <Status.message>". */
int kl__http_status_error(long status, const char *body, size_t body_len, const char *what);

#endif
