// A limiter core for the Redis operations' state machines (try_fsm, bucket_acquire_fsm,
// window_acquire_fsm, configure_fsm), as redis_op drives them: every call the machines
// make is counted, the lease book is real and followed by lease_model, and the replies
// come from the fuzz input the way redis_op turns them into verdicts.
#pragma once

#include "fuzz.hpp"
#include "lease_model.hpp"

#include <sluice/error.hpp>
#include <sluice/redis/detail/store/lease_book.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/asio/error.hpp>

#include <optional>
#include <string>
#include <vector>

namespace fuzz {

namespace detail = sluice::redis::detail;
using boost::system::error_code;

struct fake_core {
    static constexpr bool can_lease = true;

    explicit fake_core(detail::lease_limits lim) : lim(lim), model(lim) {}

    sluice::redis::shared_options opts;
    std::uint64_t max_count = 1000;
    bool routed = true;
    bool is_closed = false;
    bool fallback_grants = true;
    detail::lease_limits lim;
    detail::lease_book book;
    lease_model model;
    std::int64_t now = 0;

    std::uint64_t unavailable = 0, errors = 0, replies = 0;
    // Decisions, requests and tries together: admitted, or refused (a try) or timed out (a
    // request); by the failure policy. Requests started and answered (each once).
    std::uint64_t admitted = 0, rejected = 0, by_fallback = 0;
    std::uint64_t started = 0, answered = 0;
    std::vector<std::pair<std::uint64_t, std::int64_t>> refunds;
    std::vector<std::uint64_t> prefetches;   // background reservations asked for, not started yet
    std::vector<std::string> left_queue;
    int tickets = 0;

    error_code check(std::uint64_t n) const
    {
        if (is_closed) return sluice::error::closed;
        if (n == 0) return sluice::error::invalid_count;
        if (n > max_count) return sluice::error::exceeds_limit;
        return {};
    }
    bool route() const { return routed; }
    bool closed() const { return is_closed; }
    const sluice::redis::shared_options& options() const { return opts; }
    void on_unavailable() { ++unavailable; }
    void on_error() { ++errors; }
    void on_reply(const detail::verdict&, detail::round_trip) { ++replies; }
    void request_started() { ++started; }
    void count_request(const error_code& ec, std::int64_t waited)
    {
        FUZZ_CHECK(waited >= 0);
        ++answered;
        if (!ec)
            ++admitted;
        else if (ec == sluice::error::timed_out)
            ++rejected;
    }
    void count_try(bool a, bool fb)
    {
        ++(a ? admitted : rejected);
        if (fb) count_fallback();
    }
    void count_fallback() { ++by_fallback; }
    void refund(const std::string&, std::uint64_t n, std::int64_t state) { refunds.emplace_back(n, state); }
    sluice::decision fallback_try(const std::string&, std::uint64_t)
    {
        sluice::decision d;
        d.admitted = fallback_grants;
        if (!d.admitted) d.retry_after = std::chrono::milliseconds{1};
        return d;
    }
    bool leasing() const { return opts.lease_size > 0; }
    std::int64_t lease_horizon_us() const { return lim.ttl_ns / 1000; }
    detail::lease_book::take_result lease_take(const std::string&, std::uint64_t n, std::int64_t t)
    {
        model.before(book, t);
        auto r = book.take(lim, n, t);
        model.took(book, n, t, r);
        return r;
    }
    detail::lease_book::take_result lease_fill(const std::string&, std::uint64_t n, const detail::verdict& v,
                                               std::int64_t rtt, std::int64_t t)
    {
        model.before(book, t);
        auto r = book.fill(lim, n, v, t, rtt);
        model.filled(book, n, v, t, r);
        return r;
    }
    void lease_failed(const std::string&)
    {
        book.failed();
        model.failed();
    }
    void prefetch(const std::string&, std::uint64_t k) { prefetches.push_back(k); }
    std::string make_ticket(std::uint64_t n, std::int64_t) { return "9:" + std::to_string(n) + ":t" + std::to_string(++tickets); }
    void leave_queue(const std::string&, const std::string& t) { left_queue.push_back(t); }
};

/// What came back for script call `sent`: an error_code or a reply, turned into a verdict
/// as redis_op does (a verdict that cannot answer the call is not believed).
struct answer {
    error_code ec;
    std::optional<detail::verdict> v;
    bool cancelled = false;
    detail::round_trip rt;
    const detail::verdict* get() const { return v ? &*v : nullptr; }
};

inline answer any_answer(input& in, const detail::eval_request& sent)
{
    answer a;
    switch (in.byte() % 8) {
    case 0: a.ec = sluice::error::backend_unavailable; break;
    case 1: a.ec = sluice::error::backend_error; break;
    default: break;
    }
    if (!a.ec) a.v = detail::parse_verdict(any_reply(in));
    if (a.v && !detail::answers(*a.v, sent)) a.v.reset();
    a.cancelled = in.byte() % 8 == 0;
    // system_clock us; it may step back during the round trip.
    a.rt.sent_us = in.number() & ((std::int64_t{1} << 52) - 1);
    a.rt.received_us = a.rt.sent_us + in.integer<std::int32_t>();
    return a;
}

} // namespace fuzz
