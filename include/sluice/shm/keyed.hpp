// A keyed limiter shared by every process of a host: one bucket per key in a table in a
// named shared-memory segment, on a clock, with waiting per key.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/detail/immediate.hpp>
#include <sluice/detail/initiate_acquire.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/shm/detail/keyed_waits.hpp>
#include <sluice/shm/keyed_gcra.hpp>
#include <sluice/shm/keyed_wait_options.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::shm {

/// shm::keyed_gcra read on `Clock`: a token bucket per key (a leaky bucket with burst 1 and
/// a slack) shared by every process that names the same segment, as
/// sluice::keyed<token_bucket<>> is shared by the threads of one process, with the same
/// contract per key (try_acquire, async_acquire with every completion token, acquire,
/// stats, close).
///
///     sluice::shm::keyed<> per_client(io, "/myapp-clients", sluice::rate::per_second(10), 20,
///                                     {.max_keys = 1'000'000});
///     if (!per_client.try_acquire(peer_address)) return too_many_requests();
///     if (co_await per_client.acquire(api_key, 250ms)) { ... }   // waits its turn
///
/// Keys: strings of up to keyed_gcra::max_key_size (40) bytes (a longer one:
/// error::shm_key_too_long) and 64-bit integers (any integral type), two kinds apart (a
/// table of integer keys refuses string keys: error::shm_string_key).
///
/// Waiting: a request that has to wait commits its key's slot in the shared table
/// (keyed_gcra::reserve, within max_wait, after every reservation of every process on the
/// key), then waits on this process's timer: grants of a key follow the order of
/// reservations across processes, and no process polls. Each key waited on here has a
/// waiting queue of this process, the engine of a single rate limiter over that key
/// (so executor, cancellation, errors and wake-ups are rate_limiter's, per key; see its
/// class comment); at most keyed_wait_options::max_waiting_keys of them, a queue nobody
/// waits in being let go for a new one (beyond that: error::queue_full). Cancellation,
/// and close(), give the slot back under shm::gcra's rule: exactly, when nothing was
/// committed on the key after it (the waiters behind it here move up); else the slot is
/// left as it is (no admission twice; the rate loses it). A key is never evicted from the
/// table while a slot on it is still to come (it is not idle); one evicted after its last
/// slot has come neither loses nor doubles an admission (see keyed_gcra).
///
/// Stats: the requests of every key (async_acquire, acquire) in this process, as one
/// limiter counts them; keys.tracked is the table's (every process's), keys.waiting this
/// process's waiting queues. try_acquire is not counted (as a local limiter's default).
///
/// Without an executor (the constructor that takes none) it offers try_acquire only:
/// async_acquire and acquire then throw system_error(error::invalid_option).
///
/// The clock: as shm::token_bucket's (every process on one time line). Thread-safety: one
/// object may be used from any number of threads, as any number of processes use the
/// table; the waiting queues are behind one lock per object, taken only by requests the
/// table does not grant at once (try_acquire, and an acquire granted at once, take none).
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class keyed {
    using core_type = detail::keyed_waits<Clock, Executor>;

public:
    /// The clock decisions are taken on.
    using clock_type = Clock;
    /// The executor of the waiting queues' timers, and the default one of completion
    /// handlers.
    using executor_type = Executor;

    /// Attaches to (or creates) the table of `where` (a segment name or segment_options),
    /// for try_acquire only; throws as shm::keyed_gcra.
    template <class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed(Where&& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
          std::chrono::nanoseconds slack = {})
        : table_(std::make_shared<keyed_gcra>(std::forward<Where>(where), r, burst, table, slack))
    {
    }

    /// The same, with waiting on executor `ex`: keyed(ex or io_context, where, rate, burst,
    /// [table_options], [slack], [keyed_wait_options]). Throws as shm::keyed_gcra, and
    /// system_error(error::invalid_option) for bad keyed_wait_options.
    template <class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed(const std::type_identity_t<Executor>& ex, Where&& where, sluice::rate r, std::uint64_t burst,
          const table_options& table = {}, std::chrono::nanoseconds slack = {}, const keyed_wait_options& waits = {})
        : table_(std::make_shared<keyed_gcra>(std::forward<Where>(where), r, burst, table, slack)),
          core_(std::make_shared<core_type>(ex, table_, waits))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <sluice::detail::execution_context_ref Context, class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed(Context& ctx, Where&& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
          std::chrono::nanoseconds slack = {}, const keyed_wait_options& waits = {})
        : keyed(Executor(ctx.get_executor()), std::forward<Where>(where), r, burst, table, slack, waits)
    {
    }

    /// Takes over `other`'s table and waiters; `other` may then only be destroyed or
    /// assigned to.
    keyed(keyed&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    keyed& operator=(keyed&& other) noexcept
    {
        if (this != &other) {
            if (core_) core_->close();
            table_ = std::move(other.table_);
            core_ = std::move(other.core_);
        }
        return *this;
    }

    /// Completes every waiter with error::closed.
    ~keyed()
    {
        if (core_) core_->close();
    }

    /// The executor the waiting queues' timers run on (needs one: see the class comment).
    executor_type get_executor() const { return core().get_executor(); }

    /// Admits n permits of the string `key` now if its bucket holds them; errors as
    /// shm::keyed_gcra::try_acquire.
    decision try_acquire(std::string_view key, std::uint64_t n = 1) noexcept
    {
        return table_->try_acquire(key, n, sluice::detail::now_ns<Clock>());
    }

    /// The same for an integer key.
    decision try_acquire(std::uint64_t key, std::uint64_t n = 1) noexcept
    {
        return table_->try_acquire(key, n, sluice::detail::now_ns<Clock>());
    }

    /// Waits until n permits of `key` (a string or an integer) are admitted; the contract
    /// of rate_limiter::async_acquire (errors, cancellation, executor), per key, plus the
    /// table's errors (shm_key_too_long, shm_string_key, shm_table_full, shm_lock_timeout,
    /// shm_corrupt, shm_truncated, shm_unavailable) and
    /// error::queue_full beyond max_waiting_keys. `key` is decay-copied (a
    /// std::string_view stays a view: its characters must live until the operation
    /// starts).
    template <class K, BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code))
                           Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_acquire(const K& key, std::uint64_t n, std::chrono::nanoseconds max_wait,
                       Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code)>(
            sluice::detail::initiate_acquire<core_type>{waiting()}, token, n, max_wait.count(), key);
    }

    /// Waits for one permit of `key` for at most max_wait; the result tells admitted, timed
    /// out, closed or another error, as rate_limiter::acquire. It never throws for an
    /// error_code. The key is copied into the coroutine.
    template <class K>
    boost::asio::awaitable<acquire_result> acquire(const K& key, std::chrono::nanoseconds max_wait = wait_forever)
    {
        return acquire(key, 1, max_wait);
    }

    /// Waits for n permits of `key`; see acquire(key, max_wait).
    template <class K>
    boost::asio::awaitable<acquire_result> acquire(const K& key, std::uint64_t n,
                                                   std::chrono::nanoseconds max_wait = wait_forever)
    {
        using stored = std::conditional_t<std::is_integral_v<K>, std::uint64_t, std::string>;
        return sluice::detail::await_acquire(async_acquire(stored(key), n, max_wait, boost::asio::deferred));
    }

    /// Requests of this process waiting on `key` now.
    template <class K>
    std::size_t queued(const K& key) const
    {
        return core_ ? core_->queued(key) : 0;
    }

    /// Keys this process keeps a waiting queue for now (at most max_waiting_keys).
    std::size_t waiting_keys() const { return core_ ? core_->waiting_keys() : 0; }

    /// This process's requests, as one limiter counts them (see the class comment).
    limiter_stats stats() const
    {
        if (core_) return core_->stats();
        limiter_stats st;
        st.keys.tracked = table_->size();
        return st;
    }

    /// Completes every waiter of this process with error::closed; its later acquires fail
    /// the same way (try_acquire still decides, as on rate_limiter).
    void close()
    {
        if (core_) core_->close();
    }

    /// The table: its size, shards, keys and configuration.
    keyed_gcra& table() noexcept { return *table_; }
    /// The table, read-only.
    const keyed_gcra& table() const noexcept { return *table_; }

private:
    const core_type& core() const
    {
        if (!core_) no_executor();
        return *core_;
    }

    const std::shared_ptr<core_type>& waiting() const
    {
        if (!core_) no_executor();
        return core_;
    }

    [[noreturn]] static void no_executor()
    {
        throw boost::system::system_error(make_error_code(error::invalid_option),
                                          "shm::keyed built without an executor: try_acquire only");
    }

    std::shared_ptr<keyed_gcra> table_;
    std::shared_ptr<core_type> core_;
};

} // namespace sluice::shm
