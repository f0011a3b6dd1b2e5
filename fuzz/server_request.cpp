// fuzz-covers: examples/server/request_check.hpp
// The example server's handling of what a client sends (examples/server): any bytes as one
// connection's stream, read request by request as the server reads them (Beast's parser
// with the server's limits: the header first, checked, then the body), answered as the
// server answers (server_check: after_read_error, check_header, origin_form, client_of),
// and a request that may be served goes to the per-client limit (sluice::keyed token
// buckets on a manual clock). The first byte: bit 0, the peer is a trusted proxy (its
// X-Forwarded-For names the client); bits 1-7, milliseconds between two requests.
//
// Checked: every refusal is one of the statuses the server documents, with a reason, and
// only 405 keeps the connection; a request let through is a GET or HEAD with a Host (for
// HTTP/1.1), an origin-form target and no smuggling (Transfer-Encoding with
// Content-Length); the client is the peer, or (trusted peer only) an IP address in
// canonical text; no client is admitted more than burst + rate x elapsed; the limiter never
// tracks more keys than its cap. No crash, no hang (at most 64 requests a stream).
#include "fuzz.hpp"

#include "../examples/server/request_check.hpp"

#include <sluice/keyed.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <map>
#include <set>
#include <string>

namespace {

namespace http = boost::beast::http;
using clock = sluice::basic_manual_clock<struct server_request_tag>;
using per_client_limit = sluice::keyed<sluice::token_bucket<clock>>;

constexpr std::uint64_t burst = 5;
constexpr double per_second = 10;
constexpr std::size_t max_keys = 1000;   // more than 64 requests can name: no overflow

bool known_refusal(http::status s)
{
    switch (s) {
    case http::status::bad_request:
    case http::status::method_not_allowed:
    case http::status::request_timeout:
    case http::status::payload_too_large:
    case http::status::uri_too_long:
    case http::status::request_header_fields_too_large:
    case http::status::http_version_not_supported:
        return true;
    default:
        return false;
    }
}

// Feeds `stream` from `off` to the parser until it stops (the header, or the whole
// message once eager), as a read that got everything the client sent; the end of the
// stream is the client's end of stream, as Beast's read reports it.
boost::system::error_code feed(http::request_parser<http::string_body>& p, std::string_view stream, std::size_t& off,
                               bool until_done)
{
    boost::system::error_code ec;
    for (;;) {
        if (until_done ? p.is_done() : p.is_header_done()) return {};
        if (off == stream.size()) {
            if (!p.got_some()) return http::error::end_of_stream;
            p.put_eof(ec);
            return ec ? ec : boost::system::error_code{};
        }
        const std::size_t n = p.put(boost::asio::buffer(stream.data() + off, stream.size() - off), ec);
        off += n;
        if (ec == http::error::need_more) {
            ec = {};
            if (n == 0 && off < stream.size()) {
                // The parser wants more than there is before it can take any of it: the
                // rest of the stream is all that will come.
                off = stream.size();
            }
            continue;
        }
        if (ec) return ec;
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::uint8_t mode = in.byte();
    const bool trusted_peer = mode & 1;
    const auto step = std::chrono::milliseconds(mode >> 1);
    const std::string_view stream = in.rest();

    const std::string peer = "192.0.2.1";
    std::set<std::string, std::less<>> trusted;
    if (trusted_peer) trusted.insert(peer);

    static boost::asio::io_context io;   // never run: the limit is only tried
    clock::set(std::chrono::nanoseconds{0});
    sluice::keyed_options ko;
    ko.max_keys = max_keys;
    per_client_limit per_client(io, sluice::rate::per_second(per_second), burst, ko);
    std::map<std::string, std::uint64_t> admitted;

    std::size_t off = 0;
    for (int requests = 0; requests < 64 && off < stream.size(); ++requests) {
        http::request_parser<http::string_body> parser;
        parser.header_limit(8 * 1024);
        parser.body_limit(1024 * 1024);
        const std::size_t start = off;
        auto unparsed = [&] { return stream.substr(start, std::min<std::size_t>(stream.size() - start, 8192)); };

        std::optional<server_check::verdict> bad;
        if (auto ec = feed(parser, stream, off, false)) {
            bad = server_check::after_read_error(ec, parser.got_some(), !parser.get().target().empty(), unparsed());
            if (!bad) break;   // the client left
        } else {
            bad = server_check::check_header(parser.get().base());
        }
        if ((!bad || !bad->close) && !parser.is_done()) {
            parser.eager(true);
            if (auto ec = feed(parser, stream, off, true)) {
                bad = server_check::after_read_error(ec, true, true, unparsed());
                if (!bad) break;
            }
        }
        clock::advance(step);
        if (bad) {
            FUZZ_CHECK(known_refusal(bad->status));
            FUZZ_CHECK(!bad->reason.empty());
            FUZZ_CHECK(bad->close || bad->status == http::status::method_not_allowed);
            if (bad->close) break;
            continue;
        }

        auto req = parser.release();
        FUZZ_CHECK(req.method() == http::verb::get || req.method() == http::verb::head);
        FUZZ_CHECK(req.version() == 10 || req.version() == 11);
        FUZZ_CHECK(req.version() == 10 || req.count(http::field::host) == 1);
        FUZZ_CHECK(!(req.count(http::field::transfer_encoding) > 0 && req.count(http::field::content_length) > 0));
        const auto target = server_check::origin_form(std::string_view(req.target().data(), req.target().size()));
        FUZZ_CHECK(target && target->starts_with('/'));

        const std::string client = server_check::client_of(req.base(), peer, trusted);
        if (client != peer) {
            FUZZ_CHECK(trusted_peer);
            boost::system::error_code ec;
            const auto a = boost::asio::ip::make_address(client, ec);
            FUZZ_CHECK(!ec && a.to_string() == client);
        }

        const auto d = per_client.try_acquire(std::string_view(client));
        if (d.admitted) {
            const auto elapsed_s = std::chrono::duration<double>(clock::now().time_since_epoch()).count();
            FUZZ_CHECK(static_cast<double>(++admitted[client]) <= static_cast<double>(burst) + per_second * elapsed_s + 1e-9);
        }
        FUZZ_CHECK(per_client.stats().keys.tracked <= max_keys);
        if (!req.keep_alive()) break;
    }
    return 0;
}
