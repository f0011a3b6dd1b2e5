// The waiting queue of an adaptive concurrency limit: a slot_queue whose limit a
// controller moves as operations complete. Sans-io, like slot_queue.
#pragma once

#include <sluice/adaptive_concurrency_controller.hpp>
#include <sluice/detail/slot_queue.hpp>

#include <cstdint>

namespace sluice::detail {

/// How a permit of an adaptive limit ended.
enum class sample_kind { success, dropped, ignored };

/// A slot_queue fed by an adaptive_concurrency_controller. One slot per operation: the
/// limit moves on its own, so a request for several slots could find it fallen below.
///
/// Every member is called under the owner's lock.
class adaptive_slot_queue : public slot_queue {
public:
    adaptive_slot_queue(const limiter_options& opts, const adaptive_concurrency_options& a)
        : slot_queue(opts, a.initial_limit), controller_(a)
    {
    }

    /// Returns the slot of an operation that held it since `start`, feeding the controller
    /// (unless ignored) with the slots in use, its own included; waiters that now fit are
    /// granted.
    void complete(std::int64_t start, sample_kind kind, std::int64_t now, completion_list& done)
    {
        if (kind != sample_kind::ignored) {
            const std::uint64_t limit =
                controller_.on_sample({start, now, in_use(), kind == sample_kind::dropped});
            if (limit != this->limit())
                set_limit(limit, done);
        }
        release(1, done);
    }

    const adaptive_concurrency_controller& controller() const noexcept { return controller_; }

private:
    adaptive_concurrency_controller controller_;
};

} // namespace sluice::detail
