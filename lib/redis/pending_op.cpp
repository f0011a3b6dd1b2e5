#include "pending_op.hpp"

#include <boost/asio/any_completion_executor.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>

#include <utility>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// The slot's handler. It runs on the emitting thread, so it reads nothing but the
// executor (set before the slot was assigned, never changed) and leaves the rest to the
// I/O executor. Weak: a signal that outlives the operation keeps nothing alive.
struct canceller {
    std::weak_ptr<pending_op> op;

    void operator()(asio::cancellation_type t) const
    {
        if ((t & (asio::cancellation_type::terminal | asio::cancellation_type::partial))
            == asio::cancellation_type::none)
            return;
        auto p = op.lock();
        if (!p) return;
        asio::post(p->io_executor(), [w = op] {
            if (auto p = w.lock()) p->complete(asio::error::operation_aborted);
        });
    }
};

// The user's handler with its result, run on the handler's associated executor (and
// allocating with its allocator): the slot is cleared there, then the handler runs.
class completion {
public:
    completion(exec_handler h, asio::cancellation_slot slot, error_code ec, reply r,
               const asio::any_io_executor& io_ex)
        : ex_(asio::get_associated_executor(h, io_ex)), handler_(std::move(h)), slot_(slot),
          ec_(ec), reply_(std::move(r))
    {
    }

    using executor_type = asio::any_completion_executor;
    executor_type get_executor() const noexcept { return ex_; }

    using allocator_type = exec_handler::allocator_type;
    allocator_type get_allocator() const noexcept { return handler_.get_allocator(); }

    void operator()()
    {
        slot_.clear();
        std::move(handler_)(ec_, std::move(reply_));
    }

private:
    asio::any_completion_executor ex_;
    exec_handler handler_;
    asio::cancellation_slot slot_;
    error_code ec_;
    reply reply_;
};

} // namespace

pending_op::pending_op(key, exec_handler h, asio::any_io_executor io_ex)
    : handler_(std::move(h)), io_ex_(std::move(io_ex))
{
}

std::shared_ptr<pending_op> pending_op::start(exec_handler h, asio::any_io_executor io_ex)
{
    auto slot = h.get_cancellation_slot();
    auto op = std::make_shared<pending_op>(key{}, std::move(h), std::move(io_ex));
    if (slot.is_connected()) {
        op->slot_ = slot;
        slot.emplace<canceller>(canceller{op});
    }
    return op;
}

void pending_op::complete(error_code ec, reply r)
{
    if (!handler_) return;
    // Posted even from our own handlers: the caller's stack never grows, and a hiredis
    // callback never runs user code.
    asio::post(io_ex_, completion(std::move(handler_), slot_, ec, std::move(r), io_ex_));
}

} // namespace sluice::redis::detail
