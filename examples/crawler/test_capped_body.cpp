// The crawler's body reader keeps at most its cap, whatever the answer declares and however
// it is framed (Content-Length, chunked, until the connection closes), with the cap set
// after the header as the crawler sets it. Fed to Beast's parser from strings: no sockets.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "capped_body.hpp"

#include <boost/beast/http/parser.hpp>

#include <doctest/doctest.h>

#include <string>

namespace http = boost::beast::http;
using parser = http::response_parser<crawl::capped_body>;

namespace {

// Feeds the header, then sets the cap, then feeds the body in pieces of `piece` bytes, as
// the crawler's reads do. Returns the error that ended the body (none when it completed).
boost::beast::error_code feed(parser& p, const std::string& head, const std::string& body, std::size_t cap,
                              std::size_t piece = 4096, bool eof = false)
{
    p.body_limit(boost::none);
    boost::beast::error_code ec;
    REQUIRE(p.put(boost::asio::buffer(head), ec) == head.size());
    REQUIRE(!ec);
    REQUIRE(p.is_header_done());
    p.get().body().cap = cap;
    p.eager(true);
    std::string pending;   // what the parser has not taken yet (a chunk header cut in two)
    for (std::size_t at = 0; !p.is_done();) {
        if (at < body.size()) {
            const auto n = std::min(piece, body.size() - at);
            pending.append(body, at, n);
            at += n;
        } else if (pending.empty()) {
            break;
        }
        pending.erase(0, p.put(boost::asio::buffer(pending), ec));
        if (ec == http::error::need_more) {
            ec = {};
            if (at == body.size()) break;
        } else if (ec) {
            return ec;
        } else if (at == body.size() && !p.is_done() && !pending.empty()) {
            continue;
        } else if (at == body.size()) {
            break;
        }
    }
    if (eof && !p.is_done()) p.put_eof(ec);
    return ec;
}

} // namespace

TEST_CASE("capped body: a declared length larger than the cap is read up to the cap only")
{
    parser p;
    const std::string body(50'000, 'x');
    auto ec = feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 50000000\r\n\r\n", body, 1000);
    CHECK(ec == http::error::body_limit);
    CHECK(p.get().body().text == std::string(1000, 'x'));
    CHECK(p.get().body().text.capacity() < 50'000);   // the declared length reserved nothing past the cap
    CHECK_FALSE(p.is_done());
}

TEST_CASE("capped body: a body of exactly the cap is whole; one byte more is past it")
{
    {
        parser p;
        auto ec = feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", std::string(1000, 'y'), 1000, 300);
        CHECK(!ec);
        CHECK(p.is_done());
        CHECK(p.get().body().text.size() == 1000);
    }
    {
        parser p;
        auto ec = feed(p, "HTTP/1.1 200 OK\r\nContent-Length: 1001\r\n\r\n", std::string(1001, 'y'), 1000, 300);
        CHECK(ec == http::error::body_limit);
        CHECK(p.get().body().text.size() == 1000);
    }
}

TEST_CASE("capped body: chunked, and until the connection closes")
{
    std::string chunked;
    for (int i = 0; i < 100; ++i) chunked += "64\r\n" + std::string(100, 'c') + "\r\n";
    chunked += "0\r\n\r\n";
    parser p;
    auto ec = feed(p, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", chunked, 2500, 1000);
    CHECK(ec == http::error::body_limit);
    CHECK(p.get().body().text == std::string(2500, 'c'));

    parser small;
    ec = feed(small, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", chunked, 20'000, 1000);
    CHECK(!ec);
    CHECK(small.get().body().text.size() == 10'000);

    parser to_eof;
    ec = feed(to_eof, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", std::string(9000, 'e'), 4000, 1000, true);
    CHECK(ec == http::error::body_limit);
    CHECK(to_eof.get().body().text.size() == 4000);
}
