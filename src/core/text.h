/* Text helpers the codecs share: line framing of streams (Kubernetes and
 * etcd watches), base64 decoding (kubeconfig data fields, etcd keys and
 * values), and trimming (token files, exec plugin messages). */
#ifndef KL_CORE_TEXT_H
#define KL_CORE_TEXT_H

#include <stddef.h>

#include "core/common.h"

/* Line framing of a watch stream: feed bytes as they come, get complete
 * lines. Lines longer than max_line are an error (K8SLEASE_EPROTOCOL). */
typedef struct kl__line_splitter {
    char *buf;
    size_t len, cap, max_line;
} kl__line_splitter;
void kl__line_splitter_init(kl__line_splitter *s, size_t max_line);
/* Calls on_line for every complete line (without '\n', "\r\n" trimmed,
 * empty lines skipped); stops and returns its nonzero result if any.
 * Returns 0, K8SLEASE_ENOMEM, K8SLEASE_EPROTOCOL (line too long), or what
 * on_line returned. */
int kl__line_splitter_feed(kl__line_splitter *s, const char *data, size_t len,
                           int (*on_line)(const char *line, size_t len, void *arg), void *arg);
void kl__line_splitter_free(kl__line_splitter *s);

/* Base64 (standard alphabet, padding required, whitespace ignored).
 * Returns a malloc'ed NUL-terminated buffer or NULL with *ok = 0 on a bad
 * input (no error set), NULL with *ok = 1 on ENOMEM. */
char *kl__base64_decode(const char *in, size_t in_len, size_t *out_len, int *ok);

/* Strip leading and trailing ASCII whitespace from s, in place. */
void kl__trim(char *s);

#endif
