// Completions that need no waiting: an answer delivered through the handler's executor,
// never inside the initiating function; and the coroutine form of an acquire.
#pragma once

#include <sluice/acquire_result.hpp>
#include <sluice/detail/wait/concrete_executor.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/error_code.hpp>

#include <tuple>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// Completes `handler` with (ec, values...) through its associated executor (`io_ex`
/// when it has none), as Asio does for an operation that finishes at once.
template <class Handler, class IoExecutor, class... Values>
void post_answer(Handler&& handler, const IoExecutor& io_ex, const boost::system::error_code& ec, Values&&... values)
{
    const auto ex = boost::asio::get_associated_executor(handler, io_ex);
    post_to(ex, std::forward<Handler>(handler), ec, std::forward<Values>(values)...);
}

/// The coroutine form of an acquire: `op` is an async_acquire bound to every argument but
/// its token (a deferred operation). Its value is an acquire_result for a void(error_code)
/// completion, or the permit of a void(error_code, permit) one (an empty permit carries
/// the error); it never throws for an error_code.
template <class Op>
auto await_acquire(Op op)
{
    using tuple_type = typename decltype(std::move(op)(boost::asio::as_tuple(boost::asio::use_awaitable)))::value_type;
    if constexpr (std::tuple_size_v<tuple_type> == 1) {
        return [](Op op) -> boost::asio::awaitable<acquire_result> {
            auto [ec] = co_await std::move(op)(boost::asio::as_tuple(boost::asio::use_awaitable));
            co_return acquire_result(ec);
        }(std::move(op));
    } else {
        using permit_type = std::tuple_element_t<1, tuple_type>;
        return [](Op op) -> boost::asio::awaitable<permit_type> {
            auto result = co_await std::move(op)(boost::asio::as_tuple(boost::asio::use_awaitable));
            co_return std::move(std::get<1>(result));
        }(std::move(op));
    }
}

} // namespace sluice::detail
