// An observer of one lease_book: the slots the server granted, each with the earliest
// time it may be used as measured from the reply that granted it (received at `now`, the
// last of k slots wait_us after the server's now, one server interval apart; the server
// ran the script before the reply came, so no slot is due earlier on this side). It
// follows the book through what the book shows (expired(), held(), its decisions) and
// checks that a grant is never before its slot's time, never a slot the server did not
// grant (or granted beyond what was asked), and that one reservation at most is in
// flight.
#pragma once

#include "fuzz.hpp"

#include <sluice/redis/detail/store/lease_book.hpp>

#include <deque>

namespace fuzz {

class lease_model {
public:
    using book = sluice::redis::detail::lease_book;
    using limits = sluice::redis::detail::lease_limits;
    using verdict = sluice::redis::detail::verdict;

    __extension__ using wide = __int128;   // the model itself never overflows

    explicit lease_model(limits lim) : lim_(lim) {}

    const limits& lim() const noexcept { return lim_; }
    bool in_flight() const noexcept { return asked_ > 0; }
    /// The slots the reservation in flight asked for.
    std::uint64_t asked() const noexcept { return asked_; }

    /// Before any call on the book at `now`.
    void before(const book& b, std::int64_t now)
    {
        expired0_ = b.expired();
        held0_ = b.held(lim_, now);
    }

    /// After book.take(lim, n, now) returned t.
    void took(const book& b, std::uint64_t n, std::int64_t now, const book::take_result& t)
    {
        drop_expired(b, now);
        if (t.next == book::step::fetch) {
            FUZZ_CHECK(!in_flight());
            FUZZ_CHECK(t.count >= 1 && t.count >= n);
            FUZZ_CHECK(t.count <= std::max<std::uint64_t>(lim_.max_run, n));
            asked_ = t.count;
            return;
        }
        decided(n, now, t.d);
        prefetch(t);
    }

    /// After book.fill(lim, n, v, now, rtt) returned t, for the reservation in flight.
    void filled(const book& b, std::uint64_t n, const verdict& v, std::int64_t now, const book::take_result& t)
    {
        FUZZ_CHECK(in_flight());
        const std::uint64_t asked = asked_;
        asked_ = 0;
        if (v.admitted) {
            // The slots as the reply states them: never more than were asked for.
            const auto k = static_cast<std::uint64_t>(v.taken);
            FUZZ_CHECK(k >= 1 && k <= asked);
            if (v.interval_us > 0) spacing_ = wide(v.interval_us) * 1000;
            const wide sp = spacing_ > 0 ? spacing_ : lim_.spacing_ns;
            for (std::uint64_t i = 0; i < k; ++i)
                slots_.push_back(wide(now) + wide(v.wait_us) * 1000 - wide(k - 1 - i) * sp);
            last_run_ = k;
            state_ = v.state;
        } else if (v.interval_us > 0) {
            spacing_ = wide(v.interval_us) * 1000;
        }
        drop_expired(b, now);
        if (n > 0) decided(n, now, t.d);
        else FUZZ_CHECK(!t.d.admitted);
        if (!v.admitted) FUZZ_CHECK(!t.prefetch);
        prefetch(t);
        FUZZ_CHECK(b.held(lim_, now) <= slots_.size());
    }

    /// After book.failed().
    void failed() noexcept { asked_ = 0; }

    /// After book.close(lim, now) returned g.
    void closed(const book& b, std::int64_t now, const sluice::redis::detail::lease_give_back& g)
    {
        drop_expired(b, now);
        FUZZ_CHECK(g.count <= slots_.size());
        FUZZ_CHECK(g.count <= last_run_);
        if (g.count > 0) FUZZ_CHECK(g.state == state_);
        FUZZ_CHECK(b.held(lim_, now) == 0);
        slots_.clear();
    }

    std::uint64_t granted() const noexcept { return granted_; }

private:
    // Slots the book dropped unused: the oldest, each held more than ttl past its time.
    void drop_expired(const book& b, std::int64_t now)
    {
        const std::uint64_t n = b.expired() - expired0_;
        FUZZ_CHECK(n <= slots_.size());
        for (std::uint64_t i = 0; i < n; ++i) {
            FUZZ_CHECK(slots_.front() + lim_.ttl_ns < wide(now));
            slots_.pop_front();
        }
        expired0_ = b.expired();
    }

    void decided(std::uint64_t n, std::int64_t now, const sluice::decision& d)
    {
        if (!d.admitted) {
            FUZZ_CHECK(d.retry_after.count() > 0);
            return;
        }
        FUZZ_CHECK(d.retry_after.count() == 0);
        FUZZ_CHECK(n <= slots_.size());   // never a slot the server did not grant
        for (std::uint64_t i = 0; i < n; ++i) {
            FUZZ_CHECK(slots_.front() <= wide(now));   // never before its time
            slots_.pop_front();
        }
        granted_ += n;
    }

    void prefetch(const book::take_result& t)
    {
        if (!t.prefetch) return;
        FUZZ_CHECK(!in_flight());
        FUZZ_CHECK(t.count >= 1 && t.count <= lim_.max_run);
        asked_ = t.count;
    }

    limits lim_;
    std::deque<wide> slots_;   // earliest use of each slot the book holds, in order
    std::uint64_t asked_ = 0;          // slots the reservation in flight asked for; 0: none
    std::uint64_t expired0_ = 0;
    std::uint64_t held0_ = 0;
    std::uint64_t granted_ = 0;
    std::uint64_t last_run_ = 0;
    std::int64_t state_ = 0;
    wide spacing_ = 0;
};

} // namespace fuzz
