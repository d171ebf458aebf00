/* The fake HTTP(S) server of the unit tests: see fakehttp.h. */
#include "fakehttp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <stdarg.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

typedef struct upload {
    char body[KL_FAKEHTTP_BODY_MAX + 1];
    size_t len;
} upload;

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *data,
                                  size_t *data_size, void **con_cls)
{
    kl_fakehttp *s = cls;
    upload *u = *con_cls;

    (void)version;
    if (!u) {
        *con_cls = calloc(1, sizeof(upload));
        return *con_cls ? MHD_YES : MHD_NO;
    }
    if (*data_size) {
        size_t n = *data_size;

        if (n > KL_FAKEHTTP_BODY_MAX - u->len)
            n = KL_FAKEHTTP_BODY_MAX - u->len;
        memcpy(u->body + u->len, data, n);
        u->len += n;
        *data_size = 0;
        return MHD_YES;
    }
    return s->handler(s->arg, c, method, url, u->body, u->len);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode code)
{
    (void)cls;
    (void)c;
    (void)code;
    free(*con_cls);
    *con_cls = NULL;
}

void kl_fakehttp_start(kl_fakehttp *s, kl_fakehttp_handler handler, void *arg, const char *key_pem,
                       const char *cert_pem, const char *trust_pem)
{
    struct sockaddr_in sa;
    struct MHD_OptionItem opts[5];
    const union MHD_DaemonInfo *info;
    /* A thread per connection: handlers block on purpose. */
    unsigned int flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    int tls = key_pem && cert_pem, n = 0;

    memset(s, 0, sizeof(*s));
    s->handler = handler;
    s->arg = arg;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = 0;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    opts[n++] = (struct MHD_OptionItem){MHD_OPTION_SOCK_ADDR, 0, &sa};
    if (tls) {
        flags |= MHD_USE_TLS;
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)key_pem};
        opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)cert_pem};
        if (trust_pem)
            opts[n++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, (void *)trust_pem};
    }
    opts[n] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    s->daemon = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, NULL, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    assert_non_null(s->daemon);
    info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    assert_non_null(info);
    s->port = info->port;
    assert_true(s->port > 0);
    snprintf(s->url, sizeof(s->url), "%s://127.0.0.1:%d", tls ? "https" : "http", s->port);
}

void kl_fakehttp_stop(kl_fakehttp *s)
{
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}

enum MHD_Result kl_fakehttp_reply(struct MHD_Connection *c, unsigned int status,
                                  const char *content_type, const char *body)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    enum MHD_Result ret;

    if (content_type)
        MHD_add_response_header(r, "Content-Type", content_type);
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}
