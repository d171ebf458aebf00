/* The main thread's event queue; see events.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "events.h"

static void *signal_main(void *arg)
{
    cli_events *q = arg;

    for (;;) {
        int sig, quit;

        if (sigwait(&q->signals, &sig) != 0)
            continue;
        pthread_mutex_lock(&q->mu);
        quit = q->quit;
        pthread_mutex_unlock(&q->mu);
        /* cli_events_fini() sets quit, then sends us one of our signals. */
        if (quit)
            return NULL;
        cli_events_post(q, CLI_EV_SIGNAL, sig, 0, NULL);
    }
}

static void on_sigchld(int sig)
{
    /* Never runs (SIGCHLD stays blocked); installed so that the signal is
     * not discarded as an ignored one before sigwait() sees it. */
    (void)sig;
}

int cli_events_init(cli_events *q, int catch_signals)
{
    pthread_condattr_t attr;
    struct sigaction sa;
    int err;

    memset(q, 0, sizeof(*q));
    q->tail = &q->head;
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &attr);
    pthread_condattr_destroy(&attr);
    if (!catch_signals)
        return 0;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigchld;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGCHLD, &sa, NULL);
    sigemptyset(&q->signals);
    sigaddset(&q->signals, SIGTERM);
    sigaddset(&q->signals, SIGCHLD);
    /* An ignored SIGINT or SIGHUP stays ignored: a shell ignores SIGINT for
     * background jobs, nohup ignores SIGHUP, and both mean it. */
    for (int i = 0; i < 2; i++) {
        int sig = i == 0 ? SIGINT : SIGHUP;
        struct sigaction old;

        if (sigaction(sig, NULL, &old) == 0 && old.sa_handler != SIG_IGN)
            sigaddset(&q->signals, sig);
    }
    pthread_sigmask(SIG_BLOCK, &q->signals, NULL);
    if ((err = pthread_create(&q->signal_thread, NULL, signal_main, q)) != 0) {
        cli_error("cannot start a thread: %s", strerror(err));
        return -1;
    }
    q->have_signal_thread = 1;
    return 0;
}

void cli_events_fini(cli_events *q)
{
    cli_event *ev;

    /* Not pthread_cancel: glibc would load libgcc_s at run time for it, a
     * library that ldd does not list and a minimal image may lack (the
     * process then aborts on its way out). SIGCHLD is always in the set,
     * and harmless: nobody waits for an event any more. */
    if (q->have_signal_thread) {
        pthread_mutex_lock(&q->mu);
        q->quit = 1;
        pthread_mutex_unlock(&q->mu);
        pthread_kill(q->signal_thread, SIGCHLD);
        pthread_join(q->signal_thread, NULL);
        q->have_signal_thread = 0;
    }
    while ((ev = q->head)) {
        q->head = ev->next;
        free(ev);
    }
    q->tail = &q->head;
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
}

void cli_events_post(cli_events *q, cli_event_type type, int sig, int64_t epoch,
                     const char *identity)
{
    size_t len = identity ? strlen(identity) : 0;
    cli_event *ev = malloc(sizeof(*ev) + len + 1);

    pthread_mutex_lock(&q->mu);
    if (ev) {
        ev->next = NULL;
        ev->type = type;
        ev->sig = sig;
        ev->epoch = epoch;
        memcpy(ev->identity, identity ? identity : "", len + 1);
        *q->tail = ev;
        q->tail = &ev->next;
    } else {
        q->lost = 1;
    }
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

int cli_events_wait(cli_events *q, int64_t timeout_ms, cli_event **out)
{
    int64_t until = cli_now_ns() + (timeout_ms > 0 ? timeout_ms : 0) * 1000000;
    struct timespec ts = {.tv_sec = until / 1000000000, .tv_nsec = until % 1000000000};
    int rc = 0;

    *out = NULL;
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->lost) {
        if (timeout_ms < 0)
            pthread_cond_wait(&q->cv, &q->mu);
        else if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT)
            break;
    }
    if (q->lost) {
        rc = -1;
    } else if (q->head) {
        *out = q->head;
        if (!(q->head = q->head->next))
            q->tail = &q->head;
        rc = 1;
    }
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void cli_events_on_started(int64_t epoch, void *user_data)
{
    cli_events_post(user_data, CLI_EV_STARTED, 0, epoch, NULL);
}

void cli_events_on_stopped(void *user_data)
{
    cli_events_post(user_data, CLI_EV_STOPPED, 0, 0, NULL);
}

void cli_events_on_leader(const char *identity, int64_t epoch, void *user_data)
{
    cli_events_post(user_data, CLI_EV_LEADER, 0, epoch, identity);
}
