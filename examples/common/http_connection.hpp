// One keep-alive HTTP/1.1 connection of the example clients (Boost.Beast), used by one
// coroutine at a time: GET a target, get the response or the kind of failure back.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace examples {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

/// Where a request failed (none: a response, of any status, was read).
enum class failure { none, connect, write, read, timeout };

inline const char* to_string(failure f)
{
    switch (f) {
    case failure::none: return "none";
    case failure::connect: return "connect";
    case failure::write: return "write";
    case failure::read: return "read";
    case failure::timeout: return "timeout";
    }
    return "?";
}

struct http_result {
    failure fail = failure::none;
    boost::system::error_code ec;
    http::response<http::string_body> response;
};

class http_connection {
public:
    http_connection(asio::any_io_executor ex, asio::ip::tcp::endpoint endpoint, std::string host)
        : stream_(std::move(ex)), endpoint_(endpoint), host_(std::move(host))
    {
    }

    bool is_open() const noexcept { return open_; }

    /// Opens the connection ahead of the first request.
    asio::awaitable<boost::system::error_code> connect(std::chrono::steady_clock::duration timeout)
    {
        stream_.expires_after(timeout);
        auto [ec] = co_await stream_.async_connect(endpoint_, asio::as_tuple(asio::use_awaitable));
        if (ec) {
            close();
            co_return ec;
        }
        stream_.socket().set_option(asio::ip::tcp::no_delay(true));
        open_ = true;
        co_return ec;
    }

    /// GETs `target`, connecting first if needed; the whole exchange must end within
    /// `timeout`. Never retries: a request is sent at most once, which a load generator
    /// counting requests at the server relies on. On a failure the connection is closed
    /// (the next get reconnects), as it is when the server does not keep it alive. The
    /// answer's body is read up to Beast's default limit for a response.
    asio::awaitable<http_result> get(const std::string& target, std::chrono::steady_clock::duration timeout)
    {
        http::request<http::empty_body> req{http::verb::get, target, 11};
        co_return co_await exchange(req, timeout, 8 * 1024 * 1024);   // Beast's default for a response
    }

    /// POSTs `body` (of `content_type`) to `target`, as get() (never retried). The answer is
    /// read only up to `body_limit` bytes of body (beyond: failure::read with
    /// http::error::body_limit): an API's answer is input from outside.
    asio::awaitable<http_result> post(const std::string& target, std::string body, std::string_view content_type,
                                      std::chrono::steady_clock::duration timeout, std::uint64_t body_limit)
    {
        http::request<http::string_body> req{http::verb::post, target, 11};
        req.set(http::field::content_type, content_type);
        req.body() = std::move(body);
        req.prepare_payload();
        co_return co_await exchange(req, timeout, body_limit);
    }

    void close()
    {
        boost::system::error_code ignored;
        stream_.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        stream_.close();
        buffer_.clear();
        open_ = false;
    }

private:
    /// One request and its answer (read up to `body_limit` bytes of body), connecting
    /// first if needed, all within `timeout`.
    template <class Body>
    asio::awaitable<http_result> exchange(http::request<Body>& req, std::chrono::steady_clock::duration timeout,
                                          std::uint64_t body_limit)
    {
        using asio::as_tuple, asio::use_awaitable;
        http_result r;
        stream_.expires_after(timeout);
        if (!open_) {
            if (auto ec = co_await connect(timeout); ec) co_return fail(r, failure::connect, ec);
            stream_.expires_after(timeout);
        }
        req.set(http::field::host, host_);
        req.set(http::field::user_agent, "sluice-example");
        req.keep_alive(true);
        if (auto [ec, n] = co_await http::async_write(stream_, req, as_tuple(use_awaitable)); ec)
            co_return fail(r, failure::write, ec);
        http::response_parser<http::string_body> parser;
        parser.body_limit(body_limit);
        if (auto [ec, n] = co_await http::async_read(stream_, buffer_, parser, as_tuple(use_awaitable)); ec)
            co_return fail(r, failure::read, ec);
        r.response = parser.release();
        if (!r.response.keep_alive()) close();
        co_return r;
    }

    http_result fail(http_result& r, failure where, boost::system::error_code ec)
    {
        r.fail = ec == beast::error::timeout ? failure::timeout : where;
        r.ec = ec;
        close();
        return std::move(r);
    }

    beast::tcp_stream stream_;
    asio::ip::tcp::endpoint endpoint_;
    std::string host_;
    beast::flat_buffer buffer_;
    bool open_ = false;
};

} // namespace examples
