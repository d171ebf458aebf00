/* Candidate processes seen from the driver: spawn, command, read events. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define QUIT_WAIT_MS 5000

/* A pipe whose ends are not inherited across exec. */
static int cloexec_pipe(int fds[2])
{
    if (pipe(fds) < 0)
        return -1;
    fcntl(fds[0], F_SETFD, FD_CLOEXEC);
    fcntl(fds[1], F_SETFD, FD_CLOEXEC);
    return 0;
}

int pool_init(pool *p, const bench_ctx *ctx, const char *lease, int poll_only,
              const char *etcd_endpoint, const bench_timing *t)
{
    int fds[2];

    memset(p, 0, sizeof(*p));
    p->ctx = ctx;
    p->lease = lease;
    p->kubeconfig = srv_kubeconfig(ctx);
    p->etcd_endpoint = etcd_endpoint;
    p->poll_only = poll_only;
    p->timing = *t;
    p->next_id = 1;
    p->ev_rd = p->ev_wr = -1;
    for (int i = 0; i < POOL_MAX; i++)
        p->c[i].cmd_fd = -1;
    if (cloexec_pipe(fds) < 0)
        return -1;
    p->ev_rd = fds[0];
    p->ev_wr = fds[1];
    return 0;
}

int pool_spawn(pool *p)
{
    return pool_spawn_pod(p, NULL);
}

int pool_spawn_pod(pool *p, const char *pod)
{
    char id[16], poll_only[4], timing[64], *argv[18];
    int slot = -1, fds[2], n = 0;
    cand *c;
    pid_t pid;

    for (int i = 0; i < POOL_MAX && slot < 0; i++)
        if (!p->c[i].pid)
            slot = i;
    if (slot < 0 || cloexec_pipe(fds) < 0)
        return -1;
    c = &p->c[slot];
    snprintf(id, sizeof(id), "%d", p->next_id);
    snprintf(poll_only, sizeof(poll_only), "%d", p->poll_only);
    snprintf(timing, sizeof(timing), "%" PRId64 "/%" PRId64 "/%" PRId64,
             p->timing.lease_duration_ms, p->timing.renew_deadline_ms, p->timing.retry_period_ms);
    argv[n++] = (char *)p->ctx->self_exe;
    argv[n++] = "candidate";
    if (p->etcd_endpoint) {
        argv[n++] = "--backend";
        argv[n++] = "etcd";
        argv[n++] = "--etcd-endpoints";
        argv[n++] = (char *)p->etcd_endpoint;
    } else {
        argv[n++] = "--kubeconfig";
        argv[n++] = (char *)p->kubeconfig;
    }
    argv[n++] = "--lease";
    argv[n++] = (char *)p->lease;
    argv[n++] = "--id";
    argv[n++] = id;
    argv[n++] = "--poll-only";
    argv[n++] = poll_only;
    argv[n++] = "--timing";
    argv[n++] = timing;
    if (pod) {
        argv[n++] = "--pod";
        argv[n++] = (char *)pod;
    }
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    if ((pid = fork()) < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        /* dup2 clears O_CLOEXEC on the copies: only stdin/stdout survive exec. */
        dup2(fds[0], STDIN_FILENO);
        dup2(p->ev_wr, STDOUT_FILENO);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[0]);
    memset(c, 0, sizeof(*c));
    c->id = p->next_id++;
    c->pid = pid;
    c->cmd_fd = fds[1];
    return slot;
}

int pool_send(pool *p, int slot, char cmd)
{
    cand *c = &p->c[slot];

    return c->pid && write(c->cmd_fd, &cmd, 1) == 1 ? 0 : -1;
}

static int slot_of(const pool *p, int id)
{
    for (int i = 0; i < POOL_MAX; i++)
        if (p->c[i].pid && p->c[i].id == id)
            return i;
    return -1;
}

/* Parse one line and update the candidate's state; 0, or -1 if malformed. */
static int parse_event(pool *p, char *line, cand_event *ev)
{
    int id;

    memset(ev, 0, sizeof(*ev));
    if (sscanf(line, "%c %d %" SCNd64 " %lld %127[^\n]", &ev->kind, &id, &ev->t_ns, &ev->epoch,
               ev->text) < 4)
        return -1;
    ev->slot = slot_of(p, id);
    if (ev->slot < 0)
        return 0;
    switch (ev->kind) {
    case 'S':
        p->c[ev->slot].leading = 1;
        break;
    case 'X':
        p->c[ev->slot].leading = 0;
        break;
    case 'L':
        snprintf(p->c[ev->slot].leader, sizeof(p->c[ev->slot].leader), "%s", ev->text);
        break;
    case 'E':
        bench_log("cand-%d: %s", id, ev->text);
        break;
    }
    return 0;
}

int pool_next(pool *p, cand_event *ev, int64_t deadline_ns)
{
    for (;;) {
        char *nl = memchr(p->buf, '\n', p->len);
        struct pollfd pfd = {.fd = p->ev_rd, .events = POLLIN};
        int64_t left_ms;
        ssize_t n;
        int rc;

        if (nl) {
            int ok;

            *nl = '\0';
            ok = parse_event(p, p->buf, ev) == 0;
            p->len -= (size_t)(nl + 1 - p->buf);
            memmove(p->buf, nl + 1, p->len);
            if (ok)
                return 0;
            continue;
        }
        left_ms = (deadline_ns - bench_now_ns() + NS_PER_MS - 1) / NS_PER_MS;
        if (left_ms <= 0)
            return -1;
        rc = poll(&pfd, 1, (int)left_ms);
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            return -1;
        if (p->len == sizeof(p->buf))
            p->len = 0; /* a line that long is garbage */
        n = read(p->ev_rd, p->buf + p->len, sizeof(p->buf) - p->len);
        if (n <= 0)
            return -1;
        p->len += (size_t)n;
    }
}

static void forget(pool *p, int slot)
{
    close(p->c[slot].cmd_fd);
    memset(&p->c[slot], 0, sizeof(p->c[slot]));
    p->c[slot].cmd_fd = -1;
}

void pool_kill(pool *p, int slot)
{
    if (!p->c[slot].pid)
        return;
    kill(p->c[slot].pid, SIGKILL);
    waitpid(p->c[slot].pid, NULL, 0);
    forget(p, slot);
}

int pool_wait_leader(pool *p, int64_t deadline_ns)
{
    cand_event ev;

    for (;;) {
        for (int i = 0; i < POOL_MAX; i++)
            if (p->c[i].pid && p->c[i].leading)
                return i;
        if (pool_next(p, &ev, deadline_ns) < 0)
            return -1;
    }
}

static int sees(const pool *p, int slot, int leader_slot)
{
    char want[32];

    snprintf(want, sizeof(want), "cand-%d", p->c[leader_slot].id);
    return strcmp(p->c[slot].leader, want) == 0;
}

int pool_wait_sees(pool *p, int slot, int leader_slot, int64_t deadline_ns)
{
    cand_event ev;

    while (!sees(p, slot, leader_slot))
        if (pool_next(p, &ev, deadline_ns) < 0)
            return -1;
    return 0;
}

int pool_wait_synced(pool *p, int leader_slot, int64_t deadline_ns)
{
    for (int i = 0; i < POOL_MAX; i++)
        if (p->c[i].pid && pool_wait_sees(p, i, leader_slot, deadline_ns) < 0)
            return -1;
    return 0;
}

void pool_fini(pool *p)
{
    int64_t deadline = bench_now_ns() + QUIT_WAIT_MS * NS_PER_MS;

    for (int i = 0; i < POOL_MAX; i++)
        pool_send(p, i, 'q');
    for (int i = 0; i < POOL_MAX; i++) {
        pid_t r;

        if (!p->c[i].pid)
            continue;
        while ((r = waitpid(p->c[i].pid, NULL, WNOHANG)) == 0 && bench_now_ns() < deadline)
            bench_sleep_ms(10);
        if (r == 0)
            pool_kill(p, i);
        else
            forget(p, i);
    }
    if (p->ev_rd >= 0)
        close(p->ev_rd);
    if (p->ev_wr >= 0)
        close(p->ev_wr);
    p->ev_rd = p->ev_wr = -1;
}
