// The process-local side of shm::keyed_bucket's waiting: a waiting queue (the engine of a single
// rate limiter over one key of the shared table) for each key this process waits on, with
// a bound on how many it keeps.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/wait/rate_engine.hpp>
#include <sluice/detail/wait/request_counters.hpp>
#include <sluice/detail/wait/waiter.hpp>
#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/limiter_stats.hpp>
#include <sluice/shm/detail/store/key_policy.hpp>
#include <sluice/shm/keyed_gcra.hpp>
#include <sluice/shm/keyed_wait_options.hpp>

#include <boost/system/system_error.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include <algorithm>
#include <concepts>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sluice::shm::detail {

/// The waiting queues of one shm::keyed_bucket in this process. The slots are committed in the
/// table (key_policy), so a key's queue here only times this process's waiters on its own
/// timer: grants across processes follow the order of reservations in the table.
template <class Clock, class Executor>
class keyed_waits {
public:
    using executor_type = Executor;
    using engine_type = sluice::detail::rate_engine<key_policy, Clock, Executor>;   // what an acquire waits in
    static constexpr bool keyed = true;   // every call names a key

    /// Tries only (no executor): every operation throws system_error(error::invalid_option).
    explicit keyed_waits(std::shared_ptr<keyed_gcra> table)
        requires std::default_initializable<Executor>
        : table_(std::move(table)), has_executor_(false)
    {
    }

    keyed_waits(const Executor& ex, std::shared_ptr<keyed_gcra> table, const keyed_wait_options& opts)
        : executor_(ex), table_(std::move(table)), opts_(opts)
    {
        if (opts.max_waiting_keys == 0)
            throw boost::system::system_error(make_error_code(error::invalid_option),
                                              "shm::keyed_wait_options::max_waiting_keys: at least 1");
        // The queue options are checked where every limiter's are: building one engine.
        engine_type(ex, opts.limiter, table_, table_->handle(std::uint64_t{0}));
        engines_.reserve(std::min<std::size_t>(opts.max_waiting_keys, 1024));
    }

    keyed_waits(const keyed_waits&) = delete;
    keyed_waits& operator=(const keyed_waits&) = delete;

    executor_type get_executor() const noexcept { return executor_; }

    /// Shadow mode, as the options say (basic_limiter carries it out).
    const shadow_options& shadow() const noexcept { return opts_.limiter.shadow; }

    /// False when built for tries only.
    bool has_executor() const noexcept { return has_executor_; }

    /// The table's decision for n permits of a string or an integer key, now.
    template <class K>
    [[gnu::always_inline]] decision try_acquire(const K& key, std::uint64_t n) noexcept
    {
        if constexpr (std::is_integral_v<K>)
            return table_->try_acquire(static_cast<std::uint64_t>(key), n, now());
        else
            return table_->try_acquire(std::string_view(key), n, now());
    }

    keyed_gcra& table() const noexcept { return *table_; }

    bool closed() const noexcept { return closed_.load(std::memory_order_acquire); }

    /// The handle of `key` (a string or an integer key).
    template <class K>
    keyed_gcra::key_handle handle(const K& key, boost::system::error_code& ec) const noexcept
    {
        if constexpr (std::is_integral_v<K>) {
            ec = {};
            return table_->handle(static_cast<std::uint64_t>(key));
        } else {
            return table_->handle(std::string_view(key), ec);
        }
    }

    // Starts an acquire for `w` on `key` (see initiate_acquire): answered here when the
    // table grants at once, without the lock (a grant never passes a waiter of any process,
    // this one's included: their slots are in the table, and to the refund rule it is
    // another commit, as one of another process); else bound to the key's queue and
    // started there.
    template <class Bind, class K>
    void start(sluice::detail::waiter* w, std::uint64_t n, std::int64_t max_wait, Bind& bind, const K& key)
    {
        if (max_wait < 0) max_wait = 0;
        w->n = n;
        boost::system::error_code ec;
        keyed_gcra::key_handle k = handle(key, ec);
        decision d;
        if (!ec && !closed_.load(std::memory_order_acquire)) {
            d = table_->try_acquire(k, n, now());
            if (d.admitted) {
                at_once_.fetch_add(1, std::memory_order_relaxed);
                w->result = {};
                w->complete(w, false);
                return;
            }
            if (d.error || max_wait == 0) ec = d.error ? d.error : make_error_code(error::timed_out);
        }
        {
            // Held while the request queues, so that the key's queue is not let go between
            // the look-up and the queueing.
            std::lock_guard lock(mutex_);
            if (closed_.load(std::memory_order_relaxed)) ec = make_error_code(error::closed);
            if (!ec) {
                auto it = engines_.find(k);
                if (it == engines_.end()) {
                    if (engines_.size() >= opts_.max_waiting_keys) let_go_idle();
                    if (engines_.size() >= opts_.max_waiting_keys)
                        ec = make_error_code(error::queue_full);
                    else
                        it = engines_.emplace(k, std::make_shared<engine_type>(executor_, opts_.limiter, table_, k)).first;
                }
                if (!ec) {
                    bind(it->second);
                    it->second->start(w, n, max_wait);
                    return;
                }
            }
            answer(w, ec);
        }
    }

    template <class K>
    std::size_t queued(const K& key) const
    {
        boost::system::error_code ec;
        keyed_gcra::key_handle k = handle(key, ec);
        if (ec) return 0;
        std::lock_guard lock(mutex_);
        auto it = engines_.find(k);
        return it == engines_.end() ? 0 : it->second->queued();
    }

    /// Keys this process keeps a waiting queue for now.
    std::size_t waiting_keys() const
    {
        std::lock_guard lock(mutex_);
        return engines_.size();
    }

    limiter_stats stats() const
    {
        std::lock_guard lock(mutex_);
        sluice::detail::request_counters sum;
        sum.add(counters_.snapshot(0));
        std::size_t waiting = 0;
        for (const auto& [k, e] : engines_) {
            limiter_stats s = e->stats();
            sum.add(s);
            waiting += s.waiting;
        }
        limiter_stats st = sum.snapshot(waiting);
        st.admitted += at_once_.load(std::memory_order_relaxed);
        st.keys.tracked = table_->size();
        st.keys.waiting = engines_.size();
        return st;
    }

    void close()
    {
        closed_.store(true, std::memory_order_release);
        std::lock_guard lock(mutex_);
        for (const auto& [k, e] : engines_) e->close();
    }

private:
    struct handle_hash {
        std::size_t operator()(const keyed_gcra::key_handle& k) const noexcept { return static_cast<std::size_t>(k.hash); }
    };
    struct handle_equal {
        bool operator()(const keyed_gcra::key_handle& a, const keyed_gcra::key_handle& b) const noexcept
        {
            bool same = a.image.size == b.image.size;
            for (std::size_t i = 0; i < 5; ++i) same &= a.image.words[i] == b.image.words[i];
            return same;
        }
    };

    static std::int64_t now() noexcept { return sluice::detail::now_ns<Clock>(); }

    // Under the lock: answers `w` at once (through its executor, never here).
    void answer(sluice::detail::waiter* w, const boost::system::error_code& ec)
    {
        w->result = ec;
        counters_.count(ec, 0);
        w->complete(w, false);
    }

    // Under the lock: lets go of every queue nobody waits in (their counts stay here). A
    // handler on its way holds its own reference.
    void let_go_idle()
    {
        boost::unordered::erase_if(engines_, [this](const auto& entry) {
            if (entry.second->queued() != 0) return false;
            counters_.add(entry.second->stats());
            return true;
        });
    }

    Executor executor_;
    std::shared_ptr<keyed_gcra> table_;
    keyed_wait_options opts_;
    bool has_executor_ = true;
    std::atomic<bool> closed_{false};
    mutable std::mutex mutex_;
    boost::unordered_flat_map<keyed_gcra::key_handle, std::shared_ptr<engine_type>, handle_hash, handle_equal> engines_;
    sluice::detail::request_counters counters_;
    // Acquires the table granted at once, counted without the lock: on a line of their
    // own, as every thread that acquires writes here.
    alignas(64) std::atomic<std::uint64_t> at_once_{0};
};

} // namespace sluice::shm::detail
