/* The event loop: one thread, a binary min-heap of timers and a FIFO of
 * closures posted by other threads. The I/O it waits on (libcurl multi, in
 * core/http.c) is behind kl__loop_io, so this file knows no protocol.
 *
 * One iteration: read the monotonic clock once ("now"), let the io make
 * progress and run its callbacks, run the timers that are due, run the
 * posted closures, then sleep in the io's wait until the earliest of the io's
 * own deadline, the first timer and POLL_MAX_MS; a post wakes it. When
 * something is due at once, the next iteration starts without a wait (once
 * in a row). */
#include "core/loop.h"

#include <pthread.h>
#include <signal.h>

#include "core/clock.h"

/* Longest sleep: every wake-up source (io, timers, posts) shortens it. */
#define POLL_MAX_MS  60000
#define HEAP_INITIAL 64

typedef struct closure {
    struct closure *next;
    void (*fn)(void *arg);
    void *arg;
    int borrowed; /* kl__loop_call's, on its caller's stack: not freed */
} closure;

struct kl__loop {
    /* Set by kl__loop_start, read-only afterwards. */
    const kl__log *log;
    kl__loop_io io;
    void *io_data;
    pthread_t thread;

    /* Loop thread only (and the freeing thread once the loop has stopped). */
    int64_t now;
    kl__timer **heap;
    size_t heap_len, heap_cap;
    kl__loop_counts counts;

    /* Shared with other threads, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cond; /* a kl__loop_call or a kl__loop_set_flag happened */
    closure *head, *tail;
    int stop;
};

static _Thread_local const kl__loop *current_loop;

/* ------------------------------------------------------------------------ */
/* Timers                                                                   */
/* ------------------------------------------------------------------------ */

static void heap_set(kl__loop *loop, size_t i, kl__timer *t)
{
    loop->heap[i] = t;
    t->slot = i + 1;
}

static void sift_up(kl__loop *loop, size_t i)
{
    kl__timer *t = loop->heap[i];

    while (i > 0) {
        size_t parent = (i - 1) / 2;

        if (loop->heap[parent]->at <= t->at)
            break;
        heap_set(loop, i, loop->heap[parent]);
        i = parent;
    }
    heap_set(loop, i, t);
}

static void sift_down(kl__loop *loop, size_t i)
{
    kl__timer *t = loop->heap[i];

    for (;;) {
        size_t child = 2 * i + 1;

        if (child >= loop->heap_len)
            break;
        if (child + 1 < loop->heap_len && loop->heap[child + 1]->at < loop->heap[child]->at)
            child++;
        if (t->at <= loop->heap[child]->at)
            break;
        heap_set(loop, i, loop->heap[child]);
        i = child;
    }
    heap_set(loop, i, t);
}

void kl__timer_init(kl__timer *t, kl__timer_cb cb, void *arg)
{
    t->at = 0;
    t->slot = 0;
    t->cb = cb;
    t->arg = arg;
}

void kl__timer_arm(kl__loop *loop, kl__timer *t, int64_t at)
{
    t->at = at;
    if (t->slot) {
        sift_up(loop, t->slot - 1);
        sift_down(loop, t->slot - 1);
        return;
    }
    if (loop->heap_len == loop->heap_cap) {
        size_t cap = loop->heap_cap * 2;
        kl__timer **heap = kl__realloc(loop->heap, cap * sizeof(*heap));

        if (!heap) {
            /* The interface cannot fail (callers arm timers from callbacks
             * with no way out); the heap starts with room for many timers,
             * so this takes a process that is out of memory anyway. */
            kl__log_printf(loop->log, K8SLEASE_LOG_ERROR,
                           "timer heap: out of memory; a timer was dropped");
            return;
        }
        loop->heap = heap;
        loop->heap_cap = cap;
    }
    loop->heap[loop->heap_len++] = t;
    sift_up(loop, loop->heap_len - 1);
}

void kl__timer_cancel(kl__loop *loop, kl__timer *t)
{
    size_t i;
    kl__timer *last;

    if (!t->slot)
        return;
    i = t->slot - 1;
    last = loop->heap[--loop->heap_len];
    t->slot = 0;
    if (last != t) {
        heap_set(loop, i, last);
        sift_up(loop, i);
        sift_down(loop, last->slot - 1);
    }
}

static void run_timers(kl__loop *loop)
{
    /* Bounded, so a timer re-armed for "now" by its own callback runs in
     * the next iteration instead of spinning here. */
    size_t budget = loop->heap_len;

    while (budget-- > 0 && loop->heap_len > 0 && loop->heap[0]->at <= loop->now) {
        kl__timer *t = loop->heap[0];

        kl__timer_cancel(loop, t);
        loop->counts.timers++;
        t->cb(t, t->arg);
    }
}

/* ------------------------------------------------------------------------ */
/* Loop thread                                                              */
/* ------------------------------------------------------------------------ */

/* Run the closures queued so far; *stop tells whether kl__loop_free asked
 * the loop to end. Returns how many ran. */
static size_t run_posted(kl__loop *loop, int *stop)
{
    closure *c, *next;
    size_t n = 0;

    pthread_mutex_lock(&loop->mu);
    c = loop->head;
    loop->head = loop->tail = NULL;
    *stop = loop->stop;
    pthread_mutex_unlock(&loop->mu);
    for (; c; c = next) {
        /* A borrowed closure is gone once its function has returned. */
        int borrowed = c->borrowed;

        next = c->next;
        c->fn(c->arg);
        if (!borrowed)
            kl__free(c);
        n++;
    }
    return n;
}

/* The wait until the first timer is measured from the clock as it is now,
 * not from the iteration's "now", which the iteration's own work made older:
 * the timer runs when it is due, not that much later. Rounded up, so that
 * the timer is due when the wait ends (a wait that ends before would cost
 * another wake-up for nothing). */
static int poll_timeout(kl__loop *loop)
{
    long io_ms = loop->io.timeout_ms(loop->io_data);
    int64_t ms = POLL_MAX_MS;

    if (io_ms >= 0 && io_ms < ms)
        ms = io_ms;
    if (loop->heap_len > 0 && ms > 0) {
        int64_t wait = loop->heap[0]->at - kl__clock_mono_ns();

        wait = wait <= 0 ? 0 : (wait + KL_NS_PER_MS - 1) / KL_NS_PER_MS;
        if (wait < ms)
            ms = wait;
    }
    return (int)ms;
}

static void *loop_main(void *arg)
{
    kl__loop *loop = arg;
    int stop = 0, timeout, skipped = 0;

    current_loop = loop;
    for (;;) {
        loop->now = kl__clock_mono_ns();
        loop->io.run(loop->io_data);
        run_timers(loop);
        run_posted(loop, &stop);
        if (stop)
            break;
        /* Something is due already (a request just started, a timer for
         * now): the next iteration, without a wait that would not sleep;
         * but not twice in a row, so that what keeps asking for "at once"
         * cannot keep the io's sockets from being looked at. */
        timeout = poll_timeout(loop);
        if (timeout == 0 && !skipped) {
            skipped = 1;
            continue;
        }
        skipped = 0;
        if (timeout > 0)
            loop->counts.waits++;
        loop->io.wait(loop->io_data, timeout);
    }
    /* Closures posted before the stop still run: they may own memory that
     * only they free. */
    while (run_posted(loop, &stop) > 0)
        ;
    current_loop = NULL;
    return NULL;
}

static void loop_destroy(kl__loop *loop)
{
    closure *c;

    while ((c = loop->head)) {
        loop->head = c->next;
        if (!c->borrowed)
            kl__free(c);
    }
    kl__free(loop->heap);
    pthread_cond_destroy(&loop->cond);
    pthread_mutex_destroy(&loop->mu);
    kl__free(loop);
}

int kl__loop_start(kl__loop **out, const kl__loop_io *io, void *data, const kl__log *log)
{
    kl__loop *loop = NULL;
    sigset_t all, old;
    int rc;

    *out = NULL;
    if (!(loop = kl__calloc(1, sizeof(*loop))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    if (pthread_mutex_init(&loop->mu, NULL) != 0) {
        kl__free(loop);
        return kl__error_set(K8SLEASE_ENOMEM, "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&loop->cond, NULL) != 0) {
        pthread_mutex_destroy(&loop->mu);
        kl__free(loop);
        return kl__error_set(K8SLEASE_ENOMEM, "pthread_cond_init failed");
    }
    loop->log = log;
    loop->io = *io;
    loop->io_data = data;
    loop->now = kl__clock_mono_ns();
    loop->heap_cap = HEAP_INITIAL;
    if (!(loop->heap = kl__calloc(loop->heap_cap, sizeof(*loop->heap)))) {
        loop_destroy(loop);
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    }
    /* The host process's signal handlers stay on its own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(&loop->thread, NULL, loop_main, loop);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        loop_destroy(loop);
        return kl__error_set(K8SLEASE_ENOMEM, "cannot start the loop thread: error %d", rc);
    }
    *out = loop;
    return 0;
}

void kl__loop_free(kl__loop *loop)
{
    if (!loop)
        return;
    if (kl__loop_on_thread(loop)) {
        kl__log_printf(loop->log, K8SLEASE_LOG_ERROR,
                       "kl__loop_free called on the loop thread; not freed");
        return;
    }
    pthread_mutex_lock(&loop->mu);
    loop->stop = 1;
    pthread_mutex_unlock(&loop->mu);
    loop->io.wakeup(loop->io_data);
    pthread_join(loop->thread, NULL);
    /* The io first: freeing its requests cancels their timers. */
    loop->io.destroy(loop->io_data);
    loop_destroy(loop);
}

void *kl__loop_io_data(const kl__loop *loop)
{
    return loop->io_data;
}

static void enqueue(kl__loop *loop, closure *c)
{
    pthread_mutex_lock(&loop->mu);
    if (loop->tail)
        loop->tail->next = c;
    else
        loop->head = c;
    loop->tail = c;
    pthread_mutex_unlock(&loop->mu);
    loop->io.wakeup(loop->io_data);
}

int kl__loop_post(kl__loop *loop, void (*fn)(void *arg), void *arg)
{
    closure *c = kl__malloc(sizeof(*c));

    if (!c)
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    c->next = NULL;
    c->fn = fn;
    c->arg = arg;
    c->borrowed = 0;
    enqueue(loop, c);
    return 0;
}

typedef struct call {
    kl__loop *loop;
    void (*fn)(void *arg);
    void *arg;
    int done;
    closure c;
} call;

static void call_run(void *arg)
{
    call *c = arg;

    c->fn(c->arg);
    pthread_mutex_lock(&c->loop->mu);
    c->done = 1;
    pthread_cond_broadcast(&c->loop->cond);
    pthread_mutex_unlock(&c->loop->mu);
}

/* Needs no allocation (the closure lives in this frame until it has run),
 * so the free functions that rely on it cannot fail. */
int kl__loop_call(kl__loop *loop, void (*fn)(void *arg), void *arg)
{
    call c = {loop, fn, arg, 0, {NULL, call_run, NULL, 1}};

    if (kl__loop_on_thread(loop))
        return kl__error_set(K8SLEASE_ESTATE, "blocking call from the loop thread");
    c.c.arg = &c;
    enqueue(loop, &c.c);
    pthread_mutex_lock(&loop->mu);
    while (!c.done)
        pthread_cond_wait(&loop->cond, &loop->mu);
    pthread_mutex_unlock(&loop->mu);
    return 0;
}

int kl__loop_on_thread(const kl__loop *loop)
{
    return current_loop == loop;
}

void kl__loop_counts_get(const kl__loop *loop, kl__loop_counts *out)
{
    *out = loop->counts;
}

int64_t kl__loop_now(const kl__loop *loop)
{
    return loop->now;
}

const kl__log *kl__loop_log(const kl__loop *loop)
{
    return loop->log;
}

void kl__loop_wait_flag(kl__loop *loop, const int *flag)
{
    pthread_mutex_lock(&loop->mu);
    while (!*flag)
        pthread_cond_wait(&loop->cond, &loop->mu);
    pthread_mutex_unlock(&loop->mu);
}

void kl__loop_set_flag(kl__loop *loop, int *flag)
{
    pthread_mutex_lock(&loop->mu);
    *flag = 1;
    pthread_cond_broadcast(&loop->cond);
    pthread_mutex_unlock(&loop->mu);
}
