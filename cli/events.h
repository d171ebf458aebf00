/* The main thread's event queue. Library callbacks (on the client's loop
 * thread) and signals (caught by a sigwait thread) become events that the
 * main thread handles one at a time: callbacks never block, and nothing but
 * the queue needs a lock. */
#ifndef K8SLEASE_CLI_EVENTS_H
#define K8SLEASE_CLI_EVENTS_H

#include <pthread.h>
#include <signal.h>
#include <stdint.h>

typedef enum cli_event_type {
    CLI_EV_SIGNAL,  /* sig: SIGTERM, SIGINT, SIGHUP or SIGCHLD */
    CLI_EV_STARTED, /* the elector won a term: epoch */
    CLI_EV_STOPPED, /* the elector's term (or election) is over */
    CLI_EV_LEADER   /* the observed holder changed: identity ("" for none), epoch
                       (-1 from a watch: no such Lease) */
} cli_event_type;

typedef struct cli_event {
    struct cli_event *next;
    cli_event_type type;
    int sig;
    int64_t epoch;
    char identity[]; /* "" unless CLI_EV_LEADER */
} cli_event;

typedef struct cli_events {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    cli_event *head, **tail;
    int lost; /* an event could not be allocated: the caller must give up */
    int quit; /* the signal thread must end (under mu) */
    int have_signal_thread;
    pthread_t signal_thread;
    sigset_t signals;
} cli_events;

/* Initialise the queue. With catch_signals, block SIGTERM, SIGCHLD, and
 * SIGINT and SIGHUP unless they are ignored, and deliver them as events:
 * call it from the main thread before any other thread exists, so that
 * every thread inherits the mask.
 * 0, or -1 (message printed). */
int cli_events_init(cli_events *q, int catch_signals);
/* Stop the signal thread and free what is queued. */
void cli_events_fini(cli_events *q);

/* Queue an event. Any thread; never blocks beyond a short lock. */
void cli_events_post(cli_events *q, cli_event_type type, int sig, int64_t epoch,
                     const char *identity);

/* Wait up to timeout_ms (< 0: no limit) for the next event. 1 with *out set
 * (free it with free()), 0 on timeout, -1 if an event was lost (out of
 * memory). Main thread. */
int cli_events_wait(cli_events *q, int64_t timeout_ms, cli_event **out);

/* Library callbacks that post to the cli_events passed as user_data. */
void cli_events_on_started(int64_t epoch, void *user_data);
void cli_events_on_stopped(void *user_data);
void cli_events_on_leader(const char *identity, int64_t epoch, void *user_data);

#endif
