/* What the etcd targets (target_etcd.c, target_etcd_encode.c) share: the
 * outputs of every decoder of etcd/codec.h, and the checks on them. */
#ifndef KL_FUZZ_ETCD_CHECKS_H
#define KL_FUZZ_ETCD_CHECKS_H

#include "etcd/codec.h"
#include "targets.h"

/* The outputs of the decoders of etcd/codec.h, one member per kind. */
typedef struct etcd_out {
    kl__etcd_lease lease; /* grant, keepalive, timetolive */
    int64_t revision;     /* header */
    kl__etcd_range range;
    kl__etcd_txn txn;
    kl__etcd_watch_msg watch;
    char *token;
    kl__etcd_error error;
} etcd_out;

typedef enum etcd_dec {
    DEC_GRANT,
    DEC_KEEPALIVE,
    DEC_TIMETOLIVE,
    DEC_HEADER,
    DEC_RANGE,
    DEC_TXN,
    DEC_WATCH,
    DEC_AUTH,
    DEC_ERROR, /* kl__etcd_error_parse: the others' notion of an error body */
    DEC_COUNT
} etcd_dec;

/* How each decoder's own error messages start (a gateway error body gives
 * "etcd: <its message> (gRPC code N)" instead). */
extern const char *const etcd_what[DEC_COUNT];

int etcd_decode(etcd_dec d, etcd_out *o, const char *body, size_t len);
int lease_is_zero(const kl__etcd_lease *l);
int range_is_zero(const kl__etcd_range *r);
int txn_is_zero(const kl__etcd_txn *t);
int watch_is_zero(const kl__etcd_watch_msg *m);
int etcd_out_is_zero(etcd_dec d, const etcd_out *o);
void etcd_out_clear(etcd_dec d, etcd_out *o);
int bytes_eq(const char *a, size_t an, const char *b, size_t bn);
int kv_eq(const kl__etcd_kv *a, const kl__etcd_kv *b);
int range_eq(const kl__etcd_range *a, const kl__etcd_range *b);
int txn_eq(const kl__etcd_txn *a, const kl__etcd_txn *b);
int watch_eq(const kl__etcd_watch_msg *a, const kl__etcd_watch_msg *b);
int lease_eq(const kl__etcd_lease *a, const kl__etcd_lease *b);
int etcd_out_eq(etcd_dec d, const etcd_out *a, const etcd_out *b);
void check_kv(const kl__etcd_kv *kv);
void check_range_out(const kl__etcd_range *r);
void check_success(etcd_dec d, const etcd_out *o);

#endif
