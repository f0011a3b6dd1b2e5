// A user's operation in flight: its handler, held apart from the work done for it, and
// the route its per-operation cancellation takes. Shared by the connection and the
// cluster.
//
// What Asio asks of a cancellation slot: its handler lives in the signal's memory and is
// called by emit() on the thread that owns the signal (the one the user's handler runs
// on); assigning, clearing or destroying that handler must never overlap an emit. The
// work the operation stands for (a command in the pipeline, a request being routed) is
// touched only on the I/O object's executor. So:
// - start() assigns the slot in the initiating call, which runs where the signal lives.
// - The slot's handler only posts to the I/O executor and holds the operation weakly: it
//   never touches the handler. The operation is examined there, where replies, timeouts
//   and close() complete it too: whichever comes first completes it, the others find it
//   done.
// - complete() takes the handler on the I/O executor and sends it, through that executor
//   (never inline), to its own associated executor; there the slot is cleared just before
//   the handler runs: on the thread that owns the signal, so never during an emit, and
//   while the signal still exists (the handler's owner keeps it until the completion).
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/detail/store/client_impl.hpp>
#include <sluice/redis/reply.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <utility>

namespace sluice::redis::detail {

class pending_op {
    struct key {};

public:
    /// Call in the initiating function (the signal's thread): takes the user's handler
    /// and, if its cancellation slot is connected, routes terminal and partial
    /// cancellation to `io_ex`. Internal operations pass a handler without a slot.
    static std::shared_ptr<pending_op> start(exec_handler h, boost::asio::any_io_executor io_ex);

    pending_op(key, exec_handler h, boost::asio::any_io_executor io_ex);
    pending_op(const pending_op&) = delete;
    pending_op& operator=(const pending_op&) = delete;

    /// On the I/O executor: the handler has been taken (replied, failed or cancelled).
    bool done() const noexcept { return !handler_; }

    /// On the I/O executor: completes the handler, unless done() already.
    void complete(boost::system::error_code ec, reply r = {});
    void complete(error e) { complete(make_error_code(e)); }

    /// The executor the operation's work runs on.
    const boost::asio::any_io_executor& io_executor() const noexcept { return io_ex_; }

private:
    exec_handler handler_;
    boost::asio::cancellation_slot slot_;   // connected only if we assigned it
    boost::asio::any_io_executor io_ex_;
};

/// An initiating function's body, from any thread: takes the handler's slot here, then
/// runs `f(op)` on `io_ex`, unless the operation was cancelled on the way.
template <class F>
void start_on(const boost::asio::any_io_executor& io_ex, exec_handler h, F f)
{
    boost::asio::dispatch(io_ex, [op = pending_op::start(std::move(h), io_ex),
                                  f = std::move(f)]() mutable {
        if (!op->done()) std::move(f)(std::move(op));
    });
}

} // namespace sluice::redis::detail
