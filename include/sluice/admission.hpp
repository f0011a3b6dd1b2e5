// What a limiter admitted, as a ticket that can be settled later with the cost the work
// turned out to have.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/error.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace sluice {

namespace detail {
struct admission_access;
} // namespace detail

/// A ticket for permits a limiter admitted (try_admit, async_try_admit, async_admit), to
/// be settled once with what the work actually cost (settle, async_settle): settling lower
/// gives the difference back exactly as if only the settled cost had been asked for;
/// settling higher charges the difference as a debt that later callers wait for (never
/// refused after the fact). Each policy's header says exactly what that means for it.
///
/// Move-only. Converts to true while it holds an admission not yet settled; a ticket that
/// was refused, moved from or settled converts to false (answer() still says why a refusal
/// was one). Destroying a ticket unsettled keeps the admission at its cost: nothing to do
/// for work whose cost was known in advance.
///
/// It remembers which limiter (and key) admitted it and when, and the limiter's
/// configuration epoch: a limiter refuses with an error_code of sluice's category a ticket
/// of another limiter (error::foreign_admission), one admitted before the limiter's
/// configuration or the key's state changed (error::stale_admission), one settled already
/// (error::already_settled) and one that admitted nothing (error::not_admitted).
class admission {
public:
    /// An empty ticket: nothing admitted.
    admission() noexcept = default;

    /// Takes the ticket over; `other` is left empty (as if settled: not admitted).
    admission(admission&& other) noexcept
        : owner_(other.owner_), epoch_(other.epoch_), cost_(other.cost_), at_(other.at_), key_(std::move(other.key_)),
          answer_(other.answer_), state_(std::exchange(other.state_, state::moved))
    {
    }

    /// Takes the ticket over; the ticket assigned to is dropped (kept at its cost).
    admission& operator=(admission&& other) noexcept
    {
        if (this != &other) {
            owner_ = other.owner_;
            epoch_ = other.epoch_;
            cost_ = other.cost_;
            at_ = other.at_;
            key_ = std::move(other.key_);
            answer_ = other.answer_;
            state_ = std::exchange(other.state_, state::moved);
        }
        return *this;
    }

    admission(const admission&) = delete;
    admission& operator=(const admission&) = delete;

    /// True while the ticket holds an admission not yet settled.
    explicit operator bool() const noexcept { return state_ == state::admitted; }

    /// The permits admitted (the cost asked for); 0 when nothing was.
    std::uint64_t cost() const noexcept { return state_ == state::admitted ? cost_ : 0; }

    /// When the permits were admitted, in ns on the limiter's clock (for an admission that
    /// waited: when the limiter granted it). Meaningless unless admitted.
    std::int64_t admitted_at() const noexcept { return at_; }

    /// The key the permits were admitted for (its bytes for a non-string key); empty for a
    /// limiter of one quota.
    std::string_view key() const noexcept { return key_; }

    /// The decision that came with the ticket: remaining and reset_after when admitted,
    /// retry_after (and error) when refused. An admission that waited answers admitted with
    /// the other fields zero.
    const decision& answer() const noexcept { return answer_; }

    /// Whether it was settled already.
    bool settled() const noexcept { return state_ == state::settled; }

private:
    friend struct detail::admission_access;

    enum class state : std::uint8_t { empty, admitted, settled, moved };

    const void* owner_ = nullptr;   // the backend that admitted it
    std::uint64_t epoch_ = 0;       // the backend's configuration epoch (keyed: the key's)
    std::uint64_t cost_ = 0;
    std::int64_t at_ = 0;
    std::string key_;
    decision answer_;
    state state_ = state::empty;
};

namespace detail {

/// What the backends read and write of a ticket.
struct admission_access {
    static admission make(const void* owner, std::uint64_t epoch, std::uint64_t cost, std::int64_t at,
                          const decision& d, std::string key = {})
    {
        admission a;
        a.owner_ = owner;
        a.epoch_ = epoch;
        a.cost_ = cost;
        a.at_ = at;
        a.key_ = std::move(key);
        a.answer_ = d;
        a.state_ = d.admitted ? admission::state::admitted : admission::state::empty;
        return a;
    }

    static admission refused(const decision& d)
    {
        admission a;
        a.answer_ = d;
        return a;
    }

    static const void* owner(const admission& a) noexcept { return a.owner_; }
    static std::uint64_t epoch(const admission& a) noexcept { return a.epoch_; }
    static std::uint64_t cost(const admission& a) noexcept { return a.cost_; }
    static std::int64_t at(const admission& a) noexcept { return a.at_; }
    static const std::string& key(const admission& a) noexcept { return a.key_; }
    static bool live(const admission& a) noexcept { return a.state_ == admission::state::admitted; }
    static bool was_settled(const admission& a) noexcept { return a.state_ == admission::state::settled; }
    static void mark_settled(admission& a) noexcept { a.state_ = admission::state::settled; }

    /// Whether `a` may be settled by the backend `owner` at configuration `epoch`: empty when
    /// it may, else the error that says why not.
    static boost::system::error_code check(const admission& a, const void* owner, std::uint64_t epoch) noexcept
    {
        switch (a.state_) {
        case admission::state::empty: return make_error_code(error::not_admitted);
        case admission::state::settled:
        case admission::state::moved: return make_error_code(error::already_settled);
        case admission::state::admitted: break;
        }
        if (a.owner_ != owner) return make_error_code(error::foreign_admission);
        if (a.epoch_ != epoch) return make_error_code(error::stale_admission);
        return {};
    }
};

} // namespace detail
} // namespace sluice
