// The server's answers to requests it cannot serve, decided from raw bytes fed to the
// server's own request_reader (8 KiB of header, 1 MiB of body, the body dropped as it
// comes), without a socket; and its routing, and its cap on requests per connection.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "request_check.hpp"

#include <boost/asio/error.hpp>
#include <doctest/doctest.h>

#include <string>

using server_check::request_reader;
using server_check::verdict;
namespace http = boost::beast::http;

namespace {

// Feeds `raw` to a request_reader `piece` bytes at a time, as the server's read loop does
// (what the reader did not take stays in front of the next bytes): the header, then, unless
// the verdict closes the connection, the body. Returns the verdict (nullopt: it would serve
// it); a request that stops short is one whose rest never comes (408).
std::optional<verdict> judge(const std::string& raw, std::size_t piece = std::string::npos, request_reader* out = nullptr)
{
    request_reader local;
    request_reader& r = out ? *out : local;
    std::string pending;
    std::size_t fed = 0;
    auto read = [&](request_reader::part upto) -> boost::system::error_code {
        for (;;) {
            boost::system::error_code ec;
            pending.erase(0, r.take(pending, upto, ec));
            if (ec != http::error::need_more) return ec;
            if (fed == raw.size()) return boost::beast::error::timeout;
            const auto n = std::min(piece, raw.size() - fed);
            pending.append(raw, fed, n);
            fed += n;
        }
    };
    if (auto ec = read(request_reader::part::header))
        return server_check::after_read_error(ec, r.got_some(), r.line_done(), pending);
    auto v = r.check();
    if (v && v->close) return v;
    if (auto ec = read(request_reader::part::body)) return server_check::after_read_error(ec, true);
    return v;
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

TEST_CASE("request_check: Transfer-Encoding (RFC 9112 6.1, 6.3)")
{
    const std::string get = "GET / HTTP/1.1\r\nHost: h\r\n";
    auto te = [&](const std::string& fields, const std::string& body = "0\r\n\r\n") { return judge(get + fields + "\r\n" + body); };
    // Readable: chunked once, last, after codings the server knows; lines are one list.
    CHECK_FALSE(te("Transfer-Encoding: chunked\r\n").has_value());
    CHECK_FALSE(te("Transfer-Encoding: gzip, chunked\r\n").has_value());
    CHECK_FALSE(te("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n").has_value());
    CHECK_FALSE(te("Transfer-Encoding: , chunked ,\r\n").has_value());   // empty elements skipped
    CHECK_FALSE(te("Transfer-Encoding: CHUNKED\r\n", "3\r\nabc\r\n0\r\n\r\n").has_value());
    // The length cannot be known: 400, and the connection closes.
    for (std::string fields : {"Transfer-Encoding: chunked, chunked\r\n", "Transfer-Encoding: chunked, gzip\r\n",
                               "Transfer-Encoding: gzip\r\n", "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                               "Transfer-Encoding: chunked, gzip\r\nTransfer-Encoding: chunked\r\n",
                               "Transfer-Encoding: chunked;q=1\r\n", "Transfer-Encoding: gzip x, chunked\r\n",
                               "Transfer-Encoding: \"chunked\"\r\n"}) {
        CAPTURE(fields);
        auto v = te(fields);
        REQUIRE(v);
        CHECK(v->status == http::status::bad_request);
        CHECK(v->close);
    }
    auto twice = te("Transfer-Encoding: chunked, chunked\r\n");
    REQUIRE(twice);
    CHECK(twice->reason == "Transfer-Encoding must end in chunked, once");
    auto param = te("Transfer-Encoding: chunked;q=1\r\n");
    REQUIRE(param);
    CHECK(param->reason == "malformed Transfer-Encoding");
    // A coding the server does not know: 501 (close: its body cannot be read).
    for (std::string fields : {"Transfer-Encoding: foo\r\n", "Transfer-Encoding: foo, chunked\r\n",
                               "Transfer-Encoding: identity, chunked\r\n", "Transfer-Encoding: br\r\nTransfer-Encoding: chunked\r\n"}) {
        CAPTURE(fields);
        auto v = te(fields);
        REQUIRE(v);
        CHECK(v->status == http::status::not_implemented);
        CHECK(v->close);
    }
    // HTTP/1.0 with Transfer-Encoding: the framing is faulty, even with chunked alone.
    auto old = judge("GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    REQUIRE(old);
    CHECK(old->status == http::status::bad_request);
    CHECK(old->reason == "Transfer-Encoding in HTTP/1.0");
    CHECK(old->close);
    CHECK(status_of("GET / HTTP/1.0\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc") == http::status::bad_request);
}

TEST_CASE("request_check: obs-fold is refused (RFC 9112 5.2)")
{
    for (std::string raw : {"GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n two\r\n\r\n",
                            "GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n\ttwo\r\n\r\n",
                            "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n0\r\n\r\n"}) {
        CAPTURE(raw);
        // Whole, and a byte at a time (the line break and the space in two pieces).
        for (std::size_t piece : {std::string::npos, std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
            CAPTURE(piece);
            auto v = judge(raw, piece);
            REQUIRE(v);
            CHECK(v->status == http::status::bad_request);
            CHECK(v->reason == "obsolete line folding");
            CHECK(v->close);
        }
    }
    // A space in a value, or in the body after the header, is no fold.
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nX-A: one two\r\n\r\n") == http::status::ok);
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\n \r\n") == http::status::ok);
    CHECK_FALSE(judge("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n\r\n\r\n \t", 1).has_value());
}

TEST_CASE("request_check: the header is read and decided on before any of the body")
{
    const std::string head = "GET /api/x HTTP/1.1\r\nHost: h\r\nContent-Length: 1048576\r\n\r\n";
    request_reader r;
    boost::system::error_code ec;
    const std::string first = head + std::string(1000, 'x');
    // The header alone: taken, and what follows it left for the body's turn.
    CHECK(r.take(first, request_reader::part::header, ec) == head.size());
    CHECK_FALSE(ec);
    REQUIRE(r.header_done());
    CHECK_FALSE(r.done());
    CHECK_FALSE(r.check().has_value());
    CHECK(r.header().target() == "/api/x");
    // The body: every byte taken as it comes, so the caller's buffer never holds it (the
    // reader keeps none either: discard_body), and more wanted until the last one.
    std::size_t left = 1024 * 1024;
    CHECK(r.take(std::string_view(first).substr(head.size()), request_reader::part::body, ec) == 1000);
    CHECK(ec == http::error::need_more);
    left -= 1000;
    const std::string piece(64 * 1024, 'y');
    while (left > piece.size()) {
        CHECK(r.take(piece, request_reader::part::body, ec) == piece.size());
        CHECK(ec == http::error::need_more);
        left -= piece.size();
    }
    // The last bytes and the next request: only the body's are taken.
    const std::string next = "GET / HTTP/1.1\r\nHost: h\r\n\r\n";
    CHECK(r.take(std::string(left, 'z') + next, request_reader::part::body, ec) == left);
    CHECK_FALSE(ec);
    CHECK(r.done());
    CHECK(r.keep_alive());
    // A body that stops short: the client's end of stream is a partial message.
    request_reader cut;
    cut.take(head + "abc", request_reader::part::body, ec);
    CHECK(ec == http::error::need_more);
    cut.end(ec);
    CHECK(ec == http::error::partial_message);
    request_reader none;
    none.end(ec);
    CHECK(ec == http::error::end_of_stream);
    // Chunked, a byte at a time (the last chunk alone too: Boost 1.81's parser asserted on
    // "0" CRLF and one more byte); past 1 MiB in chunks, 413.
    for (std::size_t piece : {1, 2, 3, 4}) {
        CAPTURE(piece);
        CHECK_FALSE(judge("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", piece).has_value());
        CHECK_FALSE(judge("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX: y\r\n\r\n", piece)
                        .has_value());
    }
    CHECK(status_of("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r") ==
          http::status::request_timeout);   // 4 bytes of the last chunk's 5, and no more
    CHECK_FALSE(judge("GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", 1)
                    .has_value());
    std::string big = "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 17; ++i) big += "10000\r\n" + std::string(0x10000, 'a') + "\r\n";
    CHECK(status_of(big + "0\r\n\r\n") == http::status::payload_too_large);
    // A refused method's body is read (and dropped) too: the connection goes on.
    request_reader post;
    auto v = judge("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello", 2, &post);
    REQUIRE(v);
    CHECK(v->status == http::status::method_not_allowed);
    CHECK_FALSE(v->close);
    CHECK(post.done());
}

TEST_CASE("request_check: Expect: 100-continue (RFC 9110 10.1.1)")
{
    // Read as the server reads it: the header, then whether the client waits for a 100.
    auto awaits = [](const std::string& head) {
        request_reader r;
        boost::system::error_code ec;
        r.take(head, request_reader::part::header, ec);
        REQUIRE_FALSE(ec);
        REQUIRE(r.header_done());
        return r.awaits_continue();
    };
    const std::string get = "GET / HTTP/1.1\r\nHost: h\r\n";
    CHECK(awaits(get + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    CHECK(awaits(get + "Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n\r\n"));
    CHECK(awaits(get + "Expect: foo, 100-continue\r\nContent-Length: 5\r\n\r\n"));   // one list
    CHECK(awaits(get + "Expect: foo\r\nExpect: ,100-continue \r\nContent-Length: 5\r\n\r\n"));
    CHECK(awaits("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    // No body to come, an HTTP/1.0 request (whose expectation is ignored), another
    // expectation, or something close to it: nobody waits.
    CHECK_FALSE(awaits(get + "Expect: 100-continue\r\n\r\n"));
    CHECK_FALSE(awaits(get + "Expect: 100-continue\r\nContent-Length: 0\r\n\r\n"));
    CHECK_FALSE(awaits("GET / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"));
    CHECK_FALSE(awaits(get + "Expect: foo\r\nContent-Length: 5\r\n\r\n"));
    CHECK_FALSE(awaits(get + "Expect: 100-continue=1\r\nContent-Length: 5\r\n\r\n"));
    CHECK_FALSE(awaits(get + "Expect: 100-continued\r\nContent-Length: 5\r\n\r\n"));
    CHECK_FALSE(awaits(get + "Content-Length: 5\r\n\r\n"));

    // Step by step: the header is read and decided on with none of the body; once the
    // 100 is sent, the body is read as any other (and the client may have sent it already).
    request_reader r;
    boost::system::error_code ec;
    const std::string head = get + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n";
    CHECK(r.take(head + "hel", request_reader::part::header, ec) == head.size());
    CHECK_FALSE(ec);
    CHECK_FALSE(r.check().has_value());
    CHECK(r.awaits_continue());
    CHECK(r.take("hel", request_reader::part::body, ec) == 3);
    CHECK(ec == http::error::need_more);
    CHECK(r.take("lo", request_reader::part::body, ec) == 2);
    CHECK_FALSE(ec);
    CHECK(r.done());
    CHECK_FALSE(r.awaits_continue());   // nothing left to wait for
    // Refused from its header (here its method): the verdict would keep the connection
    // after reading the body, but a client that waits for a 100 sends no body: the server
    // answers at once and closes (main.cpp), which is what awaits_continue() tells it.
    request_reader post;
    CHECK(post.take("POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n",
                    request_reader::part::header, ec) > 0);
    auto v = post.check();
    REQUIRE(v);
    CHECK(v->status == http::status::method_not_allowed);
    CHECK(post.awaits_continue());
    // A body past 1 MiB is refused from its Content-Length, 413, before any 100.
    auto big = judge(get + "Expect: 100-continue\r\nContent-Length: 2000000\r\n\r\n");
    REQUIRE(big);
    CHECK(big->status == http::status::payload_too_large);
    CHECK(big->close);
}

TEST_CASE("request_check: no room in the read budget is 503, and the connection closes")
{
    auto v = server_check::after_read_error(make_error_code(boost::system::errc::not_enough_memory), false);
    REQUIRE(v);
    CHECK(v->status == http::status::service_unavailable);
    CHECK(v->close);
    v = server_check::after_read_error(make_error_code(boost::system::errc::not_enough_memory), true, false, "GET /");
    REQUIRE(v);
    CHECK(v->status == http::status::service_unavailable);
}

TEST_CASE("request_check: routes and their queries")
{
    using server_check::route;
    using server_check::route_of;
    using kind = route::kind;
    CHECK(route_of("/", 10) == route{kind::index});
    CHECK(route_of("/?x=1", 10) == route{kind::index});
    CHECK(route_of("/robots.txt", 10) == route{kind::robots});
    CHECK(route_of("/metrics", 10) == route{kind::metrics});
    CHECK(route_of("/metrics?x", 10) == route{kind::metrics});
    CHECK(route_of("/site/9", 10) == route{kind::page, 9});
    CHECK(route_of("/site/10", 10) == route{kind::no_page});
    CHECK(route_of("/site/-1", 10) == route{kind::no_page});
    CHECK(route_of("/site/1x", 10) == route{kind::no_page});
    CHECK(route_of("/site/99999999999999999999999", 10) == route{kind::no_page});
    CHECK(route_of("/api/x", 10) == route{kind::api});
    CHECK(route_of("/api/", 10) == route{kind::api});
    CHECK(route_of("/api", 10) == route{kind::not_found});
    CHECK(route_of("/elsewhere", 10) == route{kind::not_found});
    CHECK(route_of("/api/work", 10) == route{kind::work, 0});
    CHECK(route_of("/api/work?ms=250", 10) == route{kind::work, 250});
    CHECK(route_of("/api/work?a=1&ms=60000&ms=x", 10) == route{kind::work, 60000});   // the first ms
    CHECK(route_of("/api/work?xms=5", 10) == route{kind::work, 0});   // another parameter
    CHECK(route_of("/api/work?ms=60001", 10) == route{kind::bad_query});
    CHECK(route_of("/api/work?ms=", 10) == route{kind::bad_query});
    CHECK(route_of("/api/work?ms=1e3", 10) == route{kind::bad_query});
    CHECK(route_of("/api/work?&&ms=7&", 10) == route{kind::work, 7});
}

TEST_CASE("request_check: a connection carries its cap of requests, no more")
{
    server_check::request_count one(1);
    CHECK_FALSE(one.next());   // the first answer closes
    server_check::request_count three(3);
    CHECK(three.next());
    CHECK(three.next());
    CHECK_FALSE(three.next());
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
