/*
 * test_cpp: the C++ API (include/k8slease.hpp) against k8slease-testserver,
 * linked against libk8slease.so as a user program is. Built twice, as C++17
 * and C++20 (tests/cpp/CMakeLists.txt, ctest label cpp).
 *
 *   test_cpp17 [SUBSTRING]     runs the tests whose name contains SUBSTRING
 *
 * Not cmocka: its failures longjmp out of the test, over the destructors of
 * the electors and clients under test (undefined behaviour in C++, and the
 * teardown is part of what is tested). A failed CHECK throws instead, so a
 * failing test still stops its electors and frees its client on the way out.
 * Every wait is bounded and says what it waited for; none is a fixed sleep.
 */
#include <k8slease.hpp>

#include "harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <csignal>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using k8slease::errc;

namespace
{

ts_server *server;

struct failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void check(bool ok, const char *expr, int line)
{
    if (!ok)
        throw failure("line " + std::to_string(line) + ": CHECK(" + expr + ") failed");
}
#define CHECK(expr) check(static_cast<bool>(expr), #expr, __LINE__)

bool contains(const std::string &s, const std::string &part)
{
    return s.find(part) != std::string::npos;
}

// Runs f, which must throw k8slease::error with code; returns its what().
template <class F> std::string expect_error(errc code, F f, int line)
{
    try {
        f();
    } catch (const k8slease::error &e) {
        if (e.code() != code)
            throw failure("line " + std::to_string(line) + ": expected " +
                          k8slease::make_error_code(code).message() + ", got " + e.what());
        std::printf("  (expected) %s\n", e.what());
        return e.what();
    }
    throw failure("line " + std::to_string(line) + ": expected " +
                  k8slease::make_error_code(code).message() + ", nothing thrown");
}
#define EXPECT_ERROR(code, ...)                                                                    \
    expect_error(                                                                                  \
        code, [&] { __VA_ARGS__; }, __LINE__)

// Lines recorded by callbacks (any thread), waited for with a bound.
class recorder
{
  public:
    void add(std::string line)
    {
        std::lock_guard<std::mutex> lock(mu_);
        lines_.push_back(std::move(line));
        cv_.notify_all();
    }

    // Waits until a line matches the regular expression re; fails the test
    // after timeout, naming what it waited for and what it saw.
    void wait(const std::string &re, std::chrono::milliseconds timeout = 10s)
    {
        std::regex r(re);
        std::unique_lock<std::mutex> lock(mu_);
        auto has = [&] {
            for (const auto &l : lines_)
                if (std::regex_match(l, r))
                    return true;
            return false;
        };
        if (!cv_.wait_for(lock, timeout, has)) {
            std::string seen;
            for (const auto &l : lines_)
                seen += " [" + l + "]";
            throw failure("no line matching '" + re + "' within " +
                          std::to_string(timeout.count()) + " ms; seen:" + seen);
        }
    }

    bool has(const std::string &re)
    {
        std::regex r(re);
        std::lock_guard<std::mutex> lock(mu_);
        for (const auto &l : lines_)
            if (std::regex_match(l, r))
                return true;
        return false;
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::string> lines_;
};

// A client of the test server whose log lines go to log (when given).
k8slease::client make_client(recorder *log = nullptr,
                             k8slease::log_level level = k8slease::log_level::info)
{
    k8slease::client_options o;
    o.kubeconfig = ts_kubeconfig(server);
    o.user_agent = "test_cpp";
    if (log)
        o.log_cb = [log](k8slease::log_level l, std::string_view msg) {
            log->add(std::to_string(static_cast<int>(l)) + " " + std::string(msg));
        };
    o.log_level = level;
    return k8slease::client(o);
}

// Short timings, callbacks recorded as "started N", "stopped", "leader ID N".
k8slease::elector_options fast(const std::string &lease, const std::string &identity,
                               recorder *ev = nullptr)
{
    k8slease::elector_options o;
    o.name = lease;
    o.identity = identity;
    o.lease_duration = 3000ms;
    o.renew_deadline = 2000ms;
    o.retry_period = 500ms;
    if (ev) {
        o.on_started_leading = [ev](std::int64_t e) { ev->add("started " + std::to_string(e)); };
        o.on_stopped_leading = [ev] { ev->add("stopped"); };
        o.on_new_leader = [ev](std::string_view id, std::int64_t e) {
            ev->add("leader " + std::string(id) + " " + std::to_string(e));
        };
    }
    return o;
}

std::string ts_call(const char *method, const std::string &path, const char *body, long want)
{
    long status = 0;
    char *resp = nullptr;
    if (ts_request(server, method, path.c_str(), nullptr, body, &status, &resp) != 0)
        throw failure(std::string(method) + " " + path + ": no answer");
    std::string out = resp ? resp : "";
    std::free(resp);
    if (status != want)
        throw failure(std::string(method) + " " + path + ": HTTP " + std::to_string(status) + ": " +
                      out);
    return out;
}

// A loopback port nothing listens on (bound, then closed).
int closed_port()
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    socklen_t len = sizeof(a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(fd >= 0);
    CHECK(bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0);
    CHECK(getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* ---- errors -------------------------------------------------------------- */

void error_category_and_codes()
{
    const std::pair<errc, const char *> codes[] = {
        {errc::invalid_argument, "K8SLEASE_EINVAL"},
        {errc::config, "K8SLEASE_ECONFIG"},
        {errc::not_found, "K8SLEASE_ENOTFOUND"},
        {errc::conflict, "K8SLEASE_ECONFLICT"},
        {errc::auth, "K8SLEASE_EAUTH"},
        {errc::tls, "K8SLEASE_ETLS"},
        {errc::timeout, "K8SLEASE_ETIMEOUT"},
        {errc::transport, "K8SLEASE_ETRANSPORT"},
        {errc::protocol, "K8SLEASE_EPROTOCOL"},
        {errc::state, "K8SLEASE_ESTATE"},
        {errc::no_memory, "K8SLEASE_ENOMEM"},
        {errc::server, "K8SLEASE_ESERVER"},
    };
    CHECK(std::string(k8slease::category().name()) == "k8slease");
    for (const auto &c : codes) {
        std::error_code ec = c.first; // is_error_code_enum: implicit
        CHECK(&ec.category() == &k8slease::category());
        CHECK(ec.message() == c.second);
        CHECK(ec.message() == k8slease_strerror(ec.value()));
    }
    CHECK(static_cast<int>(errc::conflict) == K8SLEASE_ECONFLICT);

    k8slease::error e(errc::timeout, "k8slease_x: not elected within 5 ms");
    const std::system_error &se = e;
    CHECK(se.code() == errc::timeout);
    CHECK(se.code() != errc::conflict);
    CHECK(contains(se.what(), "not elected within 5 ms"));
    CHECK(contains(se.what(), "K8SLEASE_ETIMEOUT"));
    CHECK(k8slease::version() == K8SLEASE_VERSION_STRING);
    CHECK(k8slease::latency_bounds_ms.back() == -1);
}

void bad_kubeconfig_is_config_error()
{
    k8slease::client_options o;
    o.kubeconfig = "/nonexistent/k8slease-test-cpp/kubeconfig";
    std::string what = EXPECT_ERROR(errc::config, k8slease::client c(o));
    CHECK(contains(what, "/nonexistent/k8slease-test-cpp/kubeconfig"));
    CHECK(contains(what, "k8slease_client_new"));
}

void bad_elector_options_name_the_field()
{
    k8slease::client c = make_client();
    k8slease::elector_options o = fast("cpp-bad", "");
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o)), "identity"));
    o.identity = "a:1";
    o.name = "";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o)), "name"));
    o.name = "cpp-bad";
    o.renew_deadline = o.lease_duration;
    EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o));
    // Other invalid input of the client's calls.
    EXPECT_ERROR(errc::invalid_argument, (void)c.holder_get(std::nullopt, "Not A DNS Name!"));
    EXPECT_ERROR(errc::invalid_argument, k8slease::watch w(c, std::nullopt, "", nullptr));
}

void etcd_options_are_validated()
{
    k8slease::client_options o;
    o.backend = k8slease::backend::etcd;
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::client c(o)), "etcd_endpoints"));
    o.etcd_endpoints = "http://127.0.0.1:" + std::to_string(closed_port());
    o.etcd_username = "root";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::client c(o)), "etcd_password"));
    o.etcd_password = "secret";
    o.etcd_ca_file = "";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::client c(o)), "etcd_ca_file"));
    o.etcd_ca_file = "/nonexistent/k8slease-test-cpp/ca.pem"; // read with the first request
    o.etcd_cert_file = "/nonexistent/k8slease-test-cpp/cert.pem";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::client c(o)), "etcd_key_file"));
    o.etcd_key_file = "/nonexistent/k8slease-test-cpp/key.pem";
    CHECK(!k8slease::client_options().etcd_endpoints);

    k8slease::client c(o); // no I/O yet
    CHECK(c.backend() == k8slease::backend::etcd);
    CHECK(c.ns().empty());
    CHECK(contains(std::string(c.server()), "127.0.0.1"));
    EXPECT_ERROR(errc::state, c.pod_label("default", "pod-0", "role", "leader"));
    k8slease::elector_options eo = fast("cpp/etcd", "a:1");
    eo.ns = "default"; // no namespaces in etcd
    EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, eo));
    // No planned handoff with etcd (both refuse before any I/O).
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, c.lease_handoff(std::nullopt, "cpp-etcd")),
                   "Kubernetes"));
    {
        k8slease::elector e(c, fast("cpp/etcd", "a:1"));
        CHECK(contains(EXPECT_ERROR(errc::invalid_argument, e.handoff()), "Kubernetes"));
    }

    // The Kubernetes backend refuses etcd options.
    k8slease::client_options k;
    k.kubeconfig = ts_kubeconfig(server);
    k.etcd_endpoints = o.etcd_endpoints;
    EXPECT_ERROR(errc::invalid_argument, k8slease::client ck(k));
}

/* ---- elections ----------------------------------------------------------- */

void elect_stop_release_takeover()
{
    recorder ea, eb;
    k8slease::client c = make_client();
    k8slease::elector a(c, fast("cpp-elect", "a:1", &ea));

    std::optional<std::int64_t> epoch = a.wait_elected(10s);
    CHECK(epoch.has_value());
    ea.wait("started " + std::to_string(*epoch), 0ms); // before wait_elected returned
    CHECK(a.is_leader());
    CHECK(a.epoch() == epoch);
    CHECK(a.leader_deadline().has_value());
    CHECK(*a.leader_deadline() > std::chrono::steady_clock::now());
    ea.wait("leader a:1 " + std::to_string(*epoch));

    std::optional<k8slease::holder> h = c.holder_get(std::nullopt, "cpp-elect");
    CHECK(h && h->identity == "a:1" && h->epoch == *epoch);
    CHECK(h->renew_time && h->acquire_time && !h->expired);
    CHECK(h->lease_duration == 3s);
    CHECK(!h->resource_version.empty());

    k8slease::elector b(c, fast("cpp-elect", "b:1", &eb));
    CHECK(!b.wait_elected(200ms)); // a holds it: timeout
    CHECK(!b.wait_lost(0ms));      // still campaigning
    CHECK(!b.is_leader());
    CHECK(!b.epoch());
    eb.wait("leader a:1 " + std::to_string(*epoch));

    a.stop(true);
    ea.wait("stopped", 0ms); // stop() returns once it is over
    CHECK(!a.is_leader());
    CHECK(!a.leader_deadline());
    CHECK(a.wait_lost(0ms));
    CHECK(!a.wait_elected(10s)); // over: at once, nullopt
    CHECK(a.epoch() == epoch);   // the term it had
    a.stop(true);                // idempotent

    std::optional<std::int64_t> eb_epoch = b.wait_elected(10s);
    CHECK(eb_epoch && *eb_epoch == *epoch + 1);
    CHECK(b.is_leader());

    k8slease::elector_stats sa = a.stats();
    CHECK(sa.terms == 1);
    CHECK(sa.requests > 0);
    CHECK(sa.callback_exceptions == 0);
    CHECK(b.stats().terms == 1);
}

// The term ends at the leader deadline while the server hangs (SIGSTOP):
// wait_lost returns then, not once the requests to the server time out, and
// a new elector started at that moment leads once the server answers.
void wait_lost_on_time_while_the_server_hangs()
{
    k8slease::client c = make_client();
    k8slease::elector a(c, fast("cpp-hang", "a:1"));
    std::optional<std::int64_t> epoch = a.wait_elected(10s);
    CHECK(epoch.has_value());

    std::chrono::steady_clock::time_point returned;
    bool over = false;
    std::thread waiter([&] {
        over = a.wait_lost(20s);
        returned = std::chrono::steady_clock::now();
    });
    CHECK(kill(ts_pid(server), SIGSTOP) == 0);
    std::chrono::steady_clock::time_point deadline{};
    while (std::optional<std::chrono::steady_clock::time_point> d = a.leader_deadline()) {
        deadline = *d; // no renewal succeeds any more: the last one is the end
        std::this_thread::sleep_for(1ms);
    }
    waiter.join();
    CHECK(kill(ts_pid(server), SIGCONT) == 0);
    CHECK(over);
    auto late = std::chrono::duration_cast<std::chrono::microseconds>(returned - deadline);
    std::printf("  wait_lost returned %+.1f ms after the leader deadline\n",
                static_cast<double>(late.count()) / 1000);
    CHECK(late >= -2ms && late <= 100ms);
    CHECK(!a.is_leader());
    k8slease::elector b(c, fast("cpp-hang", "a:1"));
    std::optional<std::int64_t> next = b.wait_elected(20s);
    CHECK(next && *next > *epoch);
}

void stop_follows_release_on_cancel()
{
    k8slease::client c = make_client();
    k8slease::elector_options o = fast("cpp-norelease", "a:1");
    o.release_on_cancel = false;
    k8slease::elector a(c, o);
    CHECK(a.wait_elected(10s));
    a.stop(); // as the options say: no release
    std::optional<k8slease::holder> h = c.holder_get(std::nullopt, "cpp-norelease");
    CHECK(h && h->identity == "a:1");

    // The operator's release: refused for another identity, then done.
    EXPECT_ERROR(errc::conflict, c.lease_release(std::nullopt, "cpp-norelease", "z:9"));
    c.lease_release(std::nullopt, "cpp-norelease", "a:1");
    h = c.holder_get(std::nullopt, "cpp-norelease");
    CHECK(h && h->identity.empty());
    EXPECT_ERROR(errc::not_found, c.lease_release(std::nullopt, "cpp-no-such-lease", "a:1"));

    // The destructor releases as the options say (default: release).
    {
        k8slease::elector b(c, fast("cpp-norelease", "b:1"));
        CHECK(b.wait_elected(10s));
    }
    h = c.holder_get(std::nullopt, "cpp-norelease");
    CHECK(h && h->identity.empty());
}

void election_over_without_leading()
{
    recorder eb;
    k8slease::client c = make_client();
    k8slease::elector a(c, fast("cpp-over", "a:1"));
    CHECK(a.wait_elected(10s));
    k8slease::elector b(c, fast("cpp-over", "b:1", &eb));
    eb.wait("leader a:1 .*");
    b.stop();
    eb.wait("stopped", 0ms);
    auto t0 = std::chrono::steady_clock::now();
    CHECK(!b.wait_elected(10s)); // over: nullopt at once, not after 10 s
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    CHECK(b.wait_lost(0ms));
    CHECK(!b.epoch());
    CHECK(b.stats().terms == 0);
}

/* Planned handoff: elector::handoff() to the best known candidate (the
 * options reach the C layer: the highest priority wins) and to a named one;
 * client::lease_handoff(), the operator's request; bad input. */
std::uint64_t fnv1a(const std::string &s)
{
    std::uint64_t h = 14695981039346656037u;
    for (unsigned char ch : s) {
        h ^= ch;
        h *= 1099511628211u;
    }
    return h;
}

void handoff_to_the_best_and_named()
{
    recorder ea, eb;
    k8slease::client c = make_client();
    auto known = [](const char *id, const char *revision, int priority, recorder *ev) {
        k8slease::elector_options o = fast("cpp-handoff", id, ev);
        o.handoff_candidate = true;
        o.revision = revision;
        o.priority = priority;
        return o;
    };
    k8slease::elector a(c, known("a:1", "r1", 0, &ea));
    std::optional<std::int64_t> epoch = a.wait_elected(10s);
    CHECK(epoch.has_value());
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, a.handoff("")), "to: identity"));
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, a.handoff(std::string(600, 'x'))),
                   "to: identity longer"));
    CHECK(a.is_leader()); // refused: nothing changed
    k8slease::elector b(c, known("b:1", "r1", 1, &eb));
    k8slease::elector d(c, known("d:1", "r1", 0, nullptr));

    // Both known to the leader (their objects exist) before it chooses.
    char selector[64];
    std::snprintf(selector, sizeof(selector), "%016llx",
                  static_cast<unsigned long long>(fnv1a("cpp-handoff")));
    const std::string list = "/apis/coordination.k8s.io/v1/namespaces/default/"
                             "leases?labelSelector=k8slease.io%2Fcandidate-of%3D" +
                             std::string(selector);
    auto until = std::chrono::steady_clock::now() + 10s;
    for (;;) {
        std::string l = ts_call("GET", list, nullptr, 200);
        if (contains(l, "\"holderIdentity\":\"b:1\"") && contains(l, "\"holderIdentity\":\"d:1\""))
            break;
        if (std::chrono::steady_clock::now() > until)
            throw failure("the candidates' objects are not all there within 10 s: " + l);
        std::this_thread::sleep_for(20ms);
    }

    // The best: b (priority 1), at once (well within a bound of 5 s), with
    // a's term over first.
    auto t0 = std::chrono::steady_clock::now();
    a.handoff(std::nullopt, 5s);
    ea.wait("stopped", 0ms);
    CHECK(!a.is_leader());
    CHECK(a.wait_lost(0ms));
    std::optional<std::int64_t> eb_epoch = b.wait_elected(5s);
    CHECK(eb_epoch && *eb_epoch == *epoch + 2);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
    std::optional<k8slease::holder> h = c.holder_get(std::nullopt, "cpp-handoff");
    CHECK(h && h->identity == "b:1" && h->epoch == *eb_epoch);

    // The operator's request, named: d.
    c.lease_handoff(std::nullopt, "cpp-handoff", "d:1");
    std::optional<std::int64_t> ed = d.wait_elected(10s);
    CHECK(ed && *ed == *eb_epoch + 2);
    CHECK(b.wait_lost(10s));
    CHECK(!b.is_leader());
    EXPECT_ERROR(errc::not_found, c.lease_handoff(std::nullopt, "cpp-no-such-lease"));
    CHECK(contains(
        EXPECT_ERROR(errc::invalid_argument, c.lease_handoff(std::nullopt, "cpp-handoff", "")),
        "to: identity"));

    // A follower's handoff only stops it; after a move, errc::state.
    k8slease::elector f(c, known("f:1", "r1", 0, nullptr));
    CHECK(!f.wait_elected(200ms));
    f.handoff("d:1");
    CHECK(f.wait_lost(0ms));
    CHECK(d.is_leader());
    k8slease::elector moved = std::move(f);
    EXPECT_ERROR(errc::state, f.handoff());
}

/* ---- moves --------------------------------------------------------------- */

void moves_keep_callbacks()
{
    recorder e1, e2, e3, e4;
    k8slease::client c = make_client();

    k8slease::elector a(c, fast("cpp-move", "a:1", &e1));
    k8slease::elector moved(std::move(a)); // possibly while the callbacks run
    CHECK(a.native() == nullptr);
    CHECK(moved.native() != nullptr);
    CHECK(!a.is_leader());
    CHECK(!a.epoch());
    CHECK(!a.leader_deadline());
    CHECK(contains(EXPECT_ERROR(errc::state, (void)a.wait_elected(0ms)), "used after a move"));
    EXPECT_ERROR(errc::state, a.wait_lost(0ms));
    EXPECT_ERROR(errc::state, a.stop());
    EXPECT_ERROR(errc::state, a.stop(true));
    EXPECT_ERROR(errc::state, a.stats());
    std::optional<std::int64_t> epoch = moved.wait_elected(10s);
    CHECK(epoch);
    e1.wait("started " + std::to_string(*epoch));

    // Move-assigning onto a running elector ends that one first.
    k8slease::elector other(c, fast("cpp-move", "b:1", &e2));
    e2.wait("leader a:1 .*");
    other = std::move(moved);
    e2.wait("stopped", 0ms);
    CHECK(other.is_leader());
    CHECK(other.epoch() == epoch);
    CHECK(moved.native() == nullptr);

    // A vector's reallocation moves them while they run.
    std::vector<k8slease::elector> v;
    v.reserve(1);
    v.push_back(std::move(other));
    v.emplace_back(c, fast("cpp-move", "c:1", &e3));
    v.emplace_back(c, fast("cpp-move-2", "c:1", &e4));
    e3.wait("leader a:1 " + std::to_string(*epoch));
    e4.wait("started [0-9]+"); // cpp-move-2 is free
    CHECK(v[0].is_leader());
    CHECK(v[2].is_leader());
    v[0].stop(true);
    e1.wait("stopped");
    e3.wait("started " + std::to_string(*epoch + 1)); // c:1 takes cpp-move over
    CHECK(v[1].wait_elected(10s) == *epoch + 1);
    CHECK(v[1].is_leader());
    CHECK(v[1].stats().terms == 1);
    a = std::move(v[1]); // assigning to a moved-from elector
    CHECK(a.is_leader());
    v.clear(); // destroys the moved-from element and stops v[2]
}

void client_move_keeps_electors_and_watches()
{
    recorder log, ev, seen;
    k8slease::client c1 = make_client(&log);
    k8slease::client c3 = make_client(); // declared here: outlives the watch and elector
    k8slease::watch w(c1, std::nullopt, "cpp-client-move",
                      [&](std::string_view id, std::int64_t e) {
                          seen.add(std::string(id) + " " + std::to_string(e));
                          if (id == "a:1")
                              throw std::runtime_error("from the watch");
                      });
    k8slease::watch w2(std::move(w));
    CHECK(w.native() == nullptr);
    k8slease::client c2(std::move(c1));
    CHECK(c1.native() == nullptr);
    CHECK(c1.callback_exceptions() == 0);
    EXPECT_ERROR(errc::state, c1.ns());
    EXPECT_ERROR(errc::state, (void)c1.holder_get(std::nullopt, "cpp-client-move"));
    EXPECT_ERROR(errc::state, k8slease::elector e(c1, fast("cpp-client-move", "a:1")));
    EXPECT_ERROR(errc::state, k8slease::watch x(c1, std::nullopt, "cpp-client-move", nullptr));

    CHECK(c2.ns() == "default");
    CHECK(c2.backend() == k8slease::backend::k8s);
    k8slease::elector a(c2, fast("cpp-client-move", "a:1", &ev));
    CHECK(a.wait_elected(10s));
    seen.wait("a:1 [0-9]+");
    // The watch's exception reached the moved client's log sink.
    log.wait("0 exception from watch callback: from the watch");
    CHECK(c2.callback_exceptions() == 1);

    c3 = std::move(c2); // frees c3's own client, takes c2's
    CHECK(c3.callback_exceptions() == 1);
    CHECK(a.is_leader());
}

/* ---- callbacks ------------------------------------------------------------ */

void callback_exceptions_are_caught_logged_counted()
{
    recorder log, ev;
    k8slease::client c = make_client(&log);
    k8slease::elector_options o = fast("cpp-throw", "a:1");
    o.on_started_leading = [&](std::int64_t) {
        ev.add("started");
        throw std::runtime_error("boom-started");
    };
    o.on_new_leader = [&](std::string_view id, std::int64_t) {
        ev.add("leader " + std::string(id));
        throw 42; // not a std::exception
    };
    o.on_stopped_leading = [&] {
        ev.add("stopped");
        throw std::logic_error("boom-stopped");
    };
    k8slease::elector a(c, o);
    CHECK(a.wait_elected(10s)); // the throw did not disturb the election
    CHECK(a.is_leader());
    ev.wait("leader a:1");
    log.wait("0 exception from on_started_leading: boom-started");
    log.wait("0 exception from on_new_leader: \\(not a std::exception\\)");
    a.stop(true);
    log.wait("0 exception from on_stopped_leading: boom-stopped");
    k8slease::elector_stats s = a.stats(); // over: no callback of a runs any more
    CHECK(s.callback_exceptions >= 3);
    CHECK(c.callback_exceptions() == s.callback_exceptions);
}

void throwing_log_sink_is_counted()
{
    k8slease::client_options o;
    o.kubeconfig = ts_kubeconfig(server);
    o.log_level = k8slease::log_level::debug; // every request
    o.log_cb = [](k8slease::log_level, std::string_view) { throw std::bad_alloc(); };
    k8slease::client c(o);
    k8slease::elector a(c, fast("cpp-throwing-log", "a:1"));
    CHECK(a.wait_elected(10s));
    CHECK(c.callback_exceptions() > 0);
    CHECK(a.stats().callback_exceptions == 0); // the log sink's, not the elector's
}

void blocking_calls_from_a_callback_throw_state()
{
    recorder results;
    k8slease::client c = make_client();
    k8slease::elector a(c, fast("cpp-reentry", "a:1"));
    std::atomic<bool> done{false};
    // The watch's callback runs on the loop thread: every blocking call
    // there must throw errc::state at once, not block or return nullopt.
    k8slease::watch w(c, std::nullopt, "cpp-reentry", [&](std::string_view, std::int64_t) {
        if (done.exchange(true))
            return;
        auto code = [&](const char *what, const std::function<void()> &f) {
            try {
                f();
                results.add(std::string(what) + " returned");
            } catch (const k8slease::error &e) {
                results.add(std::string(what) + " " + e.code().message());
            }
        };
        code("wait_elected", [&] { (void)a.wait_elected(100ms); });
        code("wait_lost", [&] { (void)a.wait_lost(100ms); });
        code("stop", [&] { a.stop(); });
        code("handoff", [&] { a.handoff(); });
        code("holder_get", [&] { (void)c.holder_get(std::nullopt, "cpp-reentry"); });
        code("wait_lost(0)", [&] { (void)a.wait_lost(0ms); }); // only looks: allowed
        results.add("end");
    });
    results.wait("end");
    CHECK(results.has("wait_elected K8SLEASE_ESTATE"));
    CHECK(results.has("wait_lost K8SLEASE_ESTATE"));
    CHECK(results.has("stop K8SLEASE_ESTATE"));
    CHECK(results.has("handoff K8SLEASE_ESTATE"));
    CHECK(results.has("holder_get K8SLEASE_ESTATE"));
    CHECK(results.has("wait_lost\\(0\\) returned"));
    CHECK(a.wait_elected(10s)); // and the election went on
}

/* ---- holder, watch, pod label -------------------------------------------- */

/* Coordinated election (the test server runs the apiserver's controller):
 * the oldest emulation version leads, whichever started first; the holder
 * record shows the strategy; options are checked by the C layer. */
void coordinated_oldest_version_leads()
{
    k8slease::client c = make_client();
    k8slease::elector_options bad = fast("cpp-cle", "Not:A:Name");
    bad.coordinated = true;
    bad.binary_version = "1.36.0";
    std::string what = EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, bad));
    CHECK(contains(what, "identity (in coordinated election"));
    bad.identity = "ok";
    bad.binary_version = std::nullopt;
    what = EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, bad));
    CHECK(contains(what, "binary_version is required"));

    auto opts = [](const char *id, const char *emulation) {
        k8slease::elector_options o = fast("cpp-cle", id);
        o.coordinated = true;
        o.binary_version = "1.36.0";
        o.emulation_version = emulation;
        return o;
    };
    k8slease::elector newer(c, opts("newer", "1.36.0"));
    CHECK(newer.wait_elected(20s).has_value());
    k8slease::elector older(c, opts("older", "1.35.0"));
    std::optional<std::int64_t> epoch = older.wait_elected(20s);
    CHECK(epoch.has_value());
    CHECK(newer.wait_lost(20s)); // stepped down for the older one
    std::optional<k8slease::holder> h = c.holder_get(std::nullopt, "cpp-cle");
    CHECK(h && h->identity == "older" && h->epoch == *epoch);
    CHECK(h->strategy == "OldestEmulationVersion");
    CHECK(h->preferred_holder.empty());
}

void holder_get_missing_is_nullopt()
{
    k8slease::client c = make_client();
    CHECK(!c.holder_get(std::nullopt, "cpp-no-such-lease"));
    CHECK(!c.holder_get("default", "cpp-no-such-lease", 2s));
}

void watch_sees_the_holder()
{
    recorder seen;
    k8slease::client c = make_client();
    k8slease::watch w(c, "default", "cpp-watch", [&](std::string_view id, std::int64_t e) {
        seen.add("[" + std::string(id) + "] " + std::to_string(e));
    });
    seen.wait("\\[\\] -1"); // no Lease yet
    std::int64_t epoch;
    {
        k8slease::elector a(c, fast("cpp-watch", "a:1"));
        std::optional<std::int64_t> ep = a.wait_elected(10s);
        CHECK(ep);
        epoch = *ep;
        seen.wait("\\[a:1\\] " + std::to_string(epoch));
    } // released
    seen.wait("\\[\\] " + std::to_string(epoch));
}

void pod_label_sets_and_removes()
{
    k8slease::client c = make_client();
    ts_call("POST", "/api/v1/namespaces/default/pods",
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"cpp-pod\"},"
            "\"spec\":{\"containers\":[{\"name\":\"c\",\"image\":\"c\"}]}}",
            201);
    std::regex role("\"role\": *\"leader\"");
    c.pod_label(std::nullopt, "cpp-pod", "role", "leader");
    CHECK(std::regex_search(ts_call("GET", "/api/v1/namespaces/default/pods/cpp-pod", nullptr, 200),
                            role));
    c.pod_label("default", "cpp-pod", "role", std::nullopt);
    CHECK(!std::regex_search(
        ts_call("GET", "/api/v1/namespaces/default/pods/cpp-pod", nullptr, 200), role));
    EXPECT_ERROR(errc::not_found, c.pod_label(std::nullopt, "cpp-no-such-pod", "role", "x"));
    CHECK(contains(
        EXPECT_ERROR(errc::invalid_argument, c.pod_label(std::nullopt, "cpp-pod", "bad key!", "x")),
        "bad key!"));
}

/* Crash failover: the options reach the C layer (its messages name them);
 * with pod_name the elector leads and records its container instance (the
 * Pod's status as the kubelet writes it) in the Lease's annotation. */
void crash_failover_records_the_container()
{
    const std::string cid =
        "containerd://0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    k8slease::client c = make_client();
    k8slease::elector_options o = fast("cpp-crash", "a:1");
    o.crash_failover = true;
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o)),
                   "crash_failover needs pod_name"));
    o.pod_name = "cpp-crash-pod";
    o.pod_namespace = "Bad_NS";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o)), "Bad_NS"));
    o.pod_namespace = "default";
    o.container = "Bad_Name";
    CHECK(contains(EXPECT_ERROR(errc::invalid_argument, k8slease::elector e(c, o)), "Bad_Name"));
    o.container = "main";

    ts_call("POST", "/api/v1/namespaces/default/pods",
            "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"cpp-crash-pod\"},"
            "\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"x\"}]}}",
            201);
    // The kubelet's report: main running since before this process started.
    std::string status =
        "{\"status\":{\"containerStatuses\":[{\"name\":\"main\",\"containerID\":\"" + cid +
        "\",\"ready\":true,\"restartCount\":0,\"image\":\"x\",\"imageID\":\"x\","
        "\"state\":{\"running\":{\"startedAt\":\"2020-01-01T00:00:00Z\"}}}]}}";
    long code = 0;
    CHECK(ts_request(server, "PATCH", "/api/v1/namespaces/default/pods/cpp-crash-pod/status",
                     "application/merge-patch+json", status.c_str(), &code, nullptr) == 0);
    CHECK(code == 200);

    k8slease::elector e(c, o);
    CHECK(e.wait_elected(10s).has_value());
    // Recorded on a renewal once the elector has read its Pod: poll the
    // Lease every 50 ms, for at most 10 s.
    const std::string lease = "/apis/coordination.k8s.io/v1/namespaces/default/leases/cpp-crash";
    auto until = std::chrono::steady_clock::now() + 10s;
    while (!contains(ts_call("GET", lease, nullptr, 200), "k8slease.io/holder-container")) {
        if (std::chrono::steady_clock::now() > until)
            throw failure("no k8slease.io/holder-container annotation within 10 s: " +
                          ts_call("GET", lease, nullptr, 200));
        std::this_thread::sleep_for(50ms);
    }
    CHECK(contains(ts_call("GET", lease, nullptr, 200), cid));
}

struct test_case {
    const char *name;
    void (*fn)();
};

const test_case tests[] = {
    {"error_category_and_codes", error_category_and_codes},
    {"bad_kubeconfig_is_config_error", bad_kubeconfig_is_config_error},
    {"bad_elector_options_name_the_field", bad_elector_options_name_the_field},
    {"etcd_options_are_validated", etcd_options_are_validated},
    {"elect_stop_release_takeover", elect_stop_release_takeover},
    {"stop_follows_release_on_cancel", stop_follows_release_on_cancel},
    {"wait_lost_on_time_while_the_server_hangs", wait_lost_on_time_while_the_server_hangs},
    {"election_over_without_leading", election_over_without_leading},
    {"moves_keep_callbacks", moves_keep_callbacks},
    {"client_move_keeps_electors_and_watches", client_move_keeps_electors_and_watches},
    {"callback_exceptions_are_caught_logged_counted",
     callback_exceptions_are_caught_logged_counted},
    {"throwing_log_sink_is_counted", throwing_log_sink_is_counted},
    {"blocking_calls_from_a_callback_throw_state", blocking_calls_from_a_callback_throw_state},
    {"holder_get_missing_is_nullopt", holder_get_missing_is_nullopt},
    {"coordinated_oldest_version_leads", coordinated_oldest_version_leads},
    {"watch_sees_the_holder", watch_sees_the_holder},
    {"pod_label_sets_and_removes", pod_label_sets_and_removes},
    {"crash_failover_records_the_container", crash_failover_records_the_container},
    {"handoff_to_the_best_and_named", handoff_to_the_best_and_named},
};

} // namespace

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : "";
    int failed = 0, run = 0;

    unsetenv("KUBECONFIG");
    unsetenv("KUBERNETES_SERVICE_HOST");
    std::printf("C++ %ld, k8slease %s\n", static_cast<long>(__cplusplus),
                std::string(k8slease::version()).c_str());
    // The gate runs the controller of coordinated election; the other tests
    // create no LeaseCandidates and never see it.
    static const char *const gate[] = {"--feature-gates=CoordinatedLeaderElection=true", nullptr};
    if (ts_start(&server, gate) != 0)
        return 1;
    for (const test_case &t : tests) {
        if (!std::strstr(t.name, filter))
            continue;
        run++;
        std::printf("[ RUN  ] %s\n", t.name);
        std::fflush(stdout);
        try {
            t.fn();
            std::printf("[  OK  ] %s\n", t.name);
        } catch (const std::exception &e) {
            std::printf("[ FAIL ] %s: %s\n", t.name, e.what());
            failed++;
        }
        std::fflush(stdout);
    }
    if (ts_stop(server) != 0) {
        std::printf("FAIL: the test server did not exit cleanly\n");
        failed++;
    }
    std::printf("%d of %d tests passed\n", run - failed, run);
    return failed || run == 0 ? 1 : 0;
}
