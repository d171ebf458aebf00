/*
 * k8slease.hpp: the C++17 API of k8slease, header-only, over the C API of
 * k8slease.h (no second implementation; link with -lk8slease as for C).
 *
 * Conventions (the C ones, in C++ form):
 *  - Failures throw k8slease::error (a std::system_error of the category
 *    "k8slease" holding the K8SLEASE_E* code, with the library's message in
 *    what()). Outcomes that happen in normal operation are return values:
 *    std::nullopt from wait_elected() when not elected, from holder_get()
 *    when the Lease does not exist.
 *  - k8slease::client, k8slease::elector and k8slease::watch own their C
 *    objects: move-only, and the destructor does what the _free function
 *    does. A moved-from object holds nothing: its blocking and fallible
 *    member functions throw k8slease::error with errc::state, is_leader()
 *    is false; destroy it or assign to it.
 *  - A client must outlive its electors and watches (as in C; asserted
 *    when NDEBUG is not defined). Moving the client does not disturb them.
 *  - Callbacks are std::function, called on the client's loop thread one at
 *    a time; they must not block, and the blocking member functions throw
 *    k8slease::error with errc::state when called from one. An exception
 *    thrown by a callback is caught before it reaches C, logged at error
 *    level through client_options::log_cb and counted
 *    (client::callback_exceptions(), elector_stats::callback_exceptions).
 *    The log callback itself is called from any library thread, possibly
 *    from two at once, so it must be thread-safe.
 */
#ifndef K8SLEASE_HPP
#define K8SLEASE_HPP

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "k8slease.hpp needs C++17 or later (k8slease.h is the C API)"
#else

#include <k8slease.h>

#include <array>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

/** The C++ API of k8slease (k8slease.hpp). */
namespace k8slease
{

/** The K8SLEASE_E* codes of k8slease.h as an error code enum: compare with
 *  `e.code() == k8slease::errc::conflict`. */
enum class errc : int {
    invalid_argument = K8SLEASE_EINVAL, /**< an argument broke a rule; the message names it */
    config = K8SLEASE_ECONFIG,          /**< kubeconfig / in-cluster config unusable */
    not_found = K8SLEASE_ENOTFOUND,     /**< the object does not exist (HTTP 404) */
    conflict = K8SLEASE_ECONFLICT,      /**< optimistic-concurrency conflict (HTTP 409) */
    auth = K8SLEASE_EAUTH,              /**< credentials refused (HTTP 401/403) */
    tls = K8SLEASE_ETLS,                /**< TLS handshake or certificate verification failed */
    timeout = K8SLEASE_ETIMEOUT,        /**< a deadline passed */
    transport = K8SLEASE_ETRANSPORT,    /**< connection refused, reset, DNS, ... */
    protocol = K8SLEASE_EPROTOCOL,      /**< the server answered something we cannot use */
    state = K8SLEASE_ESTATE,            /**< not valid in the object's state (or from a callback) */
    no_memory = K8SLEASE_ENOMEM,        /**< out of memory */
    server = K8SLEASE_ESERVER           /**< any other HTTP error status (5xx, 429, 422, ...) */
};

/** The error category "k8slease": message() is k8slease_strerror(),
 *  e.g. "K8SLEASE_ECONFLICT". One object per program, as an inline
 *  function's static: but two shared objects that each include this header
 *  and hide their symbols (-fvisibility=hidden) get one each, and
 *  std::error_code compares categories by address. Across such a boundary
 *  compare e.code().value() and e.code().category().name() instead. */
inline const std::error_category &category() noexcept
{
    class impl final : public std::error_category
    {
      public:
        const char *name() const noexcept override
        {
            return "k8slease";
        }
        std::string message(int code) const override
        {
            return k8slease_strerror(code);
        }
    };
    static const impl instance;
    return instance;
}

/** An std::error_code of category() for e (found by ADL). */
inline std::error_code make_error_code(errc e) noexcept
{
    return {static_cast<int>(e), category()};
}

/** A failed k8slease call. code() is of category() and compares equal to
 *  the errc value; what() is "FUNCTION: MESSAGE: K8SLEASE_E...", MESSAGE
 *  being k8slease_error_last() of the failed call (it names what was
 *  wrong). */
class error : public std::system_error
{
  public:
    /** An error of code code with the text what_arg (what() appends the
     *  code's name). */
    error(errc code, const std::string &what_arg)
        : std::system_error(make_error_code(code), what_arg)
    {
    }
};

/** Levels of the log callback, most severe first (k8slease_log_level). */
enum class log_level : int {
    error = K8SLEASE_LOG_ERROR, /**< failures */
    warn = K8SLEASE_LOG_WARN,   /**< retried or degraded */
    info = K8SLEASE_LOG_INFO,   /**< elections won and lost, holder changes */
    debug = K8SLEASE_LOG_DEBUG  /**< every request */
};

/** Where elections live (k8slease_backend). */
enum class backend : int {
    k8s = K8SLEASE_BACKEND_K8S,  /**< Kubernetes Lease objects */
    etcd = K8SLEASE_BACKEND_ETCD /**< etcd v3 elections (docs/etcd.md) */
};

/** Log sink: the level and the message (valid during the call). Called from
 *  any library thread, possibly from two at once: it must be thread-safe. */
using log_function = std::function<void(log_level level, std::string_view msg)>;

/** Options of client: the fields of k8slease_client_options. nullopt is the
 *  C API's NULL (its default). */
struct client_options {
    /** Path of a kubeconfig file. nullopt: in-cluster config when
     *  KUBERNETES_SERVICE_HOST is set, else $KUBECONFIG, else
     *  ~/.kube/config. Kubernetes backend only. */
    std::optional<std::string> kubeconfig;
    /** Context to use. nullopt: the kubeconfig's current-context. */
    std::optional<std::string> context;
    /** Log sink; empty: no logging. Also receives the exceptions thrown by
     *  the callbacks of this client's electors and watches (level error). */
    log_function log_cb;
    /** Most verbose level passed to log_cb. */
    k8slease::log_level log_level = k8slease::log_level::info;
    /** Appended to "k8slease/VERSION" in the User-Agent header. */
    std::optional<std::string> user_agent;
    /** backend::k8s (default) or backend::etcd. */
    k8slease::backend backend = k8slease::backend::k8s;
    /** etcd: comma-separated endpoint URLs, all http:// or all https://.
     *  Required with backend::etcd; must be nullopt otherwise. */
    std::optional<std::string> etcd_endpoints;
    /** etcd: PEM file of the servers' CA; nullopt: the system trust store. */
    std::optional<std::string> etcd_ca_file;
    std::optional<std::string> etcd_cert_file; /**< etcd: PEM client certificate */
    std::optional<std::string> etcd_key_file;  /**< etcd: PEM key of etcd_cert_file */
    std::optional<std::string> etcd_username;  /**< etcd: user for etcd authentication */
    std::optional<std::string> etcd_password;  /**< etcd: password of etcd_username */
    /** Kubernetes: holder reads follow crash failover records (the C
     *  option's comment; docs/semantics.md, "Crash failover"). */
    bool crash_failover = false;
};

/** Options of elector: the fields of k8slease_elector_options, durations as
 *  std::chrono::milliseconds (named without the C fields' _ms). */
struct elector_options {
    /** Lease namespace; nullopt: the client's namespace. nullopt with etcd. */
    std::optional<std::string> ns;
    /** Lease name (etcd: the election name), required. */
    std::string name;
    /** Our identity, e.g. "host:port"; required, non-empty. */
    std::string identity;
    /** Timing, as client-go: lease_duration > renew_deadline >
     *  1.2 * retry_period > 0. Zero: the defaults, 15 s / 10 s / 2 s. */
    std::chrono::milliseconds lease_duration{0};
    std::chrono::milliseconds renew_deadline{0}; /**< see lease_duration */
    std::chrono::milliseconds retry_period{0};   /**< see lease_duration */
    /** Release the Lease (holder "") when the election stops while leading;
     *  etcd: delete our key and revoke our lease. */
    bool release_on_cancel = true;
    /** Became leader with this epoch (fencing token). Loop thread. */
    std::function<void(std::int64_t epoch)> on_started_leading;
    /** The election ended (after leading, or without). Loop thread. */
    std::function<void()> on_stopped_leading;
    /** The observed holder or its epoch changed ("" when none). Loop thread. */
    std::function<void(std::string_view identity, std::int64_t epoch)> on_new_leader;
    /** Kubernetes: no watch, poll every retry_period like client-go. */
    bool poll_only = false;
    /** Kubernetes: coordinated leader election (KEP-4355): the
     *  kube-apiserver's controller picks the holder among LeaseCandidates
     *  (docs/coordinated.md). identity must then be a DNS subdomain name. */
    bool coordinated = false;
    /** Coordinated: this binary's version, "MAJOR.MINOR.PATCH"; required. */
    std::optional<std::string> binary_version;
    /** Coordinated: the version it emulates; nullopt: binary_version. */
    std::optional<std::string> emulation_version;
    /** Coordinated: nullopt: "OldestEmulationVersion". */
    std::optional<std::string> strategy;
    /** Kubernetes, not with coordinated: crash failover (docs/semantics.md,
     *  "Crash failover"). As leader, record in the Lease the container
     *  instance this process runs in (read from its own Pod); as follower,
     *  take the Lease at once when the kubelet reports the holder's
     *  recorded instance terminated, instead of at its expiry. Needs
     *  pod_name. */
    bool crash_failover = false;
    /** Crash failover and handoff candidates: namespace of this process's
     *  Pod (the Downward API's metadata.namespace); nullopt: the Lease's
     *  namespace. */
    std::optional<std::string> pod_namespace;
    /** Crash failover (required) and handoff candidates (optional): name
     *  of this process's Pod (the Downward API's metadata.name). */
    std::optional<std::string> pod_name;
    /** Crash failover: the container this process runs in; nullopt: the
     *  Pod's only container (required when it has several). */
    std::optional<std::string> container;
    /** Kubernetes: make this candidate known to the leader as a successor
     *  for elector::handoff() (docs/semantics.md, "Planned handoff"): a
     *  Lease object of its own, owned by its Pod when pod_name is set,
     *  deleted when the election ends. Needs create, update and delete on
     *  leases. false: unknown to the choice, still a candidate that can
     *  win. */
    bool handoff_candidate = false;
    /** Handoff: this candidate's revision (the newest is preferred);
     *  nullopt: its Pod's label pod-template-hash, else
     *  controller-revision-hash (read with pod_name), else "". */
    std::optional<std::string> revision;
    /** Handoff: among the candidates of the newest revision, the highest
     *  priority is preferred. */
    int priority = 0;
};

/** An elector's counters: the C struct k8slease_elector_stats (all its
 *  fields, same names) plus what the C++ layer counts. */
struct elector_stats : k8slease_elector_stats {
    /** Exceptions thrown by this elector's callbacks (caught and logged). */
    std::uint64_t callback_exceptions = 0;
};

/** Upper bounds (ms) of elector_stats::renew_latency_bucket; -1: no bound. */
inline constexpr std::array<int, K8SLEASE_LATENCY_BUCKETS> latency_bounds_ms =
    K8SLEASE_LATENCY_BOUNDS_MS;

/** A Lease's holder record (k8slease_holder). */
struct holder {
    std::string identity;  /**< holderIdentity; "" when none */
    std::int64_t epoch{0}; /**< leaseTransitions (etcd: the key's create revision) */
    /** renewTime; nullopt when absent. */
    std::optional<std::chrono::system_clock::time_point> renew_time;
    /** acquireTime; nullopt when absent. */
    std::optional<std::chrono::system_clock::time_point> acquire_time;
    std::chrono::seconds lease_duration{0}; /**< leaseDurationSeconds (0 when absent) */
    bool expired{false};          /**< renewTime + duration is in the past by our wall clock */
    std::string resource_version; /**< metadata.resourceVersion */
    std::string strategy;         /**< spec.strategy (coordinated election); "" when none */
    std::string preferred_holder; /**< spec.preferredHolder (coordinated election); "" when none */
    /** Crash failover (client_options::crash_failover): the kubelet reported
     *  the holder's container instance terminated (expired is true too). */
    bool ended{false};
};

/** Version of the library (not of this header), e.g. "0.1.0". */
inline std::string_view version() noexcept
{
    return k8slease_version();
}

/** @cond INTERNAL */
namespace detail
{

/** Throws k8slease::error for rc < 0 with k8slease_error_last(), which must
 *  still be the failed call's message. */
inline void check(int rc, const char *function)
{
    if (rc >= 0)
        return;
    const char *msg = k8slease_error_last();
    throw error(static_cast<errc>(rc), std::string(function) + ": " + (*msg ? msg : "failed"));
}

/** NULL for nullopt, as the C options want. */
inline const char *c_str(const std::optional<std::string> &s) noexcept
{
    return s ? s->c_str() : nullptr;
}

inline std::int64_t c_ms(std::chrono::milliseconds d) noexcept
{
    return static_cast<std::int64_t>(d.count());
}

/** What a client shares with its electors and watches: the log sink (for
 *  callback exceptions) and the count of those. At a stable address. */
struct client_state {
    log_function log;
    std::atomic<std::uint64_t> callback_exceptions{0};
    std::atomic<int> children{0}; // live electors and watches, for an assert

    /** Loop thread (or any): a callback named callback threw. */
    void report(const char *callback, std::exception_ptr ex) noexcept
    {
        callback_exceptions.fetch_add(1, std::memory_order_relaxed);
        if (!log)
            return;
        try {
            std::string msg = std::string("exception from ") + callback + ": ";
            try {
                std::rethrow_exception(ex);
            } catch (const std::exception &e) {
                msg += e.what();
            } catch (...) {
                msg += "(not a std::exception)";
            }
            log(log_level::error, msg);
        } catch (...) {
            // The log sink threw too (or no memory): counted above, nothing more to do.
        }
    }

    static void log_trampoline(k8slease_log_level level, const char *msg, void *ud) noexcept
    {
        auto *self = static_cast<client_state *>(ud);
        try {
            self->log(static_cast<log_level>(level), msg);
        } catch (...) {
            // Not logged through the sink that just threw: only counted.
            self->callback_exceptions.fetch_add(1, std::memory_order_relaxed);
        }
    }
};

/** Depth of C++ callbacks running on this thread: a blocking call made
 *  there failed with K8SLEASE_ESTATE because of where it was called. */
inline int &callback_depth() noexcept
{
    thread_local int depth = 0;
    return depth;
}

/** Runs a user callback: counts the depth, catches every exception. */
template <class F>
void guarded(client_state *cs, std::atomic<std::uint64_t> *count, const char *name, F &&f) noexcept
{
    ++callback_depth();
    try {
        f();
    } catch (...) {
        if (count)
            count->fetch_add(1, std::memory_order_relaxed);
        cs->report(name, std::current_exception());
    }
    --callback_depth();
}

template <class Handle> Handle *require(Handle *h, const char *what)
{
    if (!h)
        throw error(errc::state, std::string(what) + ": used after a move");
    return h;
}

} // namespace detail
/** @endcond */

/** A connection to one API server (or etcd cluster): configuration,
 *  credentials and one event-loop thread (k8slease_client). Move-only; the
 *  destructor stops the loop thread. It must outlive its electors and
 *  watches. */
class client
{
  public:
    /** Loads the configuration and starts the loop thread (no network I/O).
     *  Throws error: errc::invalid_argument, errc::config (e.g. a missing
     *  kubeconfig, named in what()), errc::no_memory. Any thread. */
    explicit client(const client_options &opts = client_options())
        : state_(std::make_unique<detail::client_state>())
    {
        k8slease_client_options o = K8SLEASE_CLIENT_OPTIONS_INIT;
        o.kubeconfig = detail::c_str(opts.kubeconfig);
        o.context = detail::c_str(opts.context);
        if (opts.log_cb) {
            state_->log = opts.log_cb;
            o.log_cb = &detail::client_state::log_trampoline;
            o.log_user_data = state_.get();
        }
        o.log_level = static_cast<k8slease_log_level>(opts.log_level);
        o.user_agent = detail::c_str(opts.user_agent);
        o.backend = static_cast<k8slease_backend>(opts.backend);
        o.etcd_endpoints = detail::c_str(opts.etcd_endpoints);
        o.etcd_ca_file = detail::c_str(opts.etcd_ca_file);
        o.etcd_cert_file = detail::c_str(opts.etcd_cert_file);
        o.etcd_key_file = detail::c_str(opts.etcd_key_file);
        o.etcd_username = detail::c_str(opts.etcd_username);
        o.etcd_password = detail::c_str(opts.etcd_password);
        o.crash_failover = opts.crash_failover ? 1 : 0;
        detail::check(k8slease_client_new(&c_, &o), "k8slease_client_new");
    }

    client(const client &) = delete;            /**< not copyable */
    client &operator=(const client &) = delete; /**< not copyable */

    /** Takes other's client; other holds nothing afterwards. Electors and
     *  watches of the client keep working. */
    client(client &&other) noexcept
        : state_(std::move(other.state_)), c_(std::exchange(other.c_, nullptr))
    {
    }

    /** Frees the client held (see ~client()), then takes other's. */
    client &operator=(client &&other) noexcept
    {
        if (this != &other) {
            reset();
            state_ = std::move(other.state_);
            c_ = std::exchange(other.c_, nullptr);
        }
        return *this;
    }

    /** k8slease_client_free(): every elector and watch of the client must
     *  be gone (asserted). Not from a callback: there the C client is not
     *  freed (it is left running, its log silenced; see
     *  k8slease_client_free). */
    ~client()
    {
        reset();
    }

    /** Namespace of the configuration ("" with etcd). Valid for the
     *  client's life. */
    std::string_view ns() const
    {
        return k8slease_client_namespace(detail::require(c_, "k8slease::client"));
    }

    /** Server URL (with etcd: the first endpoint). Valid for the client's life. */
    std::string_view server() const
    {
        return k8slease_client_server(detail::require(c_, "k8slease::client"));
    }

    /** The backend of the client. */
    k8slease::backend backend() const
    {
        return static_cast<k8slease::backend>(
            k8slease_client_backend(detail::require(c_, "k8slease::client")));
    }

    /** Reads the Lease ns/name once (blocking; timeout <= 0: 10 s).
     *  nullopt when the Lease does not exist (etcd: no candidate). Throws
     *  error for anything else (errc::state from a callback). Not from a
     *  callback. */
    [[nodiscard]] std::optional<holder> holder_get(const std::optional<std::string> &ns,
                                                   const std::string &name,
                                                   std::chrono::milliseconds timeout = {})
    {
        k8slease_holder *h = nullptr;
        int rc = k8slease_holder_get(detail::require(c_, "k8slease::client"), detail::c_str(ns),
                                     name.c_str(), detail::c_ms(timeout), &h);
        if (rc == K8SLEASE_ENOTFOUND)
            return std::nullopt;
        detail::check(rc, "k8slease_holder_get");
        std::unique_ptr<k8slease_holder, void (*)(k8slease_holder *)> owned(h,
                                                                            &k8slease_holder_free);
        using std::chrono::microseconds;
        using std::chrono::system_clock;
        auto when = [](std::int64_t us) -> std::optional<system_clock::time_point> {
            if (us == 0)
                return std::nullopt;
            return system_clock::time_point(
                std::chrono::duration_cast<system_clock::duration>(microseconds(us)));
        };
        holder out;
        out.identity = h->identity;
        out.epoch = h->epoch;
        out.renew_time = when(h->renew_time_us);
        out.acquire_time = when(h->acquire_time_us);
        out.lease_duration = std::chrono::seconds(h->lease_duration_s);
        out.expired = h->expired != 0;
        out.resource_version = h->resource_version ? h->resource_version : "";
        out.strategy = h->strategy ? h->strategy : "";
        out.preferred_holder = h->preferred_holder ? h->preferred_holder : "";
        out.ended = h->ended != 0;
        return out;
    }

    /** Releases the Lease ns/name held by identity (k8slease_lease_release;
     *  blocking, timeout <= 0: 10 s), for operators. Throws error:
     *  errc::conflict when another identity holds it and force is false,
     *  errc::not_found, ... Not from a callback. */
    void lease_release(const std::optional<std::string> &ns, const std::string &name,
                       const std::string &identity, bool force = false,
                       std::chrono::milliseconds timeout = {})
    {
        detail::check(k8slease_lease_release(detail::require(c_, "k8slease::client"),
                                             detail::c_str(ns), name.c_str(), identity.c_str(),
                                             force ? 1 : 0, detail::c_ms(timeout)),
                      "k8slease_lease_release");
    }

    /** Asks the leader of Lease ns/name to hand it over
     *  (k8slease_lease_handoff: the annotation k8slease.io/handoff-request,
     *  which a k8slease leader acts on as elector::handoff() does; `to`:
     *  the successor, nullopt for the best candidate). Returns once the
     *  request is written, not once it is acted on: follow the holder with
     *  a watch. Throws error: errc::invalid_argument (names, the etcd
     *  backend), errc::not_found, errc::auth, ... Not from a callback. */
    void lease_handoff(const std::optional<std::string> &ns, const std::string &name,
                       const std::optional<std::string> &to = std::nullopt)
    {
        detail::check(k8slease_lease_handoff(detail::require(c_, "k8slease::client"),
                                             detail::c_str(ns), name.c_str(), detail::c_str(to)),
                      "k8slease_lease_handoff");
    }

    /** Sets (value) or removes (nullopt) label key of Pod ns/pod (blocking,
     *  10 s). Throws error: errc::invalid_argument, errc::not_found,
     *  errc::state with etcd, ... Not from a callback. */
    void pod_label(const std::optional<std::string> &ns, const std::string &pod,
                   const std::string &key, const std::optional<std::string> &value)
    {
        detail::check(k8slease_pod_label(detail::require(c_, "k8slease::client"), detail::c_str(ns),
                                         pod.c_str(), key.c_str(), detail::c_str(value)),
                      "k8slease_pod_label");
    }

    /** Exceptions thrown by the callbacks of this client (log_cb, electors,
     *  watches), caught and counted. Any thread. */
    std::uint64_t callback_exceptions() const noexcept
    {
        return state_ ? state_->callback_exceptions.load(std::memory_order_relaxed) : 0;
    }

    /** The C client, for the C API; nullptr after a move. Owned by this object. */
    k8slease_client *native() const noexcept
    {
        return c_;
    }

  private:
    friend class elector;
    friend class watch;

    void reset() noexcept
    {
        if (!c_)
            return;
        assert(state_->children.load() == 0 && "k8slease::client outlived by an elector or watch");
        k8slease_client_free(std::exchange(c_, nullptr));
        state_.reset();
    }

    std::unique_ptr<detail::client_state> state_; // stable: the C log user_data
    k8slease_client *c_ = nullptr;
};

/** One campaign for one Lease, one term at most (k8slease_elector). Starts
 *  campaigning when constructed; once the term ends or the elector is
 *  stopped it is over: construct a new one to campaign again. Move-only;
 *  the destructor stops the election (releasing as the options say) and
 *  waits until it is over. */
class elector
{
  public:
    /** Validates the options and starts campaigning (asynchronously).
     *  Throws error: errc::invalid_argument (what() names the rule),
     *  errc::no_memory. Any thread. */
    elector(client &c, const elector_options &opts)
        : impl_(std::make_unique<impl>(detail::require(c.state_.get(), "k8slease::client"), opts))
    {
        k8slease_elector_options o = K8SLEASE_ELECTOR_OPTIONS_INIT;
        o.ns = detail::c_str(opts.ns);
        o.name = opts.name.c_str();
        o.identity = opts.identity.c_str();
        o.lease_duration_ms = detail::c_ms(opts.lease_duration);
        o.renew_deadline_ms = detail::c_ms(opts.renew_deadline);
        o.retry_period_ms = detail::c_ms(opts.retry_period);
        o.release_on_cancel = opts.release_on_cancel ? 1 : 0;
        o.poll_only = opts.poll_only ? 1 : 0;
        o.coordinated = opts.coordinated ? 1 : 0;
        o.binary_version = detail::c_str(opts.binary_version);
        o.emulation_version = detail::c_str(opts.emulation_version);
        o.strategy = detail::c_str(opts.strategy);
        o.crash_failover = opts.crash_failover ? 1 : 0;
        o.pod_namespace = detail::c_str(opts.pod_namespace);
        o.pod_name = detail::c_str(opts.pod_name);
        o.container = detail::c_str(opts.container);
        o.handoff_candidate = opts.handoff_candidate ? 1 : 0;
        o.revision = detail::c_str(opts.revision);
        o.priority = opts.priority;
        if (opts.on_started_leading)
            o.on_started_leading = &impl::started;
        if (opts.on_stopped_leading)
            o.on_stopped_leading = &impl::stopped;
        if (opts.on_new_leader)
            o.on_new_leader = &impl::new_leader;
        o.user_data = impl_.get();
        detail::check(k8slease_elector_start(&e_, c.c_, &o), "k8slease_elector_start");
        impl_->cs->children.fetch_add(1);
    }

    elector(const elector &) = delete;            /**< not copyable */
    elector &operator=(const elector &) = delete; /**< not copyable */

    /** Takes other's election; its callbacks keep running. other holds
     *  nothing afterwards. */
    elector(elector &&other) noexcept
        : impl_(std::move(other.impl_)), e_(std::exchange(other.e_, nullptr))
    {
    }

    /** Ends the election held (as ~elector()), then takes other's. */
    elector &operator=(elector &&other) noexcept
    {
        if (this != &other) {
            reset();
            impl_ = std::move(other.impl_);
            e_ = std::exchange(other.e_, nullptr);
        }
        return *this;
    }

    /** k8slease_elector_free(): stops the election (releasing if
     *  release_on_cancel) and waits until it is over; no callback runs
     *  after it. From a callback of the same client it does not wait (the
     *  library frees the election once over; no callback of it runs
     *  after), but not from this elector's own callbacks: the callback's
     *  std::function would be destroyed while it runs. */
    ~elector()
    {
        reset();
    }

    /** Blocks until elected, the term is over, or timeout passes
     *  (negative: no limit). Returns the epoch once on_started_leading has
     *  returned; nullopt on timeout and when the term is over (lost,
     *  stopped or failed, whether or not it led: wait_lost(0) tells these
     *  apart, epoch() gives the term it had). Throws error with errc::state
     *  when called from a callback. Not from a callback. */
    [[nodiscard]] std::optional<std::int64_t>
    wait_elected(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1))
    {
        std::int64_t epoch = -1;
        k8slease_elector *e = detail::require(e_, "k8slease::elector");
        int rc = k8slease_elector_wait_elected(e, detail::c_ms(timeout), &epoch);
        if (rc == 0)
            return epoch;
        if (rc == K8SLEASE_ETIMEOUT)
            return std::nullopt;
        // K8SLEASE_ESTATE means "over" or "called from a callback".
        if (rc == K8SLEASE_ESTATE && detail::callback_depth() == 0) {
            std::string msg = k8slease_error_last();
            if (k8slease_elector_wait_lost(e, 0) == 0)
                return std::nullopt;
            throw error(errc::state, "k8slease_elector_wait_elected: " + msg);
        }
        detail::check(rc, "k8slease_elector_wait_elected");
        return std::nullopt; // not reached: rc < 0
    }

    /** True while leader and before the leader deadline (the start of the
     *  last successful renewal + renew_deadline) on the monotonic clock:
     *  check it before every fenced write. False after a move. Any thread. */
    bool is_leader() const noexcept
    {
        return e_ && k8slease_elector_is_leader(e_);
    }

    /** The leader deadline on std::chrono::steady_clock (CLOCK_MONOTONIC
     *  with libstdc++ and libc++ on Linux); nullopt when not leader. */
    std::optional<std::chrono::steady_clock::time_point> leader_deadline() const noexcept
    {
        std::int64_t ns = e_ ? k8slease_elector_leader_deadline(e_) : 0;
        if (ns == 0)
            return std::nullopt;
        return std::chrono::steady_clock::time_point(
            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                std::chrono::nanoseconds(ns)));
    }

    /** Epoch of the current (or last) term; nullopt if never elected. */
    std::optional<std::int64_t> epoch() const noexcept
    {
        std::int64_t v = e_ ? k8slease_elector_epoch(e_) : -1;
        if (v < 0)
            return std::nullopt;
        return v;
    }

    /** Blocks until the term is over (k8slease_elector_wait_lost: the
     *  moment is_leader() turns false for good, whatever the election
     *  still sends to a server that does not answer; for an elector that
     *  never led, when its election ends) or timeout passes (negative: no
     *  limit). True when over, false on timeout. A zero timeout only looks,
     *  also from a callback; any other throws error with errc::state there. */
    bool wait_lost(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1))
    {
        int rc = k8slease_elector_wait_lost(detail::require(e_, "k8slease::elector"),
                                            detail::c_ms(timeout));
        if (rc == K8SLEASE_ETIMEOUT)
            return false;
        detail::check(rc, "k8slease_elector_wait_lost");
        return true;
    }

    /** Stops the election and waits until it is over, releasing the Lease
     *  if release and we lead. Idempotent. Throws error with errc::state
     *  from a callback. Not from a callback. */
    void stop(bool release)
    {
        detail::check(k8slease_elector_stop(detail::require(e_, "k8slease::elector"), release),
                      "k8slease_elector_stop");
    }

    /** stop() releasing as elector_options::release_on_cancel says. */
    void stop()
    {
        detail::check(k8slease_elector_stop(detail::require(e_, "k8slease::elector"), -1),
                      "k8slease_elector_stop");
    }

    /** Hands the term over and waits until that is done
     *  (k8slease_elector_handoff; docs/semantics.md, "Planned handoff"): the
     *  term ends at once as with stop(true), but the write names the
     *  successor `to` (nullopt: the best known candidate, see
     *  elector_options::handoff_candidate; none known: a plain release)
     *  holder of a new term of `bound` (rounded up to whole seconds; zero
     *  or negative: 3 retry periods). The successor leads within a round
     *  trip; if it does not take the Lease within the bound, anyone may.
     *  An elector that does not lead only stops. Throws error:
     *  errc::invalid_argument (the etcd backend, a `to` that is not a valid
     *  identity: what() names it), errc::state (from a callback, after a
     *  move), errc::no_memory. Not from a callback. */
    void handoff(std::optional<std::string> to = std::nullopt,
                 std::chrono::milliseconds bound = std::chrono::milliseconds(0))
    {
        detail::check(k8slease_elector_handoff(detail::require(e_, "k8slease::elector"),
                                               detail::c_str(to), detail::c_ms(bound)),
                      "k8slease_elector_handoff");
    }

    /** The elector's counters (k8slease_elector_stats_get), plus the
     *  exceptions its callbacks threw. Any thread. */
    elector_stats stats() const
    {
        elector_stats s{};
        s.version = K8SLEASE_ELECTOR_STATS_VERSION;
        detail::check(k8slease_elector_stats_get(detail::require(e_, "k8slease::elector"), &s),
                      "k8slease_elector_stats_get");
        s.callback_exceptions = impl_->callback_exceptions.load(std::memory_order_relaxed);
        return s;
    }

    /** The C elector, for the C API; nullptr after a move. Owned by this object. */
    k8slease_elector *native() const noexcept
    {
        return e_;
    }

  private:
    // The callbacks and what they report to, at a stable address (the C
    // user_data) that a move of the elector does not change.
    struct impl {
        impl(detail::client_state *cs_, const elector_options &o)
            : cs(cs_), on_started_leading(o.on_started_leading),
              on_stopped_leading(o.on_stopped_leading), on_new_leader(o.on_new_leader)
        {
        }

        static void started(std::int64_t epoch, void *ud) noexcept
        {
            auto *self = static_cast<impl *>(ud);
            detail::guarded(self->cs, &self->callback_exceptions, "on_started_leading",
                            [&] { self->on_started_leading(epoch); });
        }
        static void stopped(void *ud) noexcept
        {
            auto *self = static_cast<impl *>(ud);
            detail::guarded(self->cs, &self->callback_exceptions, "on_stopped_leading",
                            [&] { self->on_stopped_leading(); });
        }
        static void new_leader(const char *identity, std::int64_t epoch, void *ud) noexcept
        {
            auto *self = static_cast<impl *>(ud);
            detail::guarded(self->cs, &self->callback_exceptions, "on_new_leader",
                            [&] { self->on_new_leader(identity, epoch); });
        }

        detail::client_state *cs; // the client's, for callback exceptions
        std::function<void(std::int64_t)> on_started_leading;
        std::function<void()> on_stopped_leading;
        std::function<void(std::string_view, std::int64_t)> on_new_leader;
        std::atomic<std::uint64_t> callback_exceptions{0};
    };

    void reset() noexcept
    {
        if (!e_)
            return;
        k8slease_elector_free(std::exchange(e_, nullptr)); // no callback after it
        impl_->cs->children.fetch_sub(1);
        impl_.reset();
    }

    std::unique_ptr<impl> impl_;
    k8slease_elector *e_ = nullptr;
};

/** A watch of one Lease's holder (k8slease_watch): the callback runs with
 *  the current holder first, then on every change of holder or epoch.
 *  Move-only; the destructor cancels it. */
class watch
{
  public:
    /** Callback: the holder ("" when none or the Lease was deleted) and the
     *  epoch (-1 when the Lease does not exist). Loop thread. */
    using callback = std::function<void(std::string_view identity, std::int64_t epoch)>;

    /** Starts watching Lease ns/name (ns nullopt: the client's namespace;
     *  nullopt with etcd). Throws error: errc::invalid_argument,
     *  errc::no_memory. Any thread. */
    watch(client &c, const std::optional<std::string> &ns, const std::string &name, callback cb)
        : impl_(std::make_unique<impl>(detail::require(c.state_.get(), "k8slease::client"),
                                       std::move(cb)))
    {
        detail::check(k8slease_watch_start(&w_, c.c_, detail::c_str(ns), name.c_str(),
                                           &impl::changed, impl_.get()),
                      "k8slease_watch_start");
        impl_->cs->children.fetch_add(1);
    }

    watch(const watch &) = delete;            /**< not copyable */
    watch &operator=(const watch &) = delete; /**< not copyable */

    /** Takes other's watch; its callback keeps running. */
    watch(watch &&other) noexcept
        : impl_(std::move(other.impl_)), w_(std::exchange(other.w_, nullptr))
    {
    }

    /** Cancels the watch held, then takes other's. */
    watch &operator=(watch &&other) noexcept
    {
        if (this != &other) {
            reset();
            impl_ = std::move(other.impl_);
            w_ = std::exchange(other.w_, nullptr);
        }
        return *this;
    }

    /** k8slease_watch_free(): no callback runs after it returns. Not from
     *  a callback of the same client. */
    ~watch()
    {
        reset();
    }

    /** The C watch; nullptr after a move. Owned by this object. */
    k8slease_watch *native() const noexcept
    {
        return w_;
    }

  private:
    struct impl {
        impl(detail::client_state *cs_, callback f) : cs(cs_), cb(std::move(f))
        {
        }

        static void changed(const char *identity, std::int64_t epoch, void *ud) noexcept
        {
            auto *self = static_cast<impl *>(ud);
            detail::guarded(self->cs, nullptr, "watch callback", [&] {
                if (self->cb)
                    self->cb(identity, epoch);
            });
        }

        detail::client_state *cs; // the client's, for callback exceptions
        callback cb;
    };

    void reset() noexcept
    {
        if (!w_)
            return;
        k8slease_watch_free(std::exchange(w_, nullptr));
        impl_->cs->children.fetch_sub(1);
        impl_.reset();
    }

    std::unique_ptr<impl> impl_;
    k8slease_watch *w_ = nullptr;
};

} // namespace k8slease

/** @cond INTERNAL */
namespace std
{
template <> struct is_error_code_enum<k8slease::errc> : true_type {
};
} // namespace std
  /** @endcond */

#endif /* C++17 */

#endif /* K8SLEASE_HPP */
