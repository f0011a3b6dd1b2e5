// A keyed limiter shared by every process of a host: one bucket per key in a table in a
// named shared-memory segment, on a clock, with waiting per key.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/default_clock.hpp>
#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/detail/wait/local_answers.hpp>
#include <sluice/shm/detail/store/keyed_waits.hpp>
#include <sluice/shm/keyed_gcra.hpp>
#include <sluice/shm/keyed_wait_options.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::shm {

/// shm::keyed_gcra read on `Clock`: a token bucket per key (a leaky bucket with burst 1 and
/// a slack) shared by every process that names the same segment, as
/// sluice::keyed<token_bucket<>> is shared by the threads of one process, with the contract
/// of every limiter per key (sluice::local_limiter with a key: try_acquire,
/// async_try_acquire, async_acquire with every completion token, acquire, stats, close).
/// It is not a sluice::keyed<L> (no per-key overrides, one policy): a table of buckets.
///
///     sluice::shm::keyed_bucket<> per_client(io, "/myapp-clients", sluice::rate::per_second(10), 20,
///                                            {.max_keys = 1'000'000});
///     if (!per_client.try_acquire(peer_address)) return too_many_requests();
///     if (co_await per_client.acquire(api_key, 250ms)) { ... }   // waits its turn
///
/// Keys: strings of up to keyed_gcra::max_key_size (40) bytes (a longer one:
/// error::shm_key_too_long) and 64-bit integers (any integral type), two kinds apart (a
/// table of integer keys refuses string keys: error::shm_string_key).
/// Besides the contract's errors, a request may fail with the table's
/// (shm_key_too_long, shm_string_key, shm_table_full, shm_lock_timeout, shm_corrupt,
/// shm_truncated, shm_unavailable), and a wait with error::queue_full beyond
/// keyed_wait_options::max_waiting_keys.
///
/// Waiting: a request that has to wait commits its key's slot in the shared table
/// (keyed_gcra::reserve, within max_wait, after every reservation of every process on the
/// key), then waits on this process's timer: grants of a key follow the order of
/// reservations across processes, and no process polls. Each key waited on here has a
/// waiting queue of this process, the engine of a single rate limiter over that key
/// (so executor, cancellation, errors and wake-ups are rate_limiter's, per key; see its
/// class comment); at most keyed_wait_options::max_waiting_keys of them, a queue nobody
/// waits in being let go for a new one (beyond that: error::queue_full). Cancellation,
/// and close(), give the slot back under policy::shm_gcra's rule: exactly, when nothing was
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
/// get_executor() is then an empty executor, and async_try_acquire, async_acquire and
/// acquire throw system_error(error::invalid_option) when they start.
///
/// The clock: as shm::token_bucket's (every process on one time line). Thread-safety: one
/// object may be used from any number of threads, as any number of processes use the
/// table; the waiting queues are behind one lock per object, taken only by requests the
/// table does not grant at once (try_acquire, and an acquire granted at once, take none).
template <class Clock = default_clock, class Executor = boost::asio::any_io_executor>
class keyed_bucket : public basic_limiter<detail::keyed_waits<Clock, Executor>, sluice::detail::local_answers<>> {
    using core_type = detail::keyed_waits<Clock, Executor>;
    using base_type = basic_limiter<core_type, sluice::detail::local_answers<>>;

public:
    /// The clock decisions are taken on.
    using clock_type = Clock;
    /// The executor of the waiting queues' timers, and the default one of completion
    /// handlers.
    using executor_type = Executor;

    /// The limiter's type on another executor type, as on Asio's I/O objects.
    template <class OtherExecutor>
    struct rebind_executor {
        /// The same limiter on another executor type.
        using other = keyed_bucket<Clock, OtherExecutor>;
    };

    /// Attaches to (or creates) the table of `where` (a segment name or segment_options),
    /// for try_acquire only; throws as shm::keyed_gcra.
    template <class Where>
        requires(std::is_convertible_v<Where, std::string_view> ||
                 std::is_convertible_v<Where, const segment_options&>) && std::default_initializable<Executor>
    keyed_bucket(Where&& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
                 std::chrono::nanoseconds slack = {})
        : base_type(std::make_shared<core_type>(
              std::make_shared<keyed_gcra>(std::forward<Where>(where), r, burst, table, slack)))
    {
    }

    /// The same, with waiting on executor `ex`: keyed_bucket(ex or io_context, where, rate, burst,
    /// [table_options], [slack], [keyed_wait_options]). Throws as shm::keyed_gcra, and
    /// system_error(error::invalid_option) for bad keyed_wait_options.
    template <class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed_bucket(const std::type_identity_t<Executor>& ex, Where&& where, sluice::rate r, std::uint64_t burst,
                 const table_options& table = {}, std::chrono::nanoseconds slack = {},
                 const keyed_wait_options& waits = {})
        : base_type(std::make_shared<core_type>(
              ex, std::make_shared<keyed_gcra>(std::forward<Where>(where), r, burst, table, slack), waits))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <sluice::detail::execution_context_ref Context, class Where>
        requires std::is_convertible_v<Where, std::string_view> || std::is_convertible_v<Where, const segment_options&>
    keyed_bucket(Context& ctx, Where&& where, sluice::rate r, std::uint64_t burst, const table_options& table = {},
                 std::chrono::nanoseconds slack = {}, const keyed_wait_options& waits = {})
        : keyed_bucket(Executor(ctx.get_executor()), std::forward<Where>(where), r, burst, table, slack, waits)
    {
    }

    /// Takes over `other`'s table and waiters; `other` may then only be destroyed or
    /// assigned to.
    keyed_bucket(keyed_bucket&&) noexcept = default;
    /// Closes this limiter (its waiters complete with error::closed), then takes over
    /// `other`'s.
    keyed_bucket& operator=(keyed_bucket&&) noexcept = default;

    /// Requests of this process waiting on `key` now.
    template <class K>
    std::size_t queued(const K& key) const
    {
        return this->state_->queued(key);
    }

    /// Keys this process keeps a waiting queue for now (at most max_waiting_keys).
    std::size_t waiting_keys() const { return this->state_->waiting_keys(); }

    /// The table: its size, shards, keys and configuration.
    keyed_gcra& table() noexcept { return this->state_->table(); }
    /// The table, read-only.
    const keyed_gcra& table() const noexcept { return this->state_->table(); }
};

} // namespace sluice::shm
