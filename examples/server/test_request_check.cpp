// The server's answers to requests it cannot serve, decided from raw bytes fed to Beast's
// parser as the server configures it (8 KiB of header, 1 MiB of body), without a socket.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "request_check.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <doctest/doctest.h>

#include <string>

using server_check::verdict;
namespace http = boost::beast::http;

namespace {

// Parses `raw` as the server would; returns its verdict (nullopt: it would serve it).
std::optional<verdict> judge(const std::string& raw)
{
    http::request_parser<http::string_body> p;
    p.header_limit(8 * 1024);
    p.body_limit(1024 * 1024);
    p.eager(true);
    boost::system::error_code ec;
    std::size_t used = 0;
    while (!p.is_done() && used < raw.size()) {
        auto n = p.put(boost::asio::buffer(raw.data() + used, raw.size() - used), ec);
        used += n;
        if (ec == http::error::need_more) {
            ec = {};
            if (n == 0) break;
            continue;
        }
        if (ec)
            return server_check::after_read_error(ec, p.got_some(), !p.get().target().empty(),
                                                  std::string_view(raw).substr(used));
    }
    if (!p.is_header_done()) return server_check::after_read_error(boost::beast::error::timeout, used > 0);
    return server_check::check_header(p.get().base());
}

http::status status_of(const std::string& raw)
{
    auto v = judge(raw);
    return v ? v->status : http::status::ok;
}

} // namespace

TEST_CASE("request_check: well-formed requests are served")
{
    CHECK(status_of("GET / HTTP/1.1\r\nHost: example.com\r\n\r\n") == http::status::ok);
    CHECK(status_of("HEAD /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n") == http::status::ok);
    CHECK(status_of("GET / HTTP/1.0\r\n\r\n") == http::status::ok);                   // 1.0 needs no Host
    CHECK(status_of("GET / HTTP/1.1\r\nHost:\r\n\r\n") == http::status::ok);          // empty is allowed
    CHECK(status_of("GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n") == http::status::ok);
    CHECK(status_of("GET http://h/a HTTP/1.1\r\nHost: h\r\n\r\n") == http::status::ok);   // absolute form
}

TEST_CASE("request_check: malformed requests get 400 (RFC 9112)")
{
    CHECK(status_of("GET / HTTP/1.1\r\n\r\n") == http::status::bad_request);   // no Host
    CHECK(status_of("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: a b\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h:8o\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GARBAGE\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTX/1.1\r\nHost: h\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET  / HTTP/1.1\r\nHost: h\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost h\r\n\r\n") == http::status::bad_request);   // no colon
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n") ==
          http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
                    "0\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, Chunked\r\n\r\n0\r\n\r\n") ==
          http::status::method_not_allowed);   // framing fine: refused for its method
    CHECK(status_of("GET x HTTP/1.1\r\nHost: h\r\n\r\n") == http::status::bad_request);   // no origin form
    auto v = judge("GET / HTTP/1.1\r\n\r\n");
    REQUIRE(v);
    CHECK(v->reason == "missing Host");
    CHECK(v->close);
}

TEST_CASE("request_check: versions, sizes, methods, time")
{
    CHECK(status_of("GET / HTTP/9.9\r\nHost: h\r\n\r\n") == http::status::http_version_not_supported);
    CHECK(status_of("GET / HTTP/2.0\r\nHost: h\r\n\r\n") == http::status::http_version_not_supported);
    CHECK(status_of("GET / HTTP/0.9\r\nHost: h\r\n\r\n") == http::status::http_version_not_supported);
    // Beast reads 1.0 and 1.1 only: a later 1.x is refused as well, not served as 1.1.
    CHECK(status_of("GET / HTTP/1.2\r\nHost: h\r\n\r\n") == http::status::http_version_not_supported);
    CHECK(status_of("GET / HTTP/1.x\r\nHost: h\r\n\r\n") == http::status::bad_request);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(9 * 1024, 'a') + "\r\n\r\n") ==
          http::status::request_header_fields_too_large);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nX: " + std::string(1024 * 1024, 'a') + "\r\n\r\n") ==
          http::status::request_header_fields_too_large);
    CHECK(status_of("GET /" + std::string(9 * 1024, 'a') + " HTTP/1.1\r\nHost: h\r\n\r\n") == http::status::uri_too_long);
    CHECK(status_of("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2000000\r\n\r\n") == http::status::payload_too_large);
    auto post = judge("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nab");
    REQUIRE(post);
    CHECK(post->status == http::status::method_not_allowed);
    CHECK_FALSE(post->close);   // the body was read: the connection may go on
    // Part of a request, then nothing more: 408; nothing at all: no answer, just close.
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\n") == http::status::request_timeout);
    CHECK_FALSE(server_check::after_read_error(boost::beast::error::timeout, false).has_value());
    CHECK_FALSE(server_check::after_read_error(http::error::end_of_stream, false).has_value());
    CHECK_FALSE(server_check::after_read_error(http::error::partial_message, true).has_value());
    CHECK_FALSE(server_check::after_read_error(boost::asio::error::connection_reset, true).has_value());
}

TEST_CASE("request_check: the target in origin form")
{
    using server_check::origin_form;
    CHECK(origin_form("/a?b") == std::optional<std::string_view>("/a?b"));
    CHECK(origin_form("http://h:1/a?b") == std::optional<std::string_view>("/a?b"));
    CHECK(origin_form("http://h") == std::optional<std::string_view>("/"));
    CHECK_FALSE(origin_form("*").has_value());
    CHECK_FALSE(origin_form("h/a").has_value());
}

TEST_CASE("request_check: whose excess a limiter's refusal is")
{
    using server_check::refusal;
    using server_check::refusal_of;
    // The client's own rate: 429.
    CHECK(refusal_of({}) == refusal::client_rate);
    CHECK(refusal_of(sluice::error::timed_out) == refusal::client_rate);
    // More clients waiting at once than the server tracks, or a full table of clients
    // with none idle: the server's, 503 (these answered 500 before).
    CHECK(refusal_of(sluice::error::queue_full) == refusal::overloaded);
    CHECK(refusal_of(sluice::error::shm_table_full) == refusal::overloaded);
    CHECK(refusal_of(sluice::error::shm_lock_timeout) == refusal::overloaded);   // a stopped lock holder
    CHECK(refusal_of(sluice::error::shm_truncated) == refusal::failed);
    CHECK(refusal_of(sluice::error::closed) == refusal::shutting_down);
    CHECK(refusal_of(sluice::error::backend_unavailable) == refusal::failed);
    CHECK(refusal_of(boost::asio::error::operation_aborted) == refusal::failed);
}
