// fuzz-covers: examples/server/request_check.hpp examples/server/client_identity.hpp
//
// The example server's request path (examples/server), driven as its session drives it,
// by the same functions: any bytes as one connection's stream, arriving in pieces of a
// size the input picks, read into a buffer of the server's size by request_reader (the
// header, then the verdict from after_read_error or check(), then the body, dropped); a
// request that may be served is routed (route_of), its client named (client_of, over the
// trusted networks the input lists, from X-Forwarded-For or Forwarded), limited (sluice::keyed
// token buckets on a manual clock, refusal_of on the outcome), and the connection carries
// at most request_count's requests. A request whose client awaits a 100 (Continue)
// (awaits_continue) has its body read only once it is accepted (the 100 sent); refused, the
// connection closes with the body unread.
//
// The input: a mode byte (bit 0: the peer is a trusted proxy; bit 1: the proxies write
// Forwarded; bits 2-6: milliseconds between two requests; bit 7: at the end of the stream
// the client waits, till the idle timeout, instead of closing), a byte for the size of the
// pieces (0: all at once), a line of address ranges to trust (networks::add, separated by
// spaces, ended by "\n"), then the stream.
//
// Checked: every refusal is one of the statuses the server documents, with a reason, and
// only 405 keeps the connection; a request let through is a GET or HEAD with a Host (for
// HTTP/1.1), an origin-form target, and a Transfer-Encoding only in HTTP/1.1, without
// Content-Length, chunked once and last; the reader takes every byte of a body of known
// length as it comes (the buffer never holds one); a client awaits a 100 only for an
// HTTP/1.1 request with an Expect field and a body to come, and no body is read while it
// does; a range the trusted set takes is in it;
// the
// client is the peer unless the peer is trusted, and canonical; a route names a page that
// exists and a bounded wait; no client is admitted more than burst + rate x elapsed; the
// limiter never tracks more keys than its cap; a connection carries at most its cap of
// requests. No crash, no hang.
#include "fuzz.hpp"

#include "../examples/server/client_identity.hpp"
#include "../examples/server/request_check.hpp"

#include <sluice/keyed.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <map>
#include <string>

namespace {

namespace http = boost::beast::http;
using clock = sluice::basic_manual_clock<struct server_request_tag>;
using per_client_limit = sluice::keyed<sluice::token_bucket<clock>>;
using server_check::request_reader;

constexpr std::uint64_t burst = 5;
constexpr double per_second = 10;
constexpr std::size_t max_keys = 1000;   // more than a stream's requests can name: no overflow
constexpr std::uint64_t max_requests = 16;   // --keepalive-requests
constexpr std::uint64_t pages = 100;

bool known_refusal(http::status s)
{
    switch (s) {
    case http::status::bad_request:
    case http::status::method_not_allowed:
    case http::status::request_timeout:
    case http::status::payload_too_large:
    case http::status::uri_too_long:
    case http::status::request_header_fields_too_large:
    case http::status::not_implemented:
    case http::status::http_version_not_supported:
        return true;
    default:
        return false;
    }
}

// A connection as the server's session reads it (main.cpp read_within): a buffer of
// read_buffer_size bytes, filled by reads of what has arrived, emptied by the reader.
struct connection {
    std::string_view stream;   // everything the client sends, in order
    std::size_t piece;         // bytes a read gets at most
    bool waits;                // at the end, the client waits instead of closing
    std::size_t off = 0;       // how much of the stream has been read
    std::string buf;           // read and not taken yet

    // Reads until `upto` is read; the error to answer (after_read_error), or none. At the
    // end of the stream the client closes (its end of stream), or waits for the idle
    // timeout to strike.
    boost::system::error_code read(request_reader& r, request_reader::part upto)
    {
        boost::system::error_code ec;
        for (;;) {
            buf.erase(0, r.take(buf, upto, ec));
            if (ec != http::error::need_more) return ec;
            // A body of known length is taken as it comes: none of it waits in the buffer.
            if (upto == request_reader::part::body && r.header().count(http::field::transfer_encoding) == 0)
                FUZZ_CHECK(buf.empty());
            if (buf.size() == server_check::read_buffer_size) return http::error::buffer_overflow;
            if (off == stream.size()) {
                if (waits) return boost::beast::error::timeout;
                r.end(ec);
                return ec;
            }
            const auto n = std::min({piece, stream.size() - off, server_check::read_buffer_size - buf.size()});
            buf.append(stream.substr(off, n));
            off += n;
        }
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::uint8_t mode = in.byte();
    const bool trusted_peer = mode & 1;
    const auto which = mode & 2 ? server_check::proxy_header::forwarded : server_check::proxy_header::x_forwarded_for;
    const auto step = std::chrono::milliseconds((mode >> 2) & 31);
    const bool waits = mode & 128;
    const std::size_t piece = in.byte();
    std::string_view rest = in.rest();
    const auto eol = rest.find('\n');
    std::string_view ranges = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view{} : rest.substr(eol + 1);

    const auto peer = boost::asio::ip::make_address("192.0.2.1");
    server_check::networks trusted;
    if (trusted_peer) FUZZ_CHECK(trusted.add("192.0.2.1"));
    while (!ranges.empty()) {
        const auto space = ranges.find(' ');
        const auto text = ranges.substr(0, space);
        const bool empty = trusted.empty();
        const bool added = trusted.add(text);
        FUZZ_CHECK(added || trusted.empty() == empty);   // a range refused adds nothing
        if (added) {
            // What it admits parses, and is in the set.
            const auto addr = server_check::networks::parse_plain(text.substr(0, text.find('/')));
            FUZZ_CHECK(addr && trusted.contains(*addr));
        }
        ranges = space == std::string_view::npos ? std::string_view{} : ranges.substr(space + 1);
    }

    server_check::networks metrics_allow;   // the server's default: loopback
    metrics_allow.add("127.0.0.0/8");
    metrics_allow.add("::1");

    static boost::asio::io_context io;   // never run: the limit is only tried
    clock::set(std::chrono::nanoseconds{0});
    sluice::keyed_options ko;
    ko.max_keys = max_keys;
    per_client_limit per_client(io, sluice::rate::per_second(per_second), burst, ko);
    std::map<std::string, std::uint64_t> admitted;

    connection c{rest, piece == 0 ? rest.size() + 1 : piece, waits, 0, {}};
    server_check::request_count count(max_requests);
    std::uint64_t requests = 0;
    for (;;) {
        request_reader reader;
        std::optional<server_check::verdict> bad;
        if (auto ec = c.read(reader, request_reader::part::header)) {
            bad = server_check::after_read_error(ec, reader.got_some(), reader.line_done(),
                                                 std::string_view(c.buf).substr(0, server_check::max_header));
            if (!bad) break;   // the client left, or sent nothing
        } else {
            bad = reader.check();
        }
        ++requests;
        FUZZ_CHECK(requests <= max_requests);
        clock::advance(step);
        // Expect: 100-continue: the client sends its body once it gets a 100, which only a
        // request accepted gets.
        bool awaiting = reader.header_done() && reader.awaits_continue();
        if (awaiting) {
            const auto& req = reader.header();
            FUZZ_CHECK(req.version() == 11 && req.count(http::field::expect) > 0 && !reader.done());
            FUZZ_CHECK(server_check::expects_continue(req));
        }

        // Decided from the header alone, as the server decides.
        if (!bad) {
            const auto& req = reader.header();
            FUZZ_CHECK(req.method() == http::verb::get || req.method() == http::verb::head);
            FUZZ_CHECK(req.version() == 10 || req.version() == 11);
            FUZZ_CHECK(req.version() == 10 || req.count(http::field::host) == 1);
            if (req.count(http::field::transfer_encoding) > 0) {
                FUZZ_CHECK(req.version() == 11 && req.count(http::field::content_length) == 0);
                FUZZ_CHECK(server_check::transfer_codings_of(req) == server_check::framing::chunked);
            }
            const auto target = server_check::origin_form(std::string_view(req.target().data(), req.target().size()));
            FUZZ_CHECK(target && target->starts_with('/'));
            const auto to = server_check::route_of(*target, pages);
            FUZZ_CHECK(to.what != server_check::route::kind::page || to.n < pages);
            FUZZ_CHECK(to.what != server_check::route::kind::work || to.n <= 60'000);

            const auto who = server_check::client_of(req, peer, trusted, which);
            FUZZ_CHECK(who == server_check::canonical(who));
            if (!trusted.contains(peer)) FUZZ_CHECK(who == peer);
            const std::string client = who.to_string();
            if (to.what == server_check::route::kind::metrics) {
                if (metrics_allow.contains(who)) awaiting = false;   // served: the 100 sent; else 403
            } else {
                const auto d = per_client.try_acquire(std::string_view(client));
                FUZZ_CHECK(server_check::refusal_of(d.error) == server_check::refusal::client_rate);
                if (d.admitted) {
                    awaiting = false;   // the 100 sent
                    const auto elapsed_s = std::chrono::duration<double>(clock::now().time_since_epoch()).count();
                    FUZZ_CHECK(static_cast<double>(++admitted[client]) <=
                               static_cast<double>(burst) + per_second * elapsed_s + 1e-9);
                }
                FUZZ_CHECK(per_client.stats().keys.tracked <= max_keys);
            }
        } else {
            FUZZ_CHECK(known_refusal(bad->status));
            FUZZ_CHECK(!bad->reason.empty());
            FUZZ_CHECK(bad->close || bad->status == http::status::method_not_allowed);
        }

        // Then the body, dropped as it comes, unless the connection closes after the answer
        // (a client still waiting for a 100 sends none: the answer comes, and the close).
        if (awaiting) break;
        if ((!bad || !bad->close) && !reader.done()) {
            if (auto ec = c.read(reader, request_reader::part::body)) {
                bad = server_check::after_read_error(ec, true);
                if (!bad) break;
                FUZZ_CHECK(known_refusal(bad->status) && bad->close);
            }
        }
        const bool keep = count.next() && reader.header_done() && reader.keep_alive();
        if ((bad && bad->close) || !keep) break;
    }
    return 0;
}
