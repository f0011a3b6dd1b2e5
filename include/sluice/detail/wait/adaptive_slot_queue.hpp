// The waiting queue of an adaptive concurrency limit: a slot_queue whose limit a
// controller moves as operations complete. Sans-io, like slot_queue.
#pragma once

#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/detail/wait/slot_queue.hpp>
#include <sluice/limiter_stats.hpp>

#include <cstdint>

namespace sluice::detail {

/// A slot_queue fed by an adaptive_concurrency_controller. A request for several slots may
/// find the limit fallen below it, and then completes with error::exceeds_limit.
///
/// Every member is called under the owner's lock.
class adaptive_slot_queue : public slot_queue {
public:
    /// What the limit is built from.
    using config_type = adaptive_concurrency_options;
    /// Permits are stamped with their admission: their latency is the sample.
    static constexpr bool samples = true;
    /// Default options are a configuration.
    static constexpr bool default_config = true;

    adaptive_slot_queue(const limiter_options& opts, const adaptive_concurrency_options& a)
        : slot_queue(opts, a.initial_limit), controller_(a)
    {
    }

    /// Returns the n slots of an operation that held them since `start`, feeding the
    /// controller (unless ignored) with the slots in use, its own included; waiters that
    /// now fit are admitted.
    void complete(std::uint64_t n, std::int64_t start, sample_kind kind, std::int64_t now, completion_list& done)
    {
        if (kind != sample_kind::ignored) {
            const std::uint64_t limit = controller_.on_sample({start, now, in_use(), kind == sample_kind::dropped});
            if (limit != this->limit())
                set_limit(limit, done);
        }
        release(n, done);
    }

    /// The controller's counters, into the adaptive group of `s`.
    void add_stats(limiter_stats& s) const noexcept { s.adaptive = controller_.stats(); }

private:
    adaptive_concurrency_controller controller_;
};

} // namespace sluice::detail
