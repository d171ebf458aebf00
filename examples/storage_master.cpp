/*
 * storage_master: the supervisor of a replicated C++ "master" process (the
 * shape of the Go library's users), on the native k8slease API.
 *
 *   c++ -std=c++11 storage_master.cpp $(pkg-config --cflags --libs k8slease) -pthread
 *   ./storage_master --lease [NS/]NAME --identity HOST:PORT [--pod [NS/]POD]
 *                    [--campaign-timeout-ms N] [--lease-duration-ms N]
 *                    [--renew-deadline-ms N] [--retry-period-ms N]
 *
 * Every replica runs the same loop:
 *  - campaign for the Lease; while not elected within the campaign timeout
 *    it is a standby: it keeps campaigning (the library watches the Lease
 *    and takes it the moment it is released or expires) and serves
 *    redirects to the leader it learns from a holder watch;
 *  - once elected, it labels its Pod role=leader (so a Service selects it)
 *    and serves with the epoch as fencing token: every write carries it,
 *    and nothing is written once k8slease_elector_is_leader() is false;
 *  - when the term ends (renewals failed, or a signal), it removes the label
 *    and campaigns again (or, after SIGTERM/SIGINT, releases and exits 0).
 *
 * Output, one line per event: "view leader=ID epoch=N" (from the watch),
 * "standby leader=ID epoch=N", "elected epoch=N", "lost epoch=N",
 * "stopped".
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include <signal.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include <k8slease.h>

namespace
{

struct Config {
    std::string ns, name;         // the Lease
    std::string identity;         // the address clients use when we lead
    std::string pod_ns, pod_name; // our Pod, for the role=leader label
    int64_t campaign_timeout_ms = 10000;
    int64_t lease_duration_ms = 15000, renew_deadline_ms = 10000, retry_period_ms = 2000;
};

#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
void emit(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stdout, fmt, ap);
    va_end(ap);
    std::fflush(stdout);
}

class Master
{
  public:
    explicit Master(const Config &cfg) : cfg_(cfg)
    {
    }
    ~Master()
    {
        k8slease_watch_free(watch_);
        k8slease_client_free(client_);
    }

    // Creates the client and the holder watch. False on error (printed).
    bool init()
    {
        k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
        o.user_agent = cfg_.identity.c_str(); // tells replicas apart in audit logs
        if (k8slease_client_new(&client_, &o) != 0)
            return fail("k8slease_client_new");
        if (k8slease_watch_start(&watch_, client_, ns(), cfg_.name.c_str(), on_holder, this) != 0)
            return fail("k8slease_watch_start");
        return true;
    }

    // The supervisor loop; returns when stop() was called.
    int run()
    {
        while (!stopping_) {
            k8slease_elector *e = start_elector();
            if (!e)
                return 1;
            int64_t epoch = -1;
            int rc;
            while ((rc = k8slease_elector_wait_elected(e, cfg_.campaign_timeout_ms, &epoch)) ==
                   K8SLEASE_ETIMEOUT) {
                std::lock_guard<std::mutex> lock(mu_);
                emit("standby leader=%s epoch=%lld\n", leader_.c_str(), (long long)leader_epoch_);
            }
            if (rc == 0)
                serve(e, epoch);
            // Stops the election if it still runs (a signal) and releases the
            // Lease if we still lead it.
            {
                std::lock_guard<std::mutex> lock(elector_mu_);
                current_ = nullptr;
            }
            k8slease_elector_free(e);
        }
        emit("stopped\n");
        return 0;
    }

    // Any thread (the signal thread): end the current term and the loop.
    void stop()
    {
        std::lock_guard<std::mutex> lock(elector_mu_);
        stopping_ = true;
        if (current_)
            k8slease_elector_stop(current_, -1); // wakes run()'s waits
    }

  private:
    const char *ns() const
    {
        return cfg_.ns.empty() ? nullptr : cfg_.ns.c_str(); // nullptr: the client's namespace
    }

    bool fail(const char *what)
    {
        std::fprintf(stderr, "storage_master: %s: %s\n", what, k8slease_error_last());
        return false;
    }

    // Loop thread: the holder changed. Must not block.
    static void on_holder(const char *identity, int64_t epoch, void *user_data)
    {
        Master *m = static_cast<Master *>(user_data);
        std::lock_guard<std::mutex> lock(m->mu_);
        m->leader_ = identity;
        m->leader_epoch_ = epoch;
        emit("view leader=%s epoch=%lld\n", identity, (long long)epoch);
    }

    k8slease_elector *start_elector()
    {
        k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
        k8slease_elector *e = nullptr;

        o.ns = ns();
        o.name = cfg_.name.c_str();
        o.identity = cfg_.identity.c_str();
        o.lease_duration_ms = cfg_.lease_duration_ms;
        o.renew_deadline_ms = cfg_.renew_deadline_ms;
        o.retry_period_ms = cfg_.retry_period_ms;
        if (k8slease_elector_start(&e, client_, &o) != 0) {
            fail("k8slease_elector_start");
            return nullptr;
        }
        std::lock_guard<std::mutex> lock(elector_mu_);
        current_ = e;
        if (stopping_) // stop() ran before current_ was set
            k8slease_elector_stop(e, -1);
        return e;
    }

    void label(const char *value)
    {
        if (cfg_.pod_name.empty())
            return;
        const char *pod_ns = cfg_.pod_ns.empty() ? nullptr : cfg_.pod_ns.c_str();
        if (k8slease_pod_label(client_, pod_ns, cfg_.pod_name.c_str(), "role", value) != 0)
            fail(value ? "label role=leader" : "remove label role"); // not fatal
    }

    // Serve while leader. The epoch is the fencing token: the storage nodes
    // reject a write whose epoch is lower than one they have seen, so a
    // deposed leader that did not notice yet cannot overwrite its successor.
    void serve(k8slease_elector *e, int64_t epoch)
    {
        emit("elected epoch=%lld\n", (long long)epoch);
        label("leader");
        while (k8slease_elector_is_leader(e)) {
            // ... accept requests; write(key, value, epoch) ...
            if (k8slease_elector_wait_lost(e, 1000) == 0)
                break;
        }
        label(nullptr);
        if (!stopping_)
            emit("lost epoch=%lld\n", (long long)epoch);
    }

    Config cfg_;
    k8slease_client *client_ = nullptr;
    k8slease_watch *watch_ = nullptr;

    std::mutex mu_; // guards the view below; taken on the loop thread
    std::string leader_;
    int64_t leader_epoch_ = -1;

    // Guards current_ against the signal thread. Never taken by a library
    // callback, so holding it across k8slease_elector_stop() cannot deadlock
    // with the loop thread.
    std::mutex elector_mu_;
    k8slease_elector *current_ = nullptr;
    std::atomic<bool> stopping_{false};
};

bool split_ref(const char *s, std::string &ns, std::string &name)
{
    const char *slash = std::strchr(s, '/');
    ns = slash ? std::string(s, slash) : std::string();
    name = slash ? slash + 1 : s;
    return !name.empty();
}

int usage(const char *argv0)
{
    std::fprintf(stderr,
                 "usage: %s --lease [NS/]NAME --identity HOST:PORT [--pod [NS/]POD]\n"
                 "       [--campaign-timeout-ms N] [--lease-duration-ms N] "
                 "[--renew-deadline-ms N] [--retry-period-ms N]\n",
                 argv0);
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    Config cfg;

    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc)
            return usage(argv[0]);
        std::string flag = argv[i];
        const char *v = argv[i + 1];
        if (flag == "--lease" && split_ref(v, cfg.ns, cfg.name))
            continue;
        if (flag == "--pod" && split_ref(v, cfg.pod_ns, cfg.pod_name))
            continue;
        if (flag == "--identity" && *v) {
            cfg.identity = v;
            continue;
        }
        int64_t *ms = flag == "--campaign-timeout-ms" ? &cfg.campaign_timeout_ms
                      : flag == "--lease-duration-ms" ? &cfg.lease_duration_ms
                      : flag == "--renew-deadline-ms" ? &cfg.renew_deadline_ms
                      : flag == "--retry-period-ms"   ? &cfg.retry_period_ms
                                                      : nullptr;
        char *end;
        if (!ms || (*ms = std::strtoll(v, &end, 10)) <= 0 || *end)
            return usage(argv[0]);
    }
    if (cfg.name.empty() || cfg.identity.empty())
        return usage(argv[0]);

    // Block the signals before any thread starts (the library's loop thread
    // inherits the mask); one thread takes them with sigwait().
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    Master master(cfg);
    if (!master.init())
        return 1;
    std::thread signals([&] {
        int sig;
        sigwait(&sigs, &sig);
        master.stop();
    });
    int status = master.run();
    if (status != 0) {
        // Wake the signal thread so that it can be joined.
        pthread_kill(signals.native_handle(), SIGTERM);
    }
    signals.join();
    return status;
}
