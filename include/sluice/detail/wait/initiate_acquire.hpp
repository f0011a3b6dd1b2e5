// The initiation shared by every async_acquire: build the operation, let the target pick
// the engine it waits in (a limiter's own, or a key's), hook up per-operation
// cancellation, start it there.
#pragma once

#include <sluice/detail/wait/acquire_op.hpp>
#include <sluice/error.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/system/system_error.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// Constructors taking an execution context (io_context&) instead of an executor.
template <class T>
concept execution_context_ref = std::is_convertible_v<T&, boost::asio::execution_context&>;

/// The executor an operation of `state` completes on by default. A backend built without
/// one (shm::keyed_bucket for tries only: has_executor() false) refuses every operation with
/// system_error(error::invalid_option), before anything is allocated.
template <class State>
auto operation_executor(const State& state)
{
    if constexpr (requires { state.has_executor(); }) {
        if (!state.has_executor())
            throw boost::system::system_error(make_error_code(error::invalid_option),
                                              "built without an executor: try_acquire only");
    }
    return state.get_executor();
}

/// Removes one waiting operation from its engine. A waiter has consumed nothing it cannot
/// give back, so terminal, partial and total cancellation are all honoured. The operation
/// holds the engine alive until its handler runs, which clears the slot first.
template <class Engine>
struct cancel_waiter {
    Engine* engine;
    waiter* w;

    void operator()(boost::asio::cancellation_type type)
    {
        using ct = boost::asio::cancellation_type;
        if ((type & (ct::terminal | ct::partial | ct::total)) != ct::none)
            engine->cancel(w);
    }
};

/// Hooks a waiting operation `w` of `engine` up to the cancellation `slot` of its handler.
template <class Engine, class Slot>
void cancel_in(Slot& slot, Engine* engine, waiter* w)
{
    if (slot.is_connected())
        slot.template emplace<cancel_waiter<Engine>>(engine, w);
}

/// Target is a wait_engine or a keyed limiter's core: target->start(op, n, max_wait,
/// bind, args...) either answers the operation at once or calls bind(engine) with the
/// engine it will wait in (before the operation can complete there) and starts it there.
template <class Target, class Grant = no_grant>
struct initiate_acquire {
    std::shared_ptr<Target> target;

    using executor_type = typename Target::executor_type;
    executor_type get_executor() const noexcept { return target->get_executor(); }

    template <class Handler, class... Args>
    void operator()(Handler&& handler, std::uint64_t n, std::int64_t max_wait, const Args&... args) const
    {
        using engine_type = typename Target::engine_type;
        using op_type = acquire_op<std::decay_t<Handler>, executor_type, engine_type, Grant>;
        auto slot = boost::asio::get_associated_cancellation_slot(handler);
        op_type* op = op_type::create(std::forward<Handler>(handler), operation_executor(*target));
        auto bind = [op, &slot](std::shared_ptr<engine_type> e) {
            engine_type* p = e.get();
            op->attach(std::move(e));
            cancel_in(slot, p, op);
        };
        target->start(op, n, max_wait, bind, args...);
    }
};

} // namespace sluice::detail
