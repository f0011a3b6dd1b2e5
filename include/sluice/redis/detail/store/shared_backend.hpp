// What every Redis-backed limiter shares, whatever its script: the client, the options,
// the health of the link (Redis or the failure policy, with probing), the local fallback,
// the wait engine of the requests that wait locally, key building and the counters.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/wait/request_counters.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/detail/wait/wait_engine.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/detail/wait/wake_queue.hpp>
#include <sluice/redis/script.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/system/system_error.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

inline std::int64_t system_now_us() noexcept
{
    return std::chrono::duration_cast<std::chrono::microseconds>(
               std::chrono::system_clock::now().time_since_epoch()).count();
}

/// `Fallback` is the keyed local limiter of the local_fallback policy.
template <class Client, class Clock, class Fallback>
class shared_backend {
public:
    using client_type = Client;
    using clock_type = Clock;
    using executor_type = typename Client::executor_type;
    using fallback_type = Fallback;
    // Where requests wait locally (for a reserved slot, or a re-check): one timer for all.
    using engine_type = sluice::detail::wait_engine<wake_queue, Clock, executor_type>;
    static constexpr bool keyed = true;   // every call names a key

    /// make_fallback(executor, checked options) builds the fallback; it runs after the
    /// options are checked (it may divide by expected_nodes). Requests for more than
    /// max_count permits fail with error::exceeds_limit.
    template <class MakeFallback>
    shared_backend(Client& client, shared_options opts, std::uint64_t max_count, MakeFallback&& make_fallback)
        : client_(client),
          opts_(checked(std::move(opts))),
          max_count_(max_count),
          fallback_(std::forward<MakeFallback>(make_fallback)(client.get_executor(), opts_)),
          engine_(std::make_shared<engine_type>(client.get_executor(), waiting_options(opts_)))
    {
    }

    shared_backend(const shared_backend&) = delete;
    shared_backend& operator=(const shared_backend&) = delete;

    Client& client() noexcept { return client_; }
    executor_type get_executor() const noexcept { return client_.get_executor(); }

    /// Shadow mode, as the options say (basic_limiter carries it out).
    const shadow_options& shadow() const noexcept { return opts_.shadow; }
    fallback_type& fallback() noexcept { return fallback_; }
    engine_type& engine() noexcept { return *engine_; }
    const shared_options& options() const noexcept { return opts_; }

    std::string key_for(std::string_view key) const
    {
        std::string k;
        k.reserve(opts_.prefix.size() + key.size() + 3);
        k += '{';
        k += opts_.prefix;
        k += ':';
        k += key;
        k += '}';
        return k;
    }

    // The keys of every script call: the state and the configuration hash (one hash slot).
    static std::vector<std::string> keys(const std::string& key)
    {
        return {key, key + ":cfg"};
    }

    // The error of a request that cannot be sent at all.
    boost::system::error_code check(std::uint64_t n) const noexcept
    {
        if (closed_.load(std::memory_order_acquire)) return error::closed;
        if (n == 0) return error::invalid_count;
        if (n > max_count_) return error::exceeds_limit;
        return {};
    }

    bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

    // Whether this request goes to Redis: always while healthy; while degraded, one
    // request per probe_interval (the probe), the others to the failure policy.
    bool route() noexcept
    {
        if (!degraded_.load(std::memory_order_relaxed))
            return true;
        std::int64_t t = now();
        std::int64_t next = next_probe_.load(std::memory_order_relaxed);
        return t >= next && next_probe_.compare_exchange_strong(next, t + probe_ns(), std::memory_order_relaxed);
    }

    // Redis could not be reached (or did not answer in time): switch to the failure policy.
    void on_unavailable() noexcept
    {
        redis_errors_.fetch_add(1, std::memory_order_relaxed);
        if (!degraded_.exchange(true, std::memory_order_relaxed))
            next_probe_.store(now() + probe_ns(), std::memory_order_relaxed);
    }

    void on_error() noexcept { redis_errors_.fetch_add(1, std::memory_order_relaxed); }

    // A well-formed reply: Redis is back, and its clock is sampled.
    void on_reply(const verdict& v, round_trip rt) noexcept
    {
        degraded_.store(false, std::memory_order_relaxed);
        offset_us_.store(v.now_us - (rt.sent_us + (rt.received_us - rt.sent_us) / 2), std::memory_order_relaxed);
        rtt_us_.store(rt.received_us - rt.sent_us, std::memory_order_relaxed);
    }

    // Every script call the limiter sends.
    void count_command() noexcept { commands_.fetch_add(1, std::memory_order_relaxed); }

    // Sends one script call, counted; its reply completes `h`. `cancellable`: the
    // operation's cancellation reaches the client (otherwise the call runs to its reply).
    template <class Handler>
    void eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args, bool cancellable,
              Handler&& h)
    {
        count_command();
        if (cancellable)
            client_.async_eval(s, std::move(keys), std::move(args), std::forward<Handler>(h));
        else
            client_.async_eval(s, std::move(keys), std::move(args),
                               boost::asio::bind_cancellation_slot(boost::asio::cancellation_slot(), std::forward<Handler>(h)));
    }

    // A script call nobody waits for (a refund, leaving a queue): counted, and its failure
    // counted as a Redis error; `self` keeps the counters alive until the reply.
    static void send(std::shared_ptr<shared_backend> self, const script& s, std::vector<std::string> keys,
                     std::vector<std::string> args)
    {
        shared_backend& c = *self;
        c.eval(s, std::move(keys), std::move(args), true, [self = std::move(self)](boost::system::error_code ec, auto&&) {
            if (ec) self->on_error();
        });
    }

    // local_fallback's decision for a non-blocking request.
    decision fallback_try(const std::string& key, std::uint64_t n) { return fallback_.try_acquire(key, n); }

    // A request (async_acquire) starts; count_request answers it, once.
    void request_started() noexcept { pending_.fetch_add(1, std::memory_order_relaxed); }

    // A request answered with `ec`, after waiting `waited_ns` locally (0: it did not).
    void count_request(const boost::system::error_code& ec, std::int64_t waited_ns) noexcept
    {
        {
            std::lock_guard lock(counts_mutex_);
            requests_.count(ec, waited_ns);
        }
        pending_.fetch_sub(1, std::memory_order_relaxed);
    }

    // A try answered with a decision; `fallback`: by the failure policy.
    void count_try(bool admitted, bool fallback) noexcept
    {
        requests_.count_try(admitted);
        if (fallback) count_fallback();
    }

    // A request or try the failure policy answered.
    void count_fallback() noexcept { fallback_decisions_.fetch_add(1, std::memory_order_relaxed); }

    // The server's clock minus this host's system_clock, us (see limiter_stats::backend).
    std::int64_t clock_offset_us() const noexcept { return offset_us_.load(std::memory_order_relaxed); }

    limiter_stats stats() const noexcept
    {
        limiter_stats s;
        {
            std::lock_guard lock(counts_mutex_);
            s = requests_.snapshot(pending_.load(std::memory_order_relaxed));
        }
        s.backend.commands = commands_.load(std::memory_order_relaxed);
        s.backend.errors = redis_errors_.load(std::memory_order_relaxed);
        s.backend.fallback_decisions = fallback_decisions_.load(std::memory_order_relaxed);
        s.backend.last_round_trip = std::chrono::microseconds{rtt_us_.load(std::memory_order_relaxed)};
        s.backend.clock_offset = std::chrono::microseconds{offset_us_.load(std::memory_order_relaxed)};
        s.backend.degraded = degraded_.load(std::memory_order_relaxed);
        if constexpr (requires { client_.stats().master_switches; }) {
            const auto links = client_.stats();
            s.backend.links_lost = links.links_lost;
            s.backend.master_switches = links.master_switches;
        }
        return s;
    }

    // Wakes every waiting request (they complete with error::closed) and closes the
    // fallback; later requests fail with error::closed.
    void close()
    {
        if (!mark_closed())
            return;
        engine_->close();
        fallback_.close();
    }

    static std::int64_t now() noexcept
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    }

protected:
    ~shared_backend() = default;

    // False when already closed.
    bool mark_closed() noexcept { return !closed_.exchange(true, std::memory_order_acq_rel); }

    // Guards what a derived core keeps per key.
    mutable std::mutex mutex_;

private:
    std::int64_t probe_ns() const noexcept
    {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(opts_.probe_interval).count();
    }

    static shared_options checked(shared_options o)
    {
        if (o.expected_nodes == 0 || o.probe_interval.count() <= 0 || o.coalesce.count() < 0)
            throw boost::system::system_error(make_error_code(error::invalid_option));
        // A lease charges slots before anyone asks: not "only what is admitted at once".
        if (o.shadow.enabled && o.lease_size != 0)
            throw boost::system::system_error(make_error_code(error::invalid_option), "shadow mode with leasing");
        return o;
    }

    static limiter_options waiting_options(const shared_options& o) noexcept
    {
        limiter_options w;
        w.coalesce = o.coalesce;
        return w;
    }

    Client& client_;
    shared_options opts_;
    std::uint64_t max_count_;
    fallback_type fallback_;

    std::atomic<bool> closed_{false};
    std::atomic<bool> degraded_{false};
    std::atomic<std::int64_t> next_probe_{0};
    std::atomic<std::int64_t> offset_us_{0};
    std::atomic<std::int64_t> rtt_us_{0};
    std::atomic<std::uint64_t> fallback_decisions_{0};
    std::atomic<std::uint64_t> redis_errors_{0};
    std::atomic<std::uint64_t> commands_{0};
    std::atomic<std::size_t> pending_{0};   // requests started and not answered yet
    mutable std::mutex counts_mutex_;        // guards requests_ but its try counts
    sluice::detail::request_counters requests_;
    std::shared_ptr<engine_type> engine_;
};

} // namespace sluice::redis::detail
