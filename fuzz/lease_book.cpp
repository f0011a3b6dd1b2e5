// fuzz-covers: include/sluice/redis/detail/store/lease_book.hpp
// One lease book (the slots a process leased of one token-bucket key) fed any sequence of
// requests, times and replies to its reservations, checked by lease_model: a permit is
// never handed out before its slot's time, never one the server did not grant, one
// reservation at most is in flight, a dropped slot was held more than lease_ttl past its
// time, and close() gives back only slots of the last run against its state.
#include "fuzz.hpp"
#include "lease_model.hpp"

#include <sluice/redis/detail/store/lease_book.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

namespace detail = sluice::redis::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    // The limits a bucket_core can have: an interval of 1 us to 2^51 us, lease_ttl up to a
    // minute, lease_size >= 1.
    const std::int64_t interval_us = 1 + static_cast<std::int64_t>(static_cast<std::uint64_t>(in.number()) % (std::uint64_t{1} << 51));
    detail::lease_limits lim{interval_us * 1000, std::int64_t{in.integer<std::uint16_t>()} * 1'000'000,
                             1 + std::uint64_t{in.byte()}};
    std::int64_t now = in.number() & ((std::int64_t{1} << 62) - 1);
    detail::lease_book b;
    fuzz::lease_model m(lim);
    std::uint64_t waiting_n = 0;   // the request that made the round trip in flight (0: a prefetch)

    for (int step = 0; step < 2048 && !in.empty(); ++step) {
        now += in.number() & ((std::int64_t{1} << 40) - 1);
        m.before(b, now);
        switch (in.byte() % 4) {
        case 0:
        case 1: {
            std::uint64_t n = 1 + in.byte() % 4;
            auto t = b.take(lim, n, now);
            m.took(b, n, now, t);
            if (t.next == detail::lease_book::step::fetch) waiting_n = n;
            else if (t.prefetch) waiting_n = 0;
            break;
        }
        case 2: {
            if (!m.in_flight()) break;
            const std::int64_t rtt_ns = in.number();   // the client's clock may step: any value
            // As redis_op reads it: a verdict that cannot answer the lease is not believed.
            auto v = detail::parse_verdict(fuzz::any_reply(in));
            detail::eval_request sent{detail::eval_request::mode::lease, m.asked(), lim.ttl_ns / 1000};
            if (v && !detail::answers(*v, sent)) v.reset();
            if (!v) {
                b.failed();
                m.failed();
                break;
            }
            auto t = b.fill(lim, waiting_n, *v, now, rtt_ns);
            m.filled(b, waiting_n, *v, now, t);
            if (t.prefetch) waiting_n = 0;
            break;
        }
        default: {
            if (in.byte() % 8 != 0) break;
            auto g = b.close(lim, now);
            m.closed(b, now, g);
            return 0;
        }
        }
    }
    return 0;
}
