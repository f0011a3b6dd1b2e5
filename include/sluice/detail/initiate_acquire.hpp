// The initiation shared by every async_acquire: build the operation, hook up per-operation
// cancellation, hand it to the limiter's state.
#pragma once

#include <sluice/detail/acquire_op.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution_context.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// Constructors taking an execution context (io_context&) instead of an executor.
template <class T>
concept execution_context_ref = std::is_convertible_v<T&, boost::asio::execution_context&>;

/// Removes one waiting operation from its limiter. A waiter has consumed nothing it
/// cannot give back, so terminal, partial and total cancellation are all honoured.
template <class State>
struct cancel_waiter {
    State* state;
    waiter* w;

    void operator()(boost::asio::cancellation_type type)
    {
        using ct = boost::asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) != ct::none)
            state->cancel(w);
    }
};

template <class State, class Executor>
struct initiate_acquire {
    std::shared_ptr<State> state;

    using executor_type = Executor;
    executor_type get_executor() const noexcept { return state->get_executor(); }

    template <class Handler>
    void operator()(Handler&& handler, std::uint64_t n, std::int64_t max_wait) const
    {
        using op_type = acquire_op<std::decay_t<Handler>, Executor, State>;
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        op_type* op = op_type::create(std::forward<Handler>(handler), state->get_executor(), state);
        if (slot.is_connected())
            slot.template emplace<cancel_waiter<State>>(state.get(), op);
        state->start(op, n, max_wait);
    }
};

} // namespace sluice::detail
