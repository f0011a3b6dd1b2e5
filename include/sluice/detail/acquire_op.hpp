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
#include <utility>

namespace sluice::detail {

/// One pending acquire. It keeps the limiter's shared state alive (`Owner`), so that a
/// cancellation arriving after the limiter is gone still finds it, and tracks work on the
/// handler's executor while it waits. The owner decides what the handler receives
/// (`Owner::deliver`) and what a grant that is dropped unrun gives back (`Owner::drop`).
template <class Handler, class IoExecutor, class Owner>
class acquire_op final : public waiter {
public:
    using handler_executor = boost::asio::associated_executor_t<Handler, IoExecutor>;
    using allocator_type = typename std::allocator_traits<
        boost::asio::associated_allocator_t<Handler>>::template rebind_alloc<acquire_op>;

    template <class H>
    static acquire_op* create(H&& h, const IoExecutor& io_ex, std::shared_ptr<Owner> owner)
    {
        allocator_type alloc(boost::asio::get_associated_allocator(h));
        acquire_op* p = std::allocator_traits<allocator_type>::allocate(alloc, 1);
        try {
            return new (p) acquire_op(Handler(std::forward<H>(h)), io_ex, std::move(owner));
        } catch (...) {
            std::allocator_traits<allocator_type>::deallocate(alloc, p, 1);
            throw;
        }
    }

    Handler& handler() noexcept { return handler_; }
    Owner& owner() noexcept { return *owner_; }

private:
    acquire_op(Handler&& h, const IoExecutor& io_ex, std::shared_ptr<Owner> owner)
        : handler_(std::move(h)),
          work_(boost::asio::get_associated_executor(handler_, io_ex)),
          owner_(std::move(owner))
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
                op->owner_->drop(op->result, op->n);
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
            std::shared_ptr<Owner> owner(std::move(o->owner_));
            free(o);
            Owner::deliver(std::move(h), ec, n, std::move(owner));
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
    std::shared_ptr<Owner> owner_;
};

} // namespace sluice::detail
