// A Redis limiter's operation while it waits locally: a waiter node of the wait engine
// that holds the composed operation (async_compose's `self`) until the engine hands it
// out, cancels it or closes, and then resumes it with that result.
#pragma once

#include <sluice/detail/waiter.hpp>

#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <memory>
#include <type_traits>
#include <utility>

namespace sluice::redis::detail {

/// `Self` is the composed operation; it is resumed as self(error_code) on its associated
/// executor, where the node is also freed (so a cancellation, emitted there too, never
/// finds it freed). While it waits, work is counted on that executor when it is not the
/// operation's I/O executor (whose work the operation and the engine count already).
template <class Self>
class parked_op final : public sluice::detail::waiter {
public:
    using allocator_type =
        typename std::allocator_traits<boost::asio::associated_allocator_t<Self>>::template rebind_alloc<parked_op>;

    static parked_op* create(Self&& self)
    {
        allocator_type alloc(boost::asio::get_associated_allocator(self));
        parked_op* p = std::allocator_traits<allocator_type>::allocate(alloc, 1);
        try {
            return new (p) parked_op(std::move(self));
        } catch (...) {
            std::allocator_traits<allocator_type>::deallocate(alloc, p, 1);
            throw;
        }
    }

    /// Where a cancellation of the operation arrives while it waits.
    auto cancellation_slot() const noexcept { return boost::asio::get_associated_cancellation_slot(self_); }

private:
    using executor_type = boost::asio::associated_executor_t<Self>;
    using work_executor = std::decay_t<decltype(boost::asio::prefer(
        std::declval<const executor_type&>(), boost::asio::execution::outstanding_work.tracked))>;

    explicit parked_op(Self&& self)
        : self_(std::move(self)), work_(make_work(boost::asio::get_associated_executor(self_), self_.get_io_executor()))
    {
        this->complete = &do_complete;
        this->destroy = &do_destroy;
    }

    template <class IoExecutor>
    static work_executor make_work(const executor_type& ex, const IoExecutor& io_ex)
    {
        if constexpr (std::is_same_v<work_executor, executor_type> && std::is_same_v<executor_type, IoExecutor>) {
            if (ex == io_ex)
                return ex;
        }
        return boost::asio::prefer(ex, boost::asio::execution::outstanding_work.tracked);
    }

    static void free(parked_op* p) noexcept
    {
        allocator_type alloc(boost::asio::get_associated_allocator(p->self_));
        p->~parked_op();
        std::allocator_traits<allocator_type>::deallocate(alloc, p, 1);
    }

    // Runs on the operation's executor: frees the node, then resumes the operation.
    struct invoker {
        parked_op* op;

        explicit invoker(parked_op* o) noexcept : op(o) {}
        invoker(invoker&& other) noexcept : op(std::exchange(other.op, nullptr)) {}
        invoker& operator=(invoker&&) = delete;

        ~invoker()
        {
            if (op)   // dropped unrun: the executor was shut down
                free(op);
        }

        void operator()()
        {
            parked_op* o = std::exchange(op, nullptr);
            auto slot = o->cancellation_slot();
            if (slot.is_connected())
                slot.clear();
            Self self(std::move(o->self_));
            boost::system::error_code ec = o->result;
            free(o);
            self(ec);
        }
    };

    // `here`: a timer wake-up on the engine's executor, where an operation whose executor
    // is running may be resumed at once.
    static void do_complete(sluice::detail::waiter* w, bool here)
    {
        auto* op = static_cast<parked_op*>(w);
        work_executor ex = op->work_;   // the node may be freed by the time dispatch returns
        if (here)
            boost::asio::dispatch(ex, invoker(op));
        else
            boost::asio::post(ex, invoker(op));
    }

    static void do_destroy(sluice::detail::waiter* w) { free(static_cast<parked_op*>(w)); }

    Self self_;
    work_executor work_;
};

} // namespace sluice::redis::detail
