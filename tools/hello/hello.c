/*
 * k8slease-hello: the server of deploy/ until you put yours in its place.
 *
 * Run under `k8slease elect ... -- k8slease-hello`, it exists only while
 * its replica leads, and answers every HTTP request on port $PORT (9000
 * when unset), on every address, with who leads:
 *
 *   leader my-master-7d4b9c-x2x9q epoch 3 lease default/my-master
 *
 * (K8SLEASE_IDENTITY, K8SLEASE_EPOCH and K8SLEASE_LEASE, which k8slease elect
 * gives its command). Through the Service of deploy/, which selects the Pod
 * labelled role=leader, a client reaches the current leader. SIGTERM or
 * SIGINT: exit 0. One connection at a time, each answered and closed: a
 * demonstration, not a web server. No library of the project's: it stands
 * for the user's server.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define REQUEST_TIMEOUT_MS 2000

static volatile sig_atomic_t stopping;

static void on_signal(int sig)
{
    (void)sig;
    stopping = 1;
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

/* Read the request's head (up to its blank line, a full buffer or the
 * timeout), then answer and close. */
static void serve(int fd, const char *body, size_t body_len)
{
    char buf[4096], head[256];
    size_t got = 0;
    int n;

    while (got < sizeof(buf) - 1) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t r;

        if (poll(&p, 1, REQUEST_TIMEOUT_MS) <= 0)
            break;
        if ((r = read(fd, buf + got, sizeof(buf) - 1 - got)) <= 0)
            break;
        got += (size_t)r;
        buf[got] = '\0';
        if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
            break;
    }
    n = snprintf(head, sizeof(head),
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 body_len);
    if (write(fd, head, (size_t)n) == n)
        (void)!write(fd, body, body_len);
    close(fd);
}

/* A socket listening on every address: IPv6 and IPv4 on one, or IPv4 only
 * where the kernel has no IPv6. -1 with errno set. */
static int listen_any(unsigned short port)
{
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0), off = 0, one = 1, err;
    struct sockaddr *addr = (struct sockaddr *)&a6;
    socklen_t len = sizeof(a6);

    a6.sin6_port = a4.sin_port = htons(port);
    if (fd < 0 && errno == EAFNOSUPPORT) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        addr = (struct sockaddr *)&a4;
        len = sizeof(a4);
    } else if (fd >= 0 && setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) < 0) {
        goto fail;
    }
    if (fd < 0)
        return -1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
        bind(fd, addr, len) < 0 || listen(fd, 16) < 0)
        goto fail;
    return fd;
fail:
    err = errno;
    close(fd);
    errno = err;
    return -1;
}

int main(void)
{
    struct sigaction sa = {.sa_handler = on_signal};
    const char *port_s = env_or("PORT", "9000");
    char body[1024], *end;
    long port = strtol(port_s, &end, 10);
    int fd, n;

    if (*end || port < 1 || port > 65535) {
        fprintf(stderr, "k8slease-hello: PORT=\"%s\": a port number (1-65535)\n", port_s);
        return 2;
    }
    n = snprintf(body, sizeof(body), "leader %s epoch %s lease %s\n",
                 env_or("K8SLEASE_IDENTITY", "?"), env_or("K8SLEASE_EPOCH", "?"),
                 env_or("K8SLEASE_LEASE", "?"));
    if (n < 0 || (size_t)n >= sizeof(body)) {
        fprintf(stderr, "k8slease-hello: K8SLEASE_IDENTITY or K8SLEASE_LEASE too long\n");
        return 2;
    }
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if ((fd = listen_any((unsigned short)port)) < 0) {
        fprintf(stderr, "k8slease-hello: port %ld: %s\n", port, strerror(errno));
        return 1;
    }
    fprintf(stderr, "k8slease-hello: listening on port %ld: %s", port, body);
    while (!stopping) {
        int c = accept(fd, NULL, NULL);

        if (c >= 0)
            serve(c, body, (size_t)n);
        else if (errno != EINTR && errno != ECONNABORTED) {
            fprintf(stderr, "k8slease-hello: accept: %s\n", strerror(errno));
            return 1;
        }
    }
    close(fd);
    return 0;
}
