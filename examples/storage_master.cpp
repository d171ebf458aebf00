/*
 * storage_master: the supervisor of a replicated C++ "master" process (the
 * shape of the Go library's users), on the C++ API (k8slease.hpp).
 *
 *   c++ -std=c++17 storage_master.cpp $(pkg-config --cflags --libs k8slease) -pthread
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
 *    and nothing is written once elector::is_leader() is false;
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
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <k8slease.hpp>

namespace
{

using std::chrono::milliseconds;

struct Config {
    std::optional<std::string> ns; // nullopt: the client's namespace
    std::string name;              // the Lease
    std::string identity;          // the address clients use when we lead
    std::optional<std::string> pod_ns;
    std::string pod_name; // our Pod, for the role=leader label
    milliseconds campaign_timeout{10000};
    milliseconds lease_duration{15000}, renew_deadline{10000}, retry_period{2000};
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

k8slease::client_options make_client_options(const Config &cfg)
{
    k8slease::client_options o;  // in-cluster, $KUBECONFIG or ~/.kube/config
    o.user_agent = cfg.identity; // tells replicas apart in audit logs
    // Library threads call it, possibly two at once: fprintf is thread-safe.
    o.log_cb = [](k8slease::log_level, std::string_view msg) {
        std::fprintf(stderr, "k8slease: %.*s\n", static_cast<int>(msg.size()), msg.data());
    };
    o.log_level = k8slease::log_level::warn;
    return o;
}

class Master
{
  public:
    // Creates the client and the holder watch; throws k8slease::error.
    explicit Master(const Config &cfg)
        : cfg_(cfg), client_(make_client_options(cfg)),
          watch_(client_, cfg.ns, cfg.name,
                 [this](std::string_view id, std::int64_t epoch) { on_holder(id, epoch); })
    {
    }

    // The supervisor loop; returns when stop() was called.
    int run()
    {
        while (!stopping_) {
            k8slease::elector e(client_, make_elector_options());
            Current current(*this, e);
            std::optional<std::int64_t> epoch;
            // nullopt: not elected within the timeout, or the election is
            // over (a signal, or a fatal error): wait_lost(0) tells which.
            while (!(epoch = e.wait_elected(cfg_.campaign_timeout)) &&
                   !e.wait_lost(milliseconds(0))) {
                std::lock_guard<std::mutex> lock(mu_);
                emit("standby leader=%s epoch=%lld\n", leader_.c_str(),
                     static_cast<long long>(leader_epoch_));
            }
            if (epoch)
                serve(e, *epoch);
            // ~Current, then ~elector: stops the election if it still runs
            // (a signal) and releases the Lease if we still lead it.
        }
        emit("stopped\n");
        return 0;
    }

    // Any thread (the signal thread): end the current term and the loop.
    void stop() noexcept
    {
        std::lock_guard<std::mutex> lock(elector_mu_);
        stopping_ = true;
        try {
            if (current_)
                current_->stop(); // wakes run()'s waits; releases as the options say
        } catch (const k8slease::error &err) {
            std::fprintf(stderr, "storage_master: %s\n", err.what());
        }
    }

  private:
    // Shows the running elector to stop() (the signal thread) while in scope.
    class Current
    {
      public:
        Current(Master &m, k8slease::elector &e) : m_(m)
        {
            std::lock_guard<std::mutex> lock(m_.elector_mu_);
            m_.current_ = &e;
            if (m_.stopping_) // stop() ran before current_ was set
                e.stop();
        }
        ~Current()
        {
            std::lock_guard<std::mutex> lock(m_.elector_mu_);
            m_.current_ = nullptr;
        }
        Current(const Current &) = delete;
        Current &operator=(const Current &) = delete;

      private:
        Master &m_;
    };

    // Loop thread: the holder changed. Must not block.
    void on_holder(std::string_view identity, std::int64_t epoch)
    {
        std::lock_guard<std::mutex> lock(mu_);
        leader_ = identity;
        leader_epoch_ = epoch;
        emit("view leader=%s epoch=%lld\n", leader_.c_str(), static_cast<long long>(epoch));
    }

    k8slease::elector_options make_elector_options() const
    {
        k8slease::elector_options o;
        o.ns = cfg_.ns;
        o.name = cfg_.name;
        o.identity = cfg_.identity;
        o.lease_duration = cfg_.lease_duration;
        o.renew_deadline = cfg_.renew_deadline;
        o.retry_period = cfg_.retry_period;
        return o;
    }

    void label(const std::optional<std::string> &value)
    {
        if (cfg_.pod_name.empty())
            return;
        try {
            client_.pod_label(cfg_.pod_ns, cfg_.pod_name, "role", value);
        } catch (const k8slease::error &err) { // not fatal
            std::fprintf(stderr, "storage_master: %s\n", err.what());
        }
    }

    // Serve while leader. The epoch is the fencing token: the storage nodes
    // reject a write whose epoch is lower than one they have seen, so a
    // deposed leader that did not notice yet cannot overwrite its successor.
    void serve(k8slease::elector &e, std::int64_t epoch)
    {
        emit("elected epoch=%lld\n", static_cast<long long>(epoch));
        label("leader");
        while (e.is_leader()) {
            // ... accept requests; write(key, value, epoch) ...
            if (e.wait_lost(milliseconds(1000)))
                break;
        }
        label(std::nullopt);
        if (!stopping_)
            emit("lost epoch=%lld\n", static_cast<long long>(epoch));
    }

    Config cfg_;

    std::mutex mu_; // guards the view below; taken on the loop thread
    std::string leader_;
    std::int64_t leader_epoch_ = -1;

    // Guards current_ against the signal thread. Never taken by a library
    // callback, so holding it across elector::stop() cannot deadlock with
    // the loop thread.
    std::mutex elector_mu_;
    k8slease::elector *current_ = nullptr;
    std::atomic<bool> stopping_{false};

    // Last: constructed after the members the watch callback uses, and
    // destroyed first (the watch before its client).
    k8slease::client client_;
    k8slease::watch watch_;
};

bool split_ref(const char *s, std::optional<std::string> &ns, std::string &name)
{
    const char *slash = std::strchr(s, '/');
    ns = slash ? std::optional<std::string>(std::string(s, slash)) : std::nullopt;
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
        milliseconds *ms = flag == "--campaign-timeout-ms" ? &cfg.campaign_timeout
                           : flag == "--lease-duration-ms" ? &cfg.lease_duration
                           : flag == "--renew-deadline-ms" ? &cfg.renew_deadline
                           : flag == "--retry-period-ms"   ? &cfg.retry_period
                                                           : nullptr;
        char *end;
        long long n = std::strtoll(v, &end, 10);
        if (!ms || n <= 0 || *end)
            return usage(argv[0]);
        *ms = milliseconds(n);
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

    try {
        Master master(cfg);
        std::thread signals([&] {
            int sig;
            sigwait(&sigs, &sig);
            master.stop();
        });
        int status;
        try {
            status = master.run();
        } catch (const k8slease::error &err) {
            std::fprintf(stderr, "storage_master: %s\n", err.what());
            status = 1;
        }
        if (status != 0) {
            // Wake the signal thread so that it can be joined.
            pthread_kill(signals.native_handle(), SIGTERM);
        }
        signals.join();
        return status;
    } catch (const k8slease::error &err) { // the client or the watch
        std::fprintf(stderr, "storage_master: %s\n", err.what());
        return 1;
    }
}
