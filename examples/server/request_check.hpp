// What the server answers a request that it cannot serve as written (RFC 9110, RFC 9112):
// a framing or syntax error, a header too large, a missing or repeated Host, a version it
// does not speak, a method it does not serve, a request too slow to arrive. Sans-io: it
// looks at Beast's parse error and at the parsed header, and says which status to send and
// whether the connection must close after it. And the rest of a request's way through the
// server without a socket: request_reader reads one off the bytes received (the header
// first, then the body, dropped as it comes) and says whether its client waits for a
// 100 (Continue), route_of says what its target asks for, request_count how many a
// connection carries, refusal_of whose excess a refusal by the client's limiter is. Who
// the client is: client_identity.hpp; the memory for reading: read_budget.hpp; closing
// after a refusal: lingering_close.hpp.
#pragma once

#include <sluice/error.hpp>

#include "../common/flags.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/optional/optional.hpp>
#include <boost/system/errc.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace server_check {

namespace http = boost::beast::http;

struct verdict {
    http::status status;
    std::string reason;   // the body, one line
    /// Close after answering: the request's framing cannot be trusted (RFC 9112 section
    /// 6.3), or the rest of it will not come.
    bool close = true;
};

/// Whether the request line in `start` ends in a well-formed version, "HTTP/" DIGIT "."
/// DIGIT: Beast's parser reads 1.0 and 1.1 only, and calls any other version, as it calls
/// garbage, bad_version.
inline bool well_formed_version(std::string_view start)
{
    auto eol = start.find("\r\n");
    if (eol == std::string_view::npos || eol < 8) return false;
    auto v = start.substr(eol - 8, 8);
    return v.substr(0, 5) == "HTTP/" && std::isdigit(static_cast<unsigned char>(v[5])) && v[6] == '.' &&
           std::isdigit(static_cast<unsigned char>(v[7])) && start[eol - 9] == ' ';
}

/// The answer to a read that failed with `ec` after `got_some` bytes of a request arrived;
/// `line_done` says whether its request line was parsed (to tell a request line too long
/// from header fields too large), `unparsed` is what the buffer holds that the parser has
/// not taken (the request line, when it could not be parsed). nullopt when there is nobody
/// to answer: the client went away or stayed idle. Out of memory to read the request
/// (errc::not_enough_memory: the server's read budget has no room for it, read_budget.hpp)
/// is 503: the server's excess, not the request's fault, and another try may well pass.
inline std::optional<verdict> after_read_error(boost::system::error_code ec, bool got_some, bool line_done = true,
                                               std::string_view unparsed = {})
{
    if (ec == boost::system::errc::not_enough_memory)
        return verdict{http::status::service_unavailable, "server busy: no room to read the request"};
    if (ec == boost::beast::error::timeout)   // RFC 9110 15.5.9: not complete in the time allowed
        return got_some ? std::optional<verdict>(verdict{http::status::request_timeout, "request timeout"}) : std::nullopt;
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        // RFC 9112 3: a request line longer than the server accepts is 414; the fields, 431
        // (RFC 6585 5).
        if (!line_done) return verdict{http::status::uri_too_long, "request line too long"};
        return verdict{http::status::request_header_fields_too_large, "request header fields too large"};
    }
    if (ec == http::error::body_limit) return verdict{http::status::payload_too_large, "request body too large"};
    if (ec == http::error::bad_version && well_formed_version(unparsed))   // RFC 9110 15.6.6
        return verdict{http::status::http_version_not_supported, "HTTP/1.0 and HTTP/1.1 only"};
    if (ec.category() == http::make_error_code(http::error::bad_method).category() && ec != http::error::end_of_stream &&
        ec != http::error::partial_message && ec != http::error::need_more && ec != http::error::short_read)
        return verdict{http::status::bad_request, "bad request: " + ec.message()};
    return std::nullopt;   // end of stream, reset, a connection closed by the server itself
}

/// The request-target in origin form ("/path?query"): an absolute-form target
/// ("http://host/path", which RFC 9112 3.2.2 asks origin servers to accept) loses its
/// scheme and authority; nullopt when the target is neither (nor "*" for OPTIONS).
inline std::optional<std::string_view> origin_form(std::string_view target)
{
    if (target.starts_with('/')) return target;
    for (std::string_view scheme : {"http://", "https://"}) {
        if (target.size() > scheme.size() && target.substr(0, scheme.size()) == scheme) {
            auto rest = target.substr(scheme.size());
            auto slash = rest.find_first_of("/?");
            if (slash == std::string_view::npos) return std::string_view("/");
            if (rest[slash] == '?') return std::nullopt;   // "http://h?q": no path to route
            return rest.substr(slash);
        }
    }
    return std::nullopt;
}

/// Whether v is a valid Host field value: uri-host [ ":" port ], empty allowed (RFC 9112 3.2).
inline bool valid_host(std::string_view v)
{
    if (v.starts_with('[')) {   // IP-literal
        auto end = v.find(']');
        if (end == std::string_view::npos) return false;
        for (char c : v.substr(1, end - 1))
            if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return false;
        v.remove_prefix(end + 1);
        if (v.empty()) return true;
        if (v.front() != ':') return false;
        v.remove_prefix(1);
        for (char c : v)
            if (!std::isdigit(static_cast<unsigned char>(c))) return false;
        return true;
    }
    auto colon = v.rfind(':');
    auto host = v.substr(0, colon);
    for (char c : host)
        if (!std::isalnum(static_cast<unsigned char>(c)) && std::string_view("-._~!$&'()*+,;=%").find(c) == std::string_view::npos)
            return false;
    if (colon != std::string_view::npos)
        for (char c : v.substr(colon + 1))
            if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

/// Calls f on each element of the comma-separated list in a field line (RFC 9110 5.6.1),
/// without its leading and trailing whitespace, empty elements skipped, until f returns
/// false; returns false if f did.
template <class F>
bool each_element(std::string_view line, F&& f)
{
    for (;;) {
        const auto comma = line.find(',');
        auto e = line.substr(0, comma);
        while (!e.empty() && (e.front() == ' ' || e.front() == '\t')) e.remove_prefix(1);
        while (!e.empty() && (e.back() == ' ' || e.back() == '\t')) e.remove_suffix(1);
        if (!e.empty() && !f(e)) return false;
        if (comma == std::string_view::npos) return true;
        line.remove_prefix(comma + 1);
    }
}

/// What a request's Transfer-Encoding says of its framing.
enum class framing {
    chunked,          // chunked, once, last, after codings the server knows: readable
    malformed,        // an element that is not a bare token (a parameter, garbage)
    unknown_coding,   // a coding the server does not know
    unknown_length,   // chunked not last, or more than once: where the body ends is unknown
};

/// Every Transfer-Encoding line of `h` read as one list (RFC 9110 5.3), empty elements
/// skipped (5.6.1). Stricter than Beast's parser, which stops reading a line at its first
/// element that is not a token and decides from what it read until then: what passes here
/// is read by Beast as chunked too, so the two never disagree on where the body ends.
template <class Fields>
framing transfer_codings_of(const http::request_header<Fields>& h)
{
    static constexpr std::string_view known[] = {"chunked", "gzip", "deflate", "compress", "x-gzip", "x-compress"};
    std::size_t chunked = 0;
    bool chunked_last = false, unknown = false;
    auto [first, last] = h.equal_range(http::field::transfer_encoding);
    for (auto it = first; it != last; ++it) {
        const bool tokens = each_element(std::string_view(it->value().data(), it->value().size()), [&](std::string_view e) {
            if (!std::all_of(e.begin(), e.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) ||
                           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
                }))
                return false;
            const auto is = [e](std::string_view name) { return boost::beast::iequals(e, name); };
            chunked_last = is("chunked");
            chunked += chunked_last;
            unknown = unknown || std::none_of(std::begin(known), std::end(known), is);
            return true;
        });
        if (!tokens) return framing::malformed;
    }
    if (unknown) return framing::unknown_coding;
    return chunked == 1 && chunked_last ? framing::chunked : framing::unknown_length;
}

/// Whether a request asks for a 100 (Continue) before it sends its body: an Expect field
/// of an HTTP/1.1 request with 100-continue among its elements, in any case (RFC 9110
/// 10.1.1; an HTTP/1.0 request's expectation is ignored, as the RFC asks, and other
/// expectations, which the server may refuse with 417, are ignored too).
template <class Fields>
bool expects_continue(const http::request_header<Fields>& h)
{
    if (h.version() < 11) return false;
    auto [first, last] = h.equal_range(http::field::expect);
    for (auto it = first; it != last; ++it)
        if (!each_element(std::string_view(it->value().data(), it->value().size()),
                          [](std::string_view e) { return !boost::beast::iequals(e, "100-continue"); }))
            return true;
    return false;
}

/// The answer to a request whose header parsed but which the server will not serve as is;
/// nullopt when it may be served.
template <class Fields>
std::optional<verdict> check_header(const http::request_header<Fields>& h)
{
    if (h.count(http::field::transfer_encoding) > 0) {
        // RFC 9112 6.1: in HTTP/1.0 the framing is faulty, whatever else the request says.
        if (h.version() < 11) return verdict{http::status::bad_request, "Transfer-Encoding in HTTP/1.0"};
        // With a Content-Length too: a request smuggling attempt, as often as not (6.1).
        if (h.find(http::field::content_length) != h.end())
            return verdict{http::status::bad_request, "both Transfer-Encoding and Content-Length"};
        switch (transfer_codings_of(h)) {
        case framing::chunked: break;
        case framing::malformed: return verdict{http::status::bad_request, "malformed Transfer-Encoding"};
        case framing::unknown_coding:   // RFC 9112 6.1 (checked first: nothing else can be read)
            return verdict{http::status::not_implemented, "unknown transfer coding"};
        case framing::unknown_length:   // RFC 9112 6.3: the length cannot be known
            return verdict{http::status::bad_request, "Transfer-Encoding must end in chunked, once"};
        }
    }
    auto [first, last] = h.equal_range(http::field::host);
    const auto hosts = std::distance(first, last);
    if (h.version() >= 11 && hosts == 0) return verdict{http::status::bad_request, "missing Host"};   // RFC 9112 3.2
    if (hosts > 1) return verdict{http::status::bad_request, "more than one Host"};
    if (hosts == 1 && !valid_host(std::string_view(first->value().data(), first->value().size())))
        return verdict{http::status::bad_request, "invalid Host"};
    if (!origin_form(std::string_view(h.target().data(), h.target().size())))
        return verdict{http::status::bad_request, "bad request target"};
    if (h.method() != http::verb::get && h.method() != http::verb::head)
        return verdict{http::status::method_not_allowed, "GET and HEAD only", false};   // RFC 9110 15.5.6
    return std::nullopt;
}

/// Whose excess a refusal by the client's limiter is, from its error (none for a plain
/// refusal): the client's own (429 Too Many Requests, its Retry-After when its permit
/// comes), the server's (503: more clients wait at once than it tracks, or its table of
/// clients is full with none idle: not this client's rate, and another try may well
/// pass), a shutdown (503), or a failure (500).
enum class refusal { client_rate, overloaded, shutting_down, failed };

inline refusal refusal_of(boost::system::error_code ec)
{
    if (!ec || ec == sluice::error::timed_out) return refusal::client_rate;
    // A lock of the shared table that a stopped process holds (shm_lock_timeout) passes when
    // it lets go: the server's excess, as a full table.
    if (ec == sluice::error::queue_full || ec == sluice::error::shm_table_full ||
        ec == sluice::error::shm_lock_timeout)
        return refusal::overloaded;
    if (ec == sluice::error::closed) return refusal::shutting_down;
    return refusal::failed;
}

/// A request body that is not kept: the parser hands it its bytes, it takes them all and
/// keeps none. No route of the server reads a body (GET and HEAD only), so however large
/// a body is, and however many connections send one, none is held in memory.
struct discard_body {
    struct value_type {};

    class reader {
    public:
        template <bool isRequest, class Fields>
        reader(http::header<isRequest, Fields>&, value_type&) noexcept
        {
        }
        void init(const boost::optional<std::uint64_t>&, boost::system::error_code& ec) noexcept { ec = {}; }
        template <class ConstBufferSequence>
        std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) noexcept
        {
            ec = {};
            return boost::asio::buffer_size(buffers);
        }
        void finish(boost::system::error_code& ec) noexcept { ec = {}; }
    };
};

/// The server's limits on a request: its header (request line included), and its body.
inline constexpr std::size_t max_header = 8 * 1024;
inline constexpr std::uint64_t max_body = 1024 * 1024;
/// A connection's read buffer: a header and what came after it. Bodies pass through it and
/// are dropped (discard_body): this is all a connection holds of a request, so the bound
/// on connections bounds the memory of every request at once.
inline constexpr std::size_t read_buffer_size = 16 * 1024;

/// One request read off a connection's bytes as the server reads it: the header first, so
/// that the server decides from it alone (check, route, limit) before any of the body is
/// read; then the body, dropped as it comes (discard_body). Sans-io: it takes bytes, in
/// order, in pieces of any size, and says how many it took and whether it needs more.
class request_reader {
public:
    /// How far take() reads: to the end of the header, or of the whole request.
    enum class part { header, body };

    request_reader()
    {
        parser_.header_limit(static_cast<std::uint32_t>(max_header));
        parser_.body_limit(max_body);
    }

    /// Takes what it can of `in` (the bytes received and not taken yet, in order) until
    /// `upto` is read; returns how many bytes it took. Then `ec` is none (`upto` is read),
    /// http::error::need_more (call again with more: what it did not take, and what came
    /// next), or the parse error to answer (after_read_error).
    std::size_t take(std::string_view in, part upto, boost::system::error_code& ec)
    {
        std::size_t used = 0;
        ec = {};
        while (!(upto == part::header ? parser_.is_header_done() : parser_.is_done())) {
            // Boost 1.81's parser asserts that a final chunk met again after need_more comes
            // with 5 bytes ("0" CRLF CRLF), where "0" CRLF and one byte can come: a debug
            // build's abort() for any client that trickles its body. The rest of a chunked
            // body is never shorter than its last chunk's 5 bytes: the parser gets 5 or waits.
            if (parser_.is_header_done() && parser_.chunked() && in.size() - used < 5) {
                ec = http::error::need_more;
                return used;
            }
            const bool in_header = !parser_.is_header_done();
            const auto n = parser_.put(boost::asio::buffer(in.data() + used, in.size() - used), ec);
            if (in_header) scan_folds(in.substr(used, n));
            used += n;
            if (ec) return used;
            if (n == 0) {   // a body whose bytes have not come yet
                ec = http::error::need_more;
                return used;
            }
        }
        return used;
    }

    /// The client ended its stream: the error to answer (after_read_error), none when the
    /// request was complete.
    void end(boost::system::error_code& ec)
    {
        if (!parser_.got_some()) ec = http::error::end_of_stream;
        else parser_.put_eof(ec);
    }

    /// The answer to a request whose header is read (check_header, and what only its bytes
    /// show); nullopt when it may be served.
    std::optional<verdict> check() const
    {
        // RFC 9112 5.2: a server rejects obs-fold in a request (or replaces it with spaces,
        // as Beast does: then the field may mean one thing here and another to a proxy).
        if (folded_) return verdict{http::status::bad_request, "obsolete line folding"};
        return check_header(header());
    }

    /// Whether the client waits for a 100 (Continue) before it sends the body, once
    /// header_done(): the request expects one (expects_continue) and has a body to come.
    /// The server sends the 100 when it accepts the request, before reading the body; a
    /// request it refuses from its header gets its final answer instead, and the
    /// connection closes, the body unread (RFC 9110 10.1.1: the client may send it
    /// anyway, or not at all).
    bool awaits_continue() const { return !parser_.is_done() && expects_continue(header()); }

    bool got_some() const noexcept { return parser_.got_some(); }
    bool header_done() const noexcept { return parser_.is_header_done(); }
    bool done() const noexcept { return parser_.is_done(); }
    /// Whether the request line was read (a 414 is told from a 431 by it).
    bool line_done() const { return !parser_.get().target().empty(); }
    /// The header, once header_done().
    const http::request_header<>& header() const { return parser_.get().base(); }
    /// Whether the client asked the connection kept (HTTP/1.1 without Connection: close, or
    /// 1.0 with keep-alive), once header_done().
    bool keep_alive() const { return parser_.keep_alive(); }

private:
    // obs-fold: a line break inside the header followed by a space or a tab (RFC 9112 5.2).
    // Beast takes the header in pieces (the request line, then whole fields), so the break
    // and the space may come in two calls: the last two bytes taken are kept.
    void scan_folds(std::string_view taken) noexcept
    {
        for (char c : taken) {
            if (last_[0] == '\r' && last_[1] == '\n' && (c == ' ' || c == '\t')) folded_ = true;
            last_[0] = last_[1];
            last_[1] = c;
        }
    }

    http::request_parser<discard_body> parser_;
    char last_[2] = {0, 0};
    bool folded_ = false;
};

/// What a request's target asks the server for (its routes, main.cpp usage).
struct route {
    enum class kind {
        index,       // "/"
        robots,      // "/robots.txt"
        page,        // "/site/<n>", n < pages
        no_page,     // "/site/<anything else>"
        api,         // "/api/<anything>"
        work,        // "/api/work", ms=<n> (n <= 60000) in its query, 0 without
        metrics,     // "/metrics"
        not_found,   // anything else
        bad_query,   // "/api/work" with an ms that is no number, or too large
    };
    kind what;
    std::uint64_t n = 0;   // the page, or the work's milliseconds
    bool operator==(const route&) const = default;
};

/// The route of `target` (in origin form: "/path?query") on a site of `pages` pages. The
/// query is read as `name=value` pairs separated by "&", the first `ms` counting.
inline route route_of(std::string_view target, std::uint64_t pages)
{
    const auto q = target.find('?');
    const auto path = target.substr(0, q);
    if (path == "/metrics") return {route::kind::metrics};
    if (path == "/") return {route::kind::index};
    if (path == "/robots.txt") return {route::kind::robots};
    if (path.starts_with("/site/")) {
        std::uint64_t i = 0;
        if (examples::parse_number(path.substr(6), i) && i < pages) return {route::kind::page, i};
        return {route::kind::no_page};
    }
    if (!path.starts_with("/api/")) return {route::kind::not_found};
    if (path != "/api/work") return {route::kind::api};
    std::string_view query = q == std::string_view::npos ? std::string_view{} : target.substr(q + 1);
    while (!query.empty()) {
        const auto amp = query.find('&');
        const auto pair = query.substr(0, amp);
        if (pair.starts_with("ms=")) {
            std::uint64_t ms = 0;
            if (!examples::parse_number(pair.substr(3), ms) || ms > 60'000) return {route::kind::bad_query};
            return {route::kind::work, ms};
        }
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    }
    return {route::kind::work, 0};
}

/// The requests one connection carries (nginx's keepalive_requests): at most `max`, the
/// last answered with Connection: close, so that no client holds one connection, and its
/// place among the server's connections, for ever.
class request_count {
public:
    explicit request_count(std::uint64_t max) noexcept : max_(max) {}

    /// Counts a request answered; whether the connection may carry another after it.
    bool next() noexcept { return ++served_ < max_; }

private:
    std::uint64_t max_;
    std::uint64_t served_ = 0;
};

} // namespace server_check
