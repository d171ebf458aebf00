/* The event loop: one thread, epoll on the descriptors watched, a binary
 * min-heap of timers and a FIFO of closures posted by other threads. What
 * runs on it plugs in through kl__loop_hooks (core/http.c), so this file
 * knows no protocol.
 *
 * One iteration: read the monotonic clock once ("now"), run the callbacks of
 * the descriptors the last wait found ready, the hooks' run (what the I/O
 * brought), the timers that are due and the posted closures; then the
 * hooks' flush (what the iteration queued goes out) and a sleep in
 * epoll_wait until the earliest of a descriptor's readiness, the first
 * timer, the hooks' own deadline and POLL_MAX_MS; a post wakes it (an
 * eventfd). When something is
 * due at once, the next iteration starts without a wait (once in a row, so
 * that the descriptors are still looked at).
 *
 * Under load the waits are batched: a loop that sleeps and wakes up at
 * least BATCH_ON times a second, BATCH_OFF or more of them for data (a few
 * hundred elections on a server that answers each write on its own), waits
 * BATCH_MS with only the eventfd watched and then takes what every
 * descriptor has, as long as data comes in at least BATCH_OFF windows a
 * second; rates over BATCH_RATE_S seconds (elections started together
 * renew in bursts, one per retry period). One wake-up, with its context
 * switch, for all the answers, events and timers of the window, each at
 * most BATCH_MS later. Closures posted by other threads are not held back.
 * BATCH_ON is twice the rate at which batching pays. */
#include "core/loop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/clock.h"

/* Longest sleep: every wake-up source (descriptors, timers, posts)
 * shortens it. */
#define POLL_MAX_MS 60000
/* Ready descriptors taken from one epoll_wait; more wait for the next. */
#define EPOLL_EVENTS 64
/* Descriptors the watch table has room for at first (it grows). */
#define WATCH_INITIAL 64
#define BATCH_MS      10
#define BATCH_ON      (2 * 1000 / BATCH_MS)
#define BATCH_OFF     (1000 / BATCH_MS / 5)
#define BATCH_RATE_S  4

typedef struct closure {
    struct closure *next;
    void (*fn)(void *arg);
    void *arg;
    int borrowed; /* kl__loop_call's, on its caller's stack: not freed */
} closure;

/* What a descriptor is watched for; cb NULL: not watched. */
typedef struct watch {
    kl__watch_cb cb;
    void *arg;
    uint32_t events;
} watch;

struct kl__loop {
    /* Set by kl__loop_start, read-only afterwards. */
    const kl__log *log;
    kl__loop_hooks hooks;
    void *data;
    pthread_t thread;
    int epfd;   /* the watched descriptors and wakefd */
    int wakefd; /* eventfd: kl__loop_post and kl__loop_free end the wait */
    int holdfd; /* epoll of wakefd alone: the wait of a batching window */

    /* Loop thread only (and the freeing thread once the loop has stopped). */
    int64_t now;
    kl__timer *root; /* the first timer due */
    size_t ntimers;
    size_t armed; /* timers armed so far: each arming's order */
    kl__loop_counts counts;
    watch *watches; /* by descriptor */
    size_t nwatches;
    struct epoll_event ready[EPOLL_EVENTS]; /* from the last wait */
    int nready, next_ready;                 /* ready[next_ready..nready) still to run */
    int batching;                           /* waits are batched (BATCH_MS) */
    long sleeps;                            /* waits that could sleep, since rate_at */
    long data_wakes; /* waits that ended with a descriptor ready, since rate_at */
    int64_t rate_at; /* monotonic ns: start of the BATCH_RATE_S counts */

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

/* The heap is intrusive (as libuv's timers): each timer carries its links,
 * so arming allocates nothing and cannot fail. A timer's place is found
 * from the heap's size: position n (1-based, in breadth-first order) is
 * reached from the root by the bits of n below its highest one, 0 for
 * left. Equal deadlines run in the order they were armed. */

static int timer_before(const kl__timer *a, const kl__timer *b)
{
    return a->at < b->at || (a->at == b->at && a->slot < b->slot);
}

/* The node at position n (1 <= n <= ntimers), or the parent of position
 * n when parent is set (n >= 2). */
static kl__timer *heap_at(const kl__loop *loop, size_t n, int parent)
{
    kl__timer *t = loop->root;
    int depth = 0;

    while ((n >> depth) > 1)
        depth++;
    for (int k = depth - 1; k >= (parent ? 1 : 0); k--)
        t = (n >> k) & 1 ? t->right : t->left;
    return t;
}

/* Make n take t's place under t's parent (or as the root). */
static void replace_child(kl__loop *loop, const kl__timer *t, kl__timer *n)
{
    if (!t->parent)
        loop->root = n;
    else if (t->parent->left == t)
        t->parent->left = n;
    else
        t->parent->right = n;
}

/* Exchange a node and its child c. */
static void heap_swap(kl__loop *loop, kl__timer *p, kl__timer *c)
{
    kl__timer *pp = p->parent, *cl = c->left, *cr = c->right, *sibling;

    if (p->left == c) {
        sibling = p->right;
        c->left = p;
        c->right = sibling;
    } else {
        sibling = p->left;
        c->right = p;
        c->left = sibling;
    }
    if (sibling)
        sibling->parent = c;
    p->left = cl;
    p->right = cr;
    if (cl)
        cl->parent = p;
    if (cr)
        cr->parent = p;
    replace_child(loop, p, c);
    c->parent = pp;
    p->parent = c;
}

static void sift_up(kl__loop *loop, kl__timer *t)
{
    while (t->parent && timer_before(t, t->parent))
        heap_swap(loop, t->parent, t);
}

static void sift_down(kl__loop *loop, kl__timer *t)
{
    for (;;) {
        kl__timer *first = t;

        if (t->left && timer_before(t->left, first))
            first = t->left;
        if (t->right && timer_before(t->right, first))
            first = t->right;
        if (first == t)
            return;
        heap_swap(loop, t, first);
    }
}

static void heap_insert(kl__loop *loop, kl__timer *t)
{
    size_t n = ++loop->ntimers;
    kl__timer *p;

    t->parent = t->left = t->right = NULL;
    if (n == 1) {
        loop->root = t;
        return;
    }
    p = heap_at(loop, n, 1);
    if (n & 1)
        p->right = t;
    else
        p->left = t;
    t->parent = p;
    sift_up(loop, t);
}

static void heap_remove(kl__loop *loop, kl__timer *t)
{
    kl__timer *last = heap_at(loop, loop->ntimers, 0);

    loop->ntimers--;
    /* The last node leaves its place ... */
    replace_child(loop, last, NULL);
    /* ... and takes t's, unless it is t. */
    if (last != t) {
        last->parent = t->parent;
        last->left = t->left;
        last->right = t->right;
        if (last->left)
            last->left->parent = last;
        if (last->right)
            last->right->parent = last;
        replace_child(loop, t, last);
        sift_up(loop, last);
        sift_down(loop, last);
    }
    t->parent = t->left = t->right = NULL;
}

void kl__timer_init(kl__timer *t, kl__timer_cb cb, void *arg)
{
    memset(t, 0, sizeof(*t));
    t->cb = cb;
    t->arg = arg;
}

void kl__timer_arm(kl__loop *loop, kl__timer *t, int64_t at)
{
    if (t->slot)
        heap_remove(loop, t);
    t->at = at;
    t->slot = ++loop->armed;
    heap_insert(loop, t);
}

void kl__timer_cancel(kl__loop *loop, kl__timer *t)
{
    if (!t->slot)
        return;
    heap_remove(loop, t);
    t->slot = 0;
}

static void run_timers(kl__loop *loop)
{
    /* Bounded, so a timer re-armed for "now" by its own callback runs in
     * the next iteration instead of spinning here. */
    size_t budget = loop->ntimers;

    while (budget-- > 0 && loop->root && loop->root->at <= loop->now) {
        kl__timer *t = loop->root;

        kl__timer_cancel(loop, t);
        loop->counts.timers++;
        t->cb(t, t->arg);
    }
}

/* ------------------------------------------------------------------------ */
/* Descriptors                                                              */
/* ------------------------------------------------------------------------ */

int kl__loop_reserve(kl__loop *loop, int fd)
{
    size_t n = loop->nwatches ? loop->nwatches : WATCH_INITIAL;
    watch *grown;

    if (fd < 0 || (size_t)fd < loop->nwatches)
        return 0;
    while (n <= (size_t)fd)
        n *= 2;
    if (!(grown = kl__realloc(loop->watches, n * sizeof(*grown))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory watching descriptor %d", fd);
    memset(grown + loop->nwatches, 0, (n - loop->nwatches) * sizeof(*grown));
    loop->watches = grown;
    loop->nwatches = n;
    return 0;
}

int kl__loop_watch(kl__loop *loop, int fd, uint32_t events, kl__watch_cb cb, void *arg)
{
    struct epoll_event ev = {0};
    int had, op, err;

    if (!events) {
        kl__loop_unwatch(loop, fd);
        return 0;
    }
    if ((err = kl__loop_reserve(loop, fd)) < 0)
        return err;
    had = loop->watches[fd].cb != NULL;
    loop->watches[fd].cb = cb;
    loop->watches[fd].arg = arg;
    if (had && loop->watches[fd].events == events)
        return 0;
    ev.events = events;
    ev.data.fd = fd;
    op = had ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
    if (epoll_ctl(loop->epfd, op, fd, &ev) != 0) {
        /* The descriptor was closed and its number reused behind the
         * watcher's back (epoll forgets a closed descriptor): the other
         * operation. */
        op = op == EPOLL_CTL_ADD ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
        if (epoll_ctl(loop->epfd, op, fd, &ev) != 0) {
            int e = errno;

            loop->watches[fd].cb = NULL;
            loop->watches[fd].events = 0;
            return kl__error_set(K8SLEASE_ETRANSPORT, "epoll_ctl on descriptor %d: error %d", fd,
                                 e);
        }
    }
    loop->watches[fd].events = events;
    return 0;
}

void kl__loop_unwatch(kl__loop *loop, int fd)
{
    if (fd < 0 || (size_t)fd >= loop->nwatches || !loop->watches[fd].cb)
        return;
    /* A closed descriptor left the epoll set already (EBADF, ENOENT). */
    (void)epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
    loop->watches[fd].cb = NULL;
    loop->watches[fd].events = 0;
    for (int i = loop->next_ready; i < loop->nready; i++)
        if (loop->ready[i].data.fd == fd)
            loop->ready[i].events = 0;
}

int kl__loop_batching(const kl__loop *loop)
{
    return loop->batching;
}

/* The callbacks of the descriptors the last wait found ready. */
static void run_ready(kl__loop *loop)
{
    while (loop->next_ready < loop->nready) {
        struct epoll_event *ev = &loop->ready[loop->next_ready++];
        int fd = ev->data.fd;
        watch *w;

        if (!ev->events || fd == loop->wakefd || (size_t)fd >= loop->nwatches)
            continue;
        w = &loop->watches[fd];
        if (w->cb)
            w->cb(fd, ev->events, w->arg);
    }
    loop->nready = loop->next_ready = 0;
}

/* Sleep until a descriptor is ready, a post, or timeout_ms (-1: none). */
static void wait_io(kl__loop *loop, int timeout_ms)
{
    int n, got_data = 0;
    int64_t now;

    loop->sleeps += timeout_ms != 0;
    if (loop->batching && timeout_ms != 0) {
        struct epoll_event ev;

        /* The whole window, even when a timer is due sooner: under load
         * the timers (renewals, hedges, deadlines) also run at most
         * BATCH_MS late, together. A post ends the window; the
         * descriptors are looked at either way. */
        loop->counts.batches++;
        if (epoll_wait(loop->holdfd, &ev, 1, BATCH_MS) > 0 ||
            (timeout_ms >= 0 && timeout_ms <= BATCH_MS))
            timeout_ms = 0;
        else if (timeout_ms > 0)
            timeout_ms -= BATCH_MS;
    }
    n = epoll_wait(loop->epfd, loop->ready, EPOLL_EVENTS, timeout_ms);
    loop->nready = n > 0 ? n : 0;
    loop->next_ready = 0;
    for (int i = 0; i < loop->nready; i++) {
        uint64_t count;

        if (loop->ready[i].data.fd == loop->wakefd)
            (void)!read(loop->wakefd, &count, sizeof(count));
        else
            got_data = 1;
    }
    loop->data_wakes += got_data;
    now = kl__clock_mono_ns();
    if (now - loop->rate_at >= BATCH_RATE_S * KL_NS_PER_S) {
        loop->batching = loop->batching ? loop->data_wakes >= BATCH_OFF * BATCH_RATE_S
                                        : loop->sleeps >= BATCH_ON * BATCH_RATE_S &&
                                              loop->data_wakes >= BATCH_OFF * BATCH_RATE_S;
        loop->sleeps = loop->data_wakes = 0;
        loop->rate_at = now;
    }
}

static void wakeup(kl__loop *loop)
{
    uint64_t one = 1;

    /* EAGAIN: the counter is full, so the wait wakes anyway */
    (void)!write(loop->wakefd, &one, sizeof(one));
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
    long hook_ms = loop->hooks.timeout_ms(loop->data);
    int64_t ms = POLL_MAX_MS;

    if (hook_ms >= 0 && hook_ms < ms)
        ms = hook_ms;
    if (loop->root && ms > 0) {
        int64_t wait = loop->root->at - kl__clock_mono_ns();

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
        run_ready(loop);
        loop->hooks.run(loop->data);
        run_timers(loop);
        run_posted(loop, &stop);
        if (stop)
            break;
        /* Something is due already (a request just started, a timer for
         * now): the next iteration, without a wait that would not sleep;
         * but not twice in a row, so that what keeps asking for "at once"
         * cannot keep the descriptors from being looked at. */
        timeout = poll_timeout(loop);
        if (timeout == 0 && !skipped) {
            skipped = 1;
            continue;
        }
        skipped = 0;
        /* What the iteration queued goes out now, as one write. */
        if (loop->hooks.flush(loop->data))
            timeout = 0;
        if (timeout > 0)
            loop->counts.waits++;
        else
            loop->counts.polls++;
        loop->counts.last_timeout_ms = timeout;
        wait_io(loop, timeout);
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
    if (loop->epfd >= 0)
        close(loop->epfd);
    if (loop->holdfd >= 0)
        close(loop->holdfd);
    if (loop->wakefd >= 0)
        close(loop->wakefd);
    kl__free(loop->watches);
    pthread_cond_destroy(&loop->cond);
    pthread_mutex_destroy(&loop->mu);
    kl__free(loop);
}

/* The loop's epoll, its batching window's and the eventfd that wakes both. */
static int open_fds(kl__loop *loop)
{
    struct epoll_event ev = {0};

    if ((loop->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (loop->holdfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (loop->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        return kl__error_set(K8SLEASE_ENOMEM, "cannot create the loop's epoll or eventfd: error %d",
                             errno);
    ev.events = EPOLLIN;
    ev.data.fd = loop->wakefd;
    if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, loop->wakefd, &ev) != 0 ||
        epoll_ctl(loop->holdfd, EPOLL_CTL_ADD, loop->wakefd, &ev) != 0)
        return kl__error_set(K8SLEASE_ENOMEM, "epoll_ctl: error %d", errno);
    return 0;
}

int kl__thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    int rc;

    /* The host process's signal handlers stay on its own threads. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int kl__loop_start(kl__loop **out, const kl__loop_hooks *hooks, void *data, const kl__log *log)
{
    kl__loop *loop = NULL;
    int rc, err;

    *out = NULL;
    if (!(loop = kl__calloc(1, sizeof(*loop))))
        return kl__error_set(K8SLEASE_ENOMEM, "out of memory");
    loop->epfd = loop->holdfd = loop->wakefd = -1;
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
    loop->hooks = *hooks;
    loop->data = data;
    loop->now = loop->rate_at = kl__clock_mono_ns();
    loop->counts.last_timeout_ms = -1;
    if ((err = open_fds(loop)) < 0) {
        loop_destroy(loop);
        return err;
    }
    /* Set before the thread starts, which may read it through the hooks'
     * data (pthread_create orders this write before the thread). */
    *out = loop;
    if ((rc = kl__thread_start(&loop->thread, loop_main, loop)) != 0) {
        *out = NULL;
        loop_destroy(loop);
        return kl__error_set(K8SLEASE_ENOMEM, "cannot start the loop thread: error %d", rc);
    }
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
    wakeup(loop);
    pthread_join(loop->thread, NULL);
    /* What runs on it first: freeing its requests cancels their timers and
     * unwatches their descriptors. */
    loop->hooks.destroy(loop->data);
    loop_destroy(loop);
}

void *kl__loop_data(const kl__loop *loop)
{
    return loop->data;
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
    wakeup(loop);
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
