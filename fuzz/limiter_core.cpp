// fuzz-covers: include/sluice/redis/detail/store/shared_backend.hpp
// What every Redis limiter does with a reply whatever its script (shared_backend): replies
// read as redis_op reads them (parse_verdict, answers), link errors and the probing while
// degraded, on a manual clock. The counters add up (the tries admitted and refused), the
// clock offset is the server's now minus the middle of the round trip exactly (no
// overflow, whatever the server's clock says), the last round trip is the one measured,
// and a well-formed reply ends the degraded state while an unreachable Redis starts it.
// Bad options are refused at construction; after close() every request fails closed.
#include "fuzz.hpp"

#include <sluice/manual_clock.hpp>
#include <sluice/redis/detail/store/shared_backend.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

namespace detail = sluice::redis::detail;
using clk = sluice::basic_manual_clock<struct limiter_core_fuzz_tag>;

namespace {

struct fake_client {
    using executor_type = boost::asio::any_io_executor;
    boost::asio::io_context& io;
    executor_type get_executor() const { return io.get_executor(); }
};

struct no_fallback {
    void close() {}
};

struct core : detail::shared_backend<fake_client, clk, no_fallback> {
    core(fake_client& c, sluice::redis::shared_options o)
        : shared_backend(c, std::move(o), 1000, [](const auto&, const auto&) { return no_fallback{}; })
    {
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    boost::asio::io_context io;
    fake_client cl{io};
    sluice::redis::shared_options o;
    o.probe_interval = std::chrono::milliseconds{1 + in.byte()};
    // Options a limiter cannot run with are refused at construction.
    for (int bad = 0; bad < 3; ++bad) {
        auto b = o;
        if (bad == 0) b.expected_nodes = 0;
        if (bad == 1) b.probe_interval = std::chrono::milliseconds{0};
        if (bad == 2) b.coalesce = -std::chrono::nanoseconds{1};
        try {
            core refused(cl, b);
            FUZZ_CHECK(bad < 0);   // constructed: not refused
        } catch (const boost::system::system_error& e) {
            FUZZ_CHECK(e.code() == sluice::error::invalid_option);
        }
    }
    core c(cl, o);
    clk::set(std::chrono::nanoseconds{in.number() & ((std::int64_t{1} << 61) - 1)});
    std::uint64_t admitted = 0, rejected = 0, by_fallback = 0;
    bool closed = false;

    for (int step = 0; step < 1024 && !in.empty(); ++step) {
        clk::advance(std::chrono::nanoseconds{in.number() & ((std::int64_t{1} << 36) - 1)});
        switch (in.byte() % 4) {
        case 0: {   // a reply, as redis_op reads it, to a try
            detail::round_trip rt;
            rt.sent_us = in.number() & ((std::int64_t{1} << 52) - 1);   // system_clock, us
            rt.received_us = rt.sent_us + in.integer<std::int32_t>();  // it may step back
            auto v = detail::parse_verdict(fuzz::any_reply(in));
            if (v && !detail::answers(*v, {detail::eval_request::mode::try_now, 1, 0})) v.reset();
            if (!v) {
                c.on_error();
                break;
            }
            c.on_reply(*v, rt);
            auto s = c.stats();
            __extension__ using wide = __int128;
            const wide mid = wide(rt.sent_us) + (wide(rt.received_us) - rt.sent_us) / 2;
            FUZZ_CHECK(wide(s.backend.clock_offset.count()) == wide(v->now_us) - mid);
            FUZZ_CHECK(s.backend.last_round_trip.count() == rt.received_us - rt.sent_us);
            FUZZ_CHECK(!s.backend.degraded);
            const bool fallback = in.flag();   // (as the failure policy's answer is counted)
            c.count_try(v->admitted, fallback);
            ++(v->admitted ? admitted : rejected);
            by_fallback += fallback;
            break;
        }
        case 1:
            c.on_unavailable();
            FUZZ_CHECK(c.stats().backend.degraded);
            break;
        case 2: {   // while degraded, one request per probe interval goes to Redis
            bool a = c.route(), b = c.route();
            FUZZ_CHECK(!(a && b) || !c.stats().backend.degraded);
            break;
        }
        default: {   // a request's own errors (or close()): none reaches Redis
            const std::uint8_t b = in.byte();
            if (b % 16 == 15) {
                c.close();
                closed = true;
            }
            std::uint64_t n = b % 3 == 0 ? 0 : 1 + in.integer<std::uint16_t>();
            auto ec = c.check(n);
            FUZZ_CHECK(c.closed() == closed);
            FUZZ_CHECK(ec == (closed ? make_error_code(sluice::error::closed)
                              : n == 0 ? make_error_code(sluice::error::invalid_count)
                              : n > 1000 ? make_error_code(sluice::error::exceeds_limit)
                                         : boost::system::error_code{}));
            break;
        }
        }
        auto s = c.stats();
        FUZZ_CHECK(s.try_admitted == admitted && s.try_refused == rejected);
        FUZZ_CHECK(s.backend.fallback_decisions == by_fallback);
    }
    return 0;
}
