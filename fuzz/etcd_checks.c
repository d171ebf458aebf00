/* The decoder outputs and checks shared by the etcd fuzz targets
 * (etcd_checks.h). */
#include "etcd_checks.h"

#include <stdint.h>
#include <string.h>

/* How each decoder's own error messages start (a gateway error body gives
 * "etcd: <its message> (gRPC code N)" instead). */
const char *const etcd_what[DEC_COUNT] = {
    "etcd lease grant response",
    "etcd lease keepalive response",
    "etcd lease timetolive response",
    "etcd response",
    "etcd range response",
    "etcd txn response",
    "etcd watch message",
    "etcd authenticate response",
    "etcd error body",
};

int etcd_decode(etcd_dec d, etcd_out *o, const char *body, size_t len)
{
    switch (d) {
    case DEC_GRANT:
        return kl__etcd_parse_grant(&o->lease, body, len);
    case DEC_KEEPALIVE:
        return kl__etcd_parse_keepalive(&o->lease, body, len);
    case DEC_TIMETOLIVE:
        return kl__etcd_parse_timetolive(&o->lease, body, len);
    case DEC_HEADER:
        return kl__etcd_parse_header(&o->revision, body, len);
    case DEC_RANGE:
        return kl__etcd_parse_range(&o->range, body, len);
    case DEC_TXN:
        return kl__etcd_parse_txn(&o->txn, body, len);
    case DEC_WATCH:
        return kl__etcd_parse_watch_msg(&o->watch, body, len);
    case DEC_AUTH:
        return kl__etcd_parse_authenticate(&o->token, body, len);
    case DEC_ERROR:
        return kl__etcd_error_parse(&o->error, body, len);
    default:
        CHECK_MSG(0, "decoder %d", (int)d);
        return 0;
    }
}

int lease_is_zero(const kl__etcd_lease *l)
{
    return !l->revision && !l->id && !l->ttl && !l->granted_ttl;
}

int range_is_zero(const kl__etcd_range *r)
{
    return !r->revision && !r->kvs && !r->n_kvs && !r->more && !r->count;
}

int txn_is_zero(const kl__etcd_txn *t)
{
    return !t->revision && !t->succeeded && !t->ops && !t->n_ops;
}

int watch_is_zero(const kl__etcd_watch_msg *m)
{
    return !m->revision && !m->watch_id && !m->created && !m->canceled && !m->fragment &&
           !m->compact_revision && !m->cancel_reason && !m->events && !m->n_events;
}

/* The output of decoder d holds nothing (to free). */
int etcd_out_is_zero(etcd_dec d, const etcd_out *o)
{
    switch (d) {
    case DEC_GRANT:
    case DEC_KEEPALIVE:
    case DEC_TIMETOLIVE:
        return lease_is_zero(&o->lease);
    case DEC_HEADER:
        return o->revision == 0;
    case DEC_RANGE:
        return range_is_zero(&o->range);
    case DEC_TXN:
        return txn_is_zero(&o->txn);
    case DEC_WATCH:
        return watch_is_zero(&o->watch);
    case DEC_AUTH:
        return o->token == NULL;
    default:
        return o->error.grpc_code == 0 && o->error.message == NULL;
    }
}

/* Frees the output of d with its _clear function, twice: a cleared struct
 * is zero and clearing it again is harmless. */
void etcd_out_clear(etcd_dec d, etcd_out *o)
{
    for (int i = 0; i < 2; i++) {
        switch (d) {
        case DEC_RANGE:
            kl__etcd_range_clear(&o->range);
            break;
        case DEC_TXN:
            kl__etcd_txn_clear(&o->txn);
            break;
        case DEC_WATCH:
            kl__etcd_watch_msg_clear(&o->watch);
            break;
        case DEC_AUTH:
            kl__free(o->token);
            o->token = NULL;
            break;
        case DEC_ERROR:
            kl__etcd_error_clear(&o->error);
            break;
        default: /* nothing owned */
            memset(&o->lease, 0, sizeof(o->lease));
            o->revision = 0;
            break;
        }
        CHECK(etcd_out_is_zero(d, o));
    }
}

int bytes_eq(const char *a, size_t an, const char *b, size_t bn)
{
    return an == bn && (an == 0 || memcmp(a, b, an) == 0);
}

int kv_eq(const kl__etcd_kv *a, const kl__etcd_kv *b)
{
    return bytes_eq(a->key, a->key_len, b->key, b->key_len) &&
           bytes_eq(a->value, a->value_len, b->value, b->value_len) &&
           a->create_revision == b->create_revision && a->mod_revision == b->mod_revision &&
           a->version == b->version && a->lease == b->lease;
}

int range_eq(const kl__etcd_range *a, const kl__etcd_range *b)
{
    if (a->revision != b->revision || a->more != b->more || a->count != b->count ||
        a->n_kvs != b->n_kvs)
        return 0;
    for (size_t i = 0; i < a->n_kvs; i++)
        if (!kv_eq(&a->kvs[i], &b->kvs[i]))
            return 0;
    return 1;
}

int txn_eq(const kl__etcd_txn *a, const kl__etcd_txn *b)
{
    if (a->revision != b->revision || a->succeeded != b->succeeded || a->n_ops != b->n_ops)
        return 0;
    for (size_t i = 0; i < a->n_ops; i++)
        if (a->ops[i].type != b->ops[i].type || a->ops[i].deleted != b->ops[i].deleted ||
            !range_eq(&a->ops[i].range, &b->ops[i].range))
            return 0;
    return 1;
}

int watch_eq(const kl__etcd_watch_msg *a, const kl__etcd_watch_msg *b)
{
    if (a->revision != b->revision || a->watch_id != b->watch_id || a->created != b->created ||
        a->canceled != b->canceled || a->fragment != b->fragment ||
        a->compact_revision != b->compact_revision ||
        strcmp(str_or_empty(a->cancel_reason), str_or_empty(b->cancel_reason)) != 0 ||
        a->n_events != b->n_events)
        return 0;
    for (size_t i = 0; i < a->n_events; i++)
        if (a->events[i].type != b->events[i].type || !kv_eq(&a->events[i].kv, &b->events[i].kv))
            return 0;
    return 1;
}

int lease_eq(const kl__etcd_lease *a, const kl__etcd_lease *b)
{
    return a->revision == b->revision && a->id == b->id && a->ttl == b->ttl &&
           a->granted_ttl == b->granted_ttl;
}

int etcd_out_eq(etcd_dec d, const etcd_out *a, const etcd_out *b)
{
    switch (d) {
    case DEC_GRANT:
    case DEC_KEEPALIVE:
    case DEC_TIMETOLIVE:
        return lease_eq(&a->lease, &b->lease);
    case DEC_HEADER:
        return a->revision == b->revision;
    case DEC_RANGE:
        return range_eq(&a->range, &b->range);
    case DEC_TXN:
        return txn_eq(&a->txn, &b->txn);
    case DEC_WATCH:
        return watch_eq(&a->watch, &b->watch);
    case DEC_AUTH:
        return strcmp(str_or_empty(a->token), str_or_empty(b->token)) == 0;
    default:
        return a->error.grpc_code == b->error.grpc_code &&
               strcmp(str_or_empty(a->error.message), str_or_empty(b->error.message)) == 0;
    }
}

/* What etcd/codec.h promises of every decoded kv and message, whatever the
 * body said. */
void check_kv(const kl__etcd_kv *kv)
{
    CHECK(kv->key != NULL && kv->key[kv->key_len] == '\0');
    CHECK(kv->value != NULL && kv->value[kv->value_len] == '\0');
}

void check_range_out(const kl__etcd_range *r)
{
    CHECK((r->kvs == NULL) == (r->n_kvs == 0));
    CHECK(r->more == 0 || r->more == 1);
    for (size_t i = 0; i < r->n_kvs; i++)
        check_kv(&r->kvs[i]);
}

void check_success(etcd_dec d, const etcd_out *o)
{
    switch (d) {
    case DEC_GRANT:
        CHECK(o->lease.id > 0 && o->lease.ttl > 0);
        break;
    case DEC_KEEPALIVE:
        CHECK(o->lease.ttl >= 0);
        break;
    case DEC_TIMETOLIVE:
        CHECK(o->lease.ttl >= -1);
        break;
    case DEC_RANGE:
        CHECK(o->range.revision > 0);
        check_range_out(&o->range);
        break;
    case DEC_TXN:
        CHECK(o->txn.revision > 0);
        CHECK((o->txn.ops == NULL) == (o->txn.n_ops == 0));
        CHECK(o->txn.succeeded == 0 || o->txn.succeeded == 1);
        for (size_t i = 0; i < o->txn.n_ops; i++) {
            const kl__etcd_op *op = &o->txn.ops[i];

            CHECK(op->type == KL_ETCD_OP_RANGE || op->type == KL_ETCD_OP_PUT ||
                  op->type == KL_ETCD_OP_DELETE);
            CHECK(op->type == KL_ETCD_OP_DELETE || op->deleted == 0);
            check_range_out(&op->range);
        }
        break;
    case DEC_WATCH:
        CHECK(o->watch.cancel_reason != NULL);
        CHECK((o->watch.events == NULL) == (o->watch.n_events == 0));
        CHECK(o->watch.created <= 1 && o->watch.canceled <= 1 && o->watch.fragment <= 1);
        for (size_t i = 0; i < o->watch.n_events; i++) {
            CHECK(o->watch.events[i].type == KL_ETCD_EVENT_PUT ||
                  o->watch.events[i].type == KL_ETCD_EVENT_DELETE);
            check_kv(&o->watch.events[i].kv);
        }
        break;
    case DEC_AUTH:
        CHECK(o->token != NULL && o->token[0] != '\0');
        break;
    case DEC_ERROR:
        CHECK(o->error.message != NULL);
        break;
    default:
        break;
    }
}
