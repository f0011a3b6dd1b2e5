// fuzz-covers: include/sluice/redis/detail/store/try_fsm.hpp include/sluice/redis/detail/store/op_fsm.hpp
// async_try_acquire's machine (try_fsm), with and without leasing, fed any interleaving of
// requests, replies (any reply, link errors, cancellation), background reservations and
// failure-policy changes. Each operation completes once, after at most one reply; a
// request answered without an error is counted exactly once as a decision, a background
// reservation never; a grant is never before its time (a try is admitted by Redis only
// with nothing to wait, a leased permit per lease_model); and the lease book has a
// reservation in flight exactly while one of the operations does (a reply that ends the
// reservation must tell the book, or the key would refuse locally forever).
#include "fake_core.hpp"

#include <sluice/redis/detail/store/try_fsm.hpp>

#include <vector>

namespace detail = sluice::redis::detail;
using detail::op_step;

namespace {

struct op {
    detail::try_fsm f;
    bool background;
    bool leasing = false;   // its call is a reservation for the book
    bool peek = false;      // async_peek's: nothing counted, nothing granted
    detail::eval_request sent{};
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::int64_t interval_us = 1 + static_cast<std::int64_t>(static_cast<std::uint64_t>(in.number()) % (std::uint64_t{1} << 51));
    fuzz::fake_core c({interval_us * 1000, std::int64_t{in.integer<std::uint16_t>()} * 1'000'000,
                       1 + std::uint64_t{in.byte()}});
    c.opts.lease_size = in.flag() ? c.lim.max_run : 0;
    c.now = in.number() & ((std::int64_t{1} << 62) - 1);
    std::vector<op> flying;

    // A finished operation: one decision or one error, counted once if it is a decision.
    auto finished = [&](const op& o, std::uint64_t decisions_before, bool via_redis_try, const detail::verdict* v) {
        const std::uint64_t decisions = c.admitted + c.rejected - decisions_before;
        if (o.background || o.peek) {
            FUZZ_CHECK(decisions == 0);
            return;
        }
        FUZZ_CHECK(decisions == (o.f.error() ? 0u : 1u));
        if (o.f.error() || !o.f.result().admitted) return;
        FUZZ_CHECK(o.f.result().retry_after.count() == 0);
        if (via_redis_try && v) FUZZ_CHECK(v->wait_us == 0);   // admitted now: nothing left to wait
    };

    for (int step = 0; step < 1024 && !in.empty(); ++step) {
        c.now += in.number() & ((std::int64_t{1} << 40) - 1);
        switch (in.byte() % 8) {
        case 0:
        case 1:
        case 2: {   // a request
            const std::uint8_t b = in.byte();
            const std::uint64_t n = b % 5;
            const bool peek = b >= 250;   // a few of the requests are peeks
            op o{peek ? detail::try_fsm::peek("k", n) : detail::try_fsm("k", n), false};
            o.peek = peek;
            const std::uint64_t before = c.admitted + c.rejected;
            const std::uint64_t granted = c.model.granted();
            auto s = o.f.start(c, c.now);
            FUZZ_CHECK(o.f.key() == "k" && o.f.count() == n);
            if (s.next == op_step::kind::eval) {
                FUZZ_CHECK(s.cancellable);
                o.leasing = s.request.how == detail::eval_request::mode::lease;
                o.sent = s.request;
                FUZZ_CHECK(peek ? !o.leasing && s.request.peek : o.leasing == c.leasing());
                flying.push_back(std::move(o));
                break;
            }
            FUZZ_CHECK(s.next == op_step::kind::post && o.f.posted());
            finished(o, before, false, nullptr);
            // Decided without Redis: by the lease book (its grants are the model's), or by
            // the failure policy.
            if (!peek && !o.f.error() && o.f.result().admitted && c.route())
                FUZZ_CHECK(c.model.granted() == granted + n);
            if (peek) FUZZ_CHECK(c.model.granted() == granted);
            break;
        }
        case 3:
        case 4:
        case 5: {   // the reply to one call in flight
            if (flying.empty()) break;
            std::size_t i = in.byte() % flying.size();
            op o = std::move(flying[i]);
            flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(i));
            auto a = fuzz::any_answer(in, o.sent);
            const std::uint64_t before = c.admitted + c.rejected;
            auto s = o.f.on_reply(c, a.ec, a.get(), a.cancelled, a.rt, c.now);
            FUZZ_CHECK(s.next == op_step::kind::complete);
            finished(o, before, !o.leasing, a.get());
            break;
        }
        case 6: {   // the background reservations the book asked for start
            for (auto k : c.prefetches) {
                op o{detail::try_fsm::prefetch("k", k), true, true};
                auto s = o.f.start(c, c.now);
                o.sent = s.request;
                FUZZ_CHECK(s.next == op_step::kind::eval && !s.cancellable);
                FUZZ_CHECK(s.request.how == detail::eval_request::mode::lease && s.request.n == k);
                flying.push_back(std::move(o));
            }
            c.prefetches.clear();
            break;
        }
        default: {   // the link's health and the failure policy change
            std::uint8_t b = in.byte();
            c.routed = b & 1;
            c.fallback_grants = b & 2;
            c.opts.on_failure = static_cast<sluice::redis::failure_policy>((b >> 2) % 3);
            break;
        }
        }
        // The book waits for a reservation exactly while one is in flight (or asked for).
        bool reserving = !c.prefetches.empty();
        for (const auto& o : flying) reserving |= o.leasing;
        FUZZ_CHECK(c.model.in_flight() == reserving);
    }
    return 0;
}
