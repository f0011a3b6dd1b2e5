// The asynchronous operation behind async_acquire: a waiter node holding the completion
// handler, allocated with the handler's associated allocator (Asio's recycling allocator
// when the handler has none, as Asio's own operations do).
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/wait/concrete_executor.hpp>
#include <sluice/detail/wait/waiter.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/recycling_allocator.hpp>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// What a rate limiter's handler receives besides the error_code: nothing; and what an
/// admission dropped unrun gives back: nothing either (rate permits were spent at their time).
/// A try answers with the decision itself.
struct no_grant {
    using answer_type = decision;
    using signature = void(boost::system::error_code);

    template <class State>
    [[gnu::always_inline]] static decision answer(const std::shared_ptr<State>&, const decision& d, std::uint64_t) noexcept
    {
        return d;
    }

    static decision refused(const boost::system::error_code&) noexcept { return {}; }

    template <class Engine>
    static std::tuple<> make(const boost::system::error_code&, std::uint64_t, const std::shared_ptr<Engine>&) noexcept
    {
        return {};
    }

    template <class Engine>
    static void drop(Engine&, const boost::system::error_code&, std::uint64_t) noexcept
    {
    }
};

/// One pending acquire, the waiter node of every operation that waits in a wait engine: a
/// limiter's async_acquire (`Handler` its completion handler), and a Redis limiter's
/// operation while it waits for its slot (`Handler` the composed operation, resumed as
/// handler(error_code)). Once attached, it keeps the engine it waits in alive, so that a
/// cancellation arriving after the limiter is gone still finds it. While it waits, work is
/// counted on the handler's executor: by the engine (one count while anything waits) when
/// that executor is the limiter's own, the common case, and by the operation otherwise, as
/// Asio's handler_work does. `Grant` says what the handler receives besides the error_code
/// (Grant::make) and what an admission dropped unrun gives back (Grant::drop). An operation
/// answered without an engine (a keyed limiter's fast path) has none.
template <class Handler, class IoExecutor, class Engine, class Grant>
class acquire_op final : public waiter {
public:
    using handler_executor = boost::asio::associated_executor_t<Handler, IoExecutor>;
    // A handler without an allocator of its own: Asio's recycling allocator, whose
    // per-thread cache takes malloc out of the steady state of one waiter at a time.
    using handler_allocator = boost::asio::associated_allocator_t<Handler, boost::asio::recycling_allocator<void>>;
    using allocator_type = typename std::allocator_traits<handler_allocator>::template rebind_alloc<acquire_op>;

    template <class H>
    static handler_allocator handler_alloc(const H& h) noexcept
    {
        return boost::asio::get_associated_allocator(h, boost::asio::recycling_allocator<void>());
    }

    template <class H>
    static acquire_op* create(H&& h, const IoExecutor& io_ex)
    {
        allocator_type alloc(handler_alloc(h));
        acquire_op* p = std::allocator_traits<allocator_type>::allocate(alloc, 1);
        try {
            return new (p) acquire_op(Handler(std::forward<H>(h)), io_ex);
        } catch (...) {
            std::allocator_traits<allocator_type>::deallocate(alloc, p, 1);
            throw;
        }
    }

    Handler& handler() noexcept { return handler_; }

    /// The engine this operation waits in, before it is started there.
    void attach(std::shared_ptr<Engine> e) noexcept { owner_ = std::move(e); }

private:
    // The handler's executor with work counted on it: the same type, when counting can be
    // decided at run time (any_io_executor); otherwise always the counted type.
    using work_executor = std::decay_t<decltype(boost::asio::prefer(
        std::declval<const handler_executor&>(), boost::asio::execution::outstanding_work.tracked))>;

    static work_executor make_work(const handler_executor& ex, const IoExecutor& io_ex)
    {
        if constexpr (std::is_same_v<work_executor, handler_executor> && std::is_same_v<handler_executor, IoExecutor>) {
            if (ex == io_ex)
                return ex;   // the engine counts the work of the waiters on its own executor
        }
        return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
    }

    acquire_op(Handler&& h, const IoExecutor& io_ex)
        : handler_(std::move(h)), work_(make_work(boost::asio::get_associated_executor(handler_, io_ex), io_ex))
    {
        this->complete = &do_complete;
        this->destroy = &do_destroy;
    }

    // Destroys the node and returns its memory to the handler's allocator.
    static void free(acquire_op* op) noexcept
    {
        allocator_type alloc(handler_alloc(op->handler_));
        op->~acquire_op();
        std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
    }

    // Runs on the handler's executor: the only place the node is freed, so a cancellation
    // (emitted on that executor too) never sees freed memory.
    struct invoker {
        acquire_op* op;

        using allocator_type = handler_allocator;
        allocator_type get_allocator() const noexcept { return handler_alloc(op->handler_); }

        invoker(acquire_op* o) noexcept : op(o) {}
        invoker(invoker&& other) noexcept : op(std::exchange(other.op, nullptr)) {}
        invoker& operator=(invoker&&) = delete;

        ~invoker()
        {
            if (op) {   // dropped unrun: the executor was shut down
                if (op->owner_)
                    Grant::drop(*op->owner_, op->result, op->n);
                free(op);
            }
        }

        void operator()()
        {
            acquire_op* o = std::exchange(op, nullptr);
            auto slot = boost::asio::get_associated_cancellation_slot(o->handler_);
            if (slot.is_connected())
                slot.clear();
            Handler h(std::move(o->handler_));
            auto work(std::move(o->work_));
            boost::system::error_code ec = o->result;
            std::uint64_t n = o->n;
            std::shared_ptr<Engine> owner(std::move(o->owner_));
            free(o);
            auto extra = Grant::make(ec, n, owner);
            // Let go before the handler runs: once it has (a use_future promise set on
            // Asio's system thread), the caller may destroy the limiter and its
            // io_context, and a last reference dropped after that would destroy the
            // engine's timer after its service.
            owner.reset();
            std::apply([&](auto&&... a) { std::move(h)(ec, std::move(a)...); }, std::move(extra));
        }
    };

    // `here`: the caller runs on the engine's executor, outside any initiating function
    // (a timer wake-up), so a handler whose executor is running here may run at once.
    static void do_complete(waiter* w, bool here)
    {
        auto* op = static_cast<acquire_op*>(w);
        work_executor ex = op->work_;   // the node may be freed by the time dispatch returns
        if (here)
            dispatch_to(ex, invoker(op));
        else
            post_to(ex, invoker(op));
    }

    static void do_destroy(waiter* w) { free(static_cast<acquire_op*>(w)); }

    Handler handler_;
    work_executor work_;
    std::shared_ptr<Engine> owner_;
};

} // namespace sluice::detail
