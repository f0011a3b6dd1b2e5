// State of a Redis sliding window on top of limiter_core: the sliding log script and its
// fixed arguments.
#pragma once

#include <sluice/error.hpp>
#include <sluice/keyed.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/redis/detail/limiter_core.hpp>
#include <sluice/redis/detail/op_step.hpp>
#include <sluice/redis/shared_options.hpp>
#include <sluice/redis/script.hpp>
#include <sluice/redis/scripts.hpp>
#include <sluice/sliding_window.hpp>

#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

template <class Client, class Clock>
class window_core
    : public limiter_core<Client, Clock, keyed<sluice::sliding_window<Clock, typename Client::executor_type>>>,
      public std::enable_shared_from_this<window_core<Client, Clock>> {
    using base_type = limiter_core<Client, Clock, keyed<sluice::sliding_window<Clock, typename Client::executor_type>>>;

public:
    using typename base_type::executor_type;
    using typename base_type::fallback_type;

    static constexpr bool can_lease = false;

    window_core(Client& client, std::uint64_t limit, std::chrono::nanoseconds window, shared_options opts)
        : base_type(client, std::move(opts), policy::sliding_log::max_limit,
                    [&](const executor_type& ex, const shared_options& o) {
                        std::int64_t us = to_us(window);
                        return fallback_type(ex, std::max<std::uint64_t>(1, checked_limit(limit) / o.expected_nodes),
                                             std::chrono::microseconds{us}, o.fallback);
                    }),
          script_(std::string(lua::sliding_log)),
          configure_(std::string(lua::sliding_log_configure)),
          leave_(std::string(lua::sliding_log_leave)),
          limit_(limit),
          window_us_(to_us(window)),
          limit_arg_(std::to_string(limit)),
          window_arg_(std::to_string(window_us_))
    {
    }

    const script& script_for(const eval_request& r) const noexcept
    {
        return r.how == eval_request::mode::configure ? configure_ : script_;
    }

    // The keys of every script call: the log, the configuration, the waiters' queue (one
    // hash slot).
    static std::vector<std::string> keys(const std::string& key)
    {
        return {key, key + ":cfg", key + ":q"};
    }

    // The script's arguments: this limiter's limit and window (the key's configuration in
    // Redis, when it has one, replaces them), then the request; the window never
    // reserves, every request is a try, a waiting one with its ticket.
    std::vector<std::string> args(const eval_request& r) const
    {
        if (r.how == eval_request::mode::configure)
            return {limit_arg_, window_arg_, std::to_string(r.new_count), std::to_string(r.new_span_us)};
        if (r.ticket)
            return {limit_arg_, window_arg_, std::to_string(r.n), std::string(), *r.ticket};
        return {limit_arg_, window_arg_, std::to_string(r.n)};
    }

    // A waiter's ticket, "deadline_us:n:id": the deadline on the server's clock as this
    // process estimates it (its clock offset), plus a second, only for dropping the
    // tickets of waiters that died; the id is unique across processes.
    std::string make_ticket(std::uint64_t n, std::int64_t max_wait_ns)
    {
        std::int64_t dl = system_now_us() + this->clock_offset_us() + max_wait_ns / 1000 + 1'000'000;
        char buf[96];
        std::snprintf(buf, sizeof buf, "%lld:%llu:%016llx%llx", static_cast<long long>(std::max<std::int64_t>(0, dl)),
                      static_cast<unsigned long long>(n), static_cast<unsigned long long>(id_),
                      static_cast<unsigned long long>(tickets_.fetch_add(1, std::memory_order_relaxed)));
        return buf;
    }

    // A waiter gives up its place (fire and forget).
    void leave_queue(const std::string& key, const std::string& ticket)
    {
        base_type::send(this->shared_from_this(), leave_, {key + ":q"}, {ticket});
    }

    // set_limit / set_window: the request, or the error of a bad value (bad_span for a
    // window out of range).
    static constexpr error bad_span = error::invalid_duration;
    static std::pair<eval_request, boost::system::error_code> configure_request(std::int64_t window_ns, std::uint64_t limit)
    {
        return detail::configure_request(window_ns, limit, policy::sliding_log::max_limit, lua::max_span_us, bad_span);
    }

    std::uint64_t limit() const noexcept { return limit_; }
    std::chrono::microseconds window() const noexcept { return std::chrono::microseconds{window_us_}; }

private:
    static std::uint64_t checked_limit(std::uint64_t limit)
    {
        if (limit == 0 || limit > policy::sliding_log::max_limit)
            throw boost::system::system_error(make_error_code(error::invalid_limit));
        return limit;
    }

    // The server counts in whole microseconds: the window is rounded up (never more
    // permits than asked).
    static std::int64_t to_us(std::chrono::nanoseconds window)
    {
        std::int64_t ns = window.count();
        if (ns <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        std::int64_t us = ceil_us(ns);
        if (us > lua::max_span_us)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        return us;
    }

    script script_;
    script configure_;
    script leave_;
    std::uint64_t id_ = std::random_device{}() * (std::uint64_t{1} << 32) ^ std::random_device{}();
    std::atomic<std::uint64_t> tickets_{0};
    std::uint64_t limit_;
    std::int64_t window_us_;
    std::string limit_arg_;
    std::string window_arg_;
};

} // namespace sluice::redis::detail
