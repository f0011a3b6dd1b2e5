// The asynchronous operation behind async_acquire: a waiter node holding the completion
// handler, allocated with the handler's associated allocator.
#pragma once

#include <sluice/detail/waiter.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>

#include <memory>
#include <tuple>
#include <utility>

namespace sluice::detail {

/// What a rate limiter's handler receives besides the error_code: nothing; and what a
/// grant dropped unrun gives back: nothing either (rate permits were spent at their time).
struct no_grant {
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

/// One pending acquire. Once attached, it keeps the engine it waits in alive, so that a
/// cancellation arriving after the limiter is gone still finds it, and it tracks work on
/// the handler's executor while it waits. `Grant` says what the handler receives besides
/// the error_code (Grant::make) and what a grant dropped unrun gives back (Grant::drop).
/// An operation answered without an engine (a keyed limiter's fast path) has none.
template <class Handler, class IoExecutor, class Engine, class Grant>
class acquire_op final : public waiter {
public:
    using handler_executor = boost::asio::associated_executor_t<Handler, IoExecutor>;
    using allocator_type = typename std::allocator_traits<
        boost::asio::associated_allocator_t<Handler>>::template rebind_alloc<acquire_op>;

    template <class H>
    static acquire_op* create(H&& h, const IoExecutor& io_ex)
    {
        allocator_type alloc(boost::asio::get_associated_allocator(h));
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
    acquire_op(Handler&& h, const IoExecutor& io_ex)
        : handler_(std::move(h)), work_(boost::asio::get_associated_executor(handler_, io_ex))
    {
        this->complete = &do_complete;
        this->destroy = &do_destroy;
    }

    // Destroys the node and returns its memory to the handler's allocator.
    static void free(acquire_op* op) noexcept
    {
        allocator_type alloc(boost::asio::get_associated_allocator(op->handler_));
        op->~acquire_op();
        std::allocator_traits<allocator_type>::deallocate(alloc, op, 1);
    }

    // Runs on the handler's executor: the only place the node is freed, so a cancellation
    // (emitted on that executor too) never sees freed memory.
    struct invoker {
        acquire_op* op;

        using allocator_type = boost::asio::associated_allocator_t<Handler>;
        allocator_type get_allocator() const noexcept { return boost::asio::get_associated_allocator(op->handler_); }

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

    static void do_complete(waiter* w)
    {
        auto* op = static_cast<acquire_op*>(w);
        auto ex = op->work_.get_executor();
        boost::asio::post(ex, invoker(op));
    }

    static void do_destroy(waiter* w) { free(static_cast<acquire_op*>(w)); }

    Handler handler_;
    boost::asio::executor_work_guard<handler_executor> work_;
    std::shared_ptr<Engine> owner_;
};

} // namespace sluice::detail
