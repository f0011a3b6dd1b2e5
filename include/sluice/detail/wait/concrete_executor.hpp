// Posting and dispatching through an any_io_executor that holds an io_context's executor,
// at the cost of the io_context's own. Through the type-erased executor, each post builds
// three new any_io_executors (require blocking.never, prefer relationship.fork and the
// allocator) and calls through them, where the concrete executor does none of that. Every
// answer a local limiter gives (async_try_acquire) and every waiter it completes is one
// such post; Asio's own handler_work looks for the io_context executor inside
// any_io_executor for the same reason.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_allocator.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// A completion whose executor has been chosen already: the handler and its arguments,
/// without the handler's associated executor (posted to that executor's concrete type,
/// Asio would otherwise hop to it again through a work dispatcher), with its allocator.
template <class Handler, class... Args>
struct chosen_handler {
    Handler handler;
    std::tuple<Args...> args;

    using allocator_type = boost::asio::associated_allocator_t<Handler>;
    allocator_type get_allocator() const noexcept { return boost::asio::get_associated_allocator(handler); }

    void operator()() { std::apply(std::move(handler), std::move(args)); }
};

/// Calls f with the executor `ex` stands for: the io_context executor an any_io_executor
/// holds, else `ex` itself. One that counts work is called as the plain one of its
/// io_context: a handler posted there is counted by the io_context until it has run, and
/// `ex`, which outlives the post, holds the count until then, and a third kind of post
/// instantiated in every completion would only add to every user's compile time.
template <class Executor, class F>
void with_concrete(const Executor& ex, F&& f)
{
    if constexpr (std::is_same_v<Executor, boost::asio::any_io_executor>) {
        using plain = boost::asio::io_context::executor_type;
        using counted = std::decay_t<decltype(boost::asio::prefer(std::declval<const plain&>(),
                                                                  boost::asio::execution::outstanding_work.tracked))>;
        if (const auto* p = ex.template target<plain>())
            return std::forward<F>(f)(*p);
        if (const auto* c = ex.template target<counted>())
            return std::forward<F>(f)(c->context().get_executor());
    }
    std::forward<F>(f)(ex);
}

/// boost::asio::post(ex, handler(args...)) for a handler whose associated executor is `ex`
/// (or that has none).
template <class Executor, class Handler, class... Args>
void post_to(const Executor& ex, Handler&& handler, Args&&... args)
{
    with_concrete(ex, [&](const auto& e) {
        boost::asio::post(e, chosen_handler<std::decay_t<Handler>, std::decay_t<Args>...>{
                                 std::forward<Handler>(handler), {std::forward<Args>(args)...}});
    });
}

/// boost::asio::dispatch(ex, handler(args...)), likewise.
template <class Executor, class Handler, class... Args>
void dispatch_to(const Executor& ex, Handler&& handler, Args&&... args)
{
    with_concrete(ex, [&](const auto& e) {
        boost::asio::dispatch(e, chosen_handler<std::decay_t<Handler>, std::decay_t<Args>...>{
                                     std::forward<Handler>(handler), {std::forward<Args>(args)...}});
    });
}

} // namespace sluice::detail
