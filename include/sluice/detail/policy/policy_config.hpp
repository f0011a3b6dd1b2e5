// One policy's configuration as a value: what keyed limiters store per key (the shared
// configuration, an override) and apply to a live policy.
#pragma once

#include <sluice/error.hpp>
#include <sluice/policy/fixed_counter.hpp>
#include <sluice/policy/gcra.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/policy/slot_ring.hpp>
#include <sluice/policy/weighted_counter.hpp>
#include <sluice/rate.hpp>

#include <boost/system/system_error.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <tuple>
#include <utility>

namespace sluice::detail {

/// policy_config<P>: `type`, a tuple of P's constructor arguments; make(args...), the
/// value a limiter over P built with those arguments has; apply(p, now, c), c applied to
/// a live policy, keeping what it consumed (what it returns, the reconfigure of its queue
/// takes). Defined for the policies a keyed limiter can hold.
template <class Policy>
struct policy_config;

template <>
struct policy_config<policy::gcra> {
    using type = std::tuple<rate, std::uint64_t, std::chrono::nanoseconds>;

    static type make(rate r, std::uint64_t burst, std::chrono::nanoseconds slack = {}) { return {r, burst, slack}; }

    /// See gcra::set_rate: a debt stays the same number of permits, rescaled by the
    /// returned factor.
    static std::pair<std::int64_t, std::int64_t> apply(policy::gcra& p, std::int64_t now, const type& c)
    {
        p.set_slack(std::get<2>(c), now);
        auto factor = p.set_rate(std::get<0>(c), now);
        p.set_burst(std::get<1>(c), now);
        return factor;
    }
};

/// The window policies: a new limit applies at once; the length of a live window cannot
/// change (error::invalid_option).
template <class Policy>
    requires std::same_as<Policy, policy::fixed_counter> || std::same_as<Policy, policy::sliding_log> ||
             std::same_as<Policy, policy::weighted_counter>
struct policy_config<Policy> {
    using type = std::tuple<std::uint64_t, std::chrono::nanoseconds>;

    static type make(std::uint64_t limit, std::chrono::nanoseconds window) { return {limit, window}; }

    static void apply(Policy& p, std::int64_t, const type& c)
    {
        if (std::get<1>(c) != p.window())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }
};

/// The slot ring: a new limit at once; its slots cannot change while in use.
template <>
struct policy_config<policy::slot_ring> {
    using type = std::tuple<std::uint64_t, std::chrono::nanoseconds, std::uint32_t>;

    static type make(std::uint64_t limit, std::chrono::nanoseconds slot_duration, std::uint32_t slots)
    {
        return {limit, slot_duration, slots};
    }

    static void apply(policy::slot_ring& p, std::int64_t, const type& c)
    {
        if (std::get<1>(c) != p.slot_duration() || std::get<2>(c) != p.slots())
            throw boost::system::system_error(make_error_code(error::invalid_option));
        p.set_limit(std::get<0>(c));
    }
};

} // namespace sluice::detail
