// What the server answers a request that it cannot serve as written (RFC 9110, RFC 9112):
// a framing or syntax error, a header too large, a missing or repeated Host, a version it
// does not speak, a method it does not serve, a request too slow to arrive. Sans-io: it
// looks at Beast's parse error and at the parsed header, and says which status to send and
// whether the connection must close after it. And, for a request its client's limiter did
// not admit, whose excess the refusal is (refusal_of).
#pragma once

#include <sluice/error.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/status.hpp>

#include <cctype>
#include <iterator>
#include <algorithm>
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
/// to answer: the client went away or stayed idle.
inline std::optional<verdict> after_read_error(boost::system::error_code ec, bool got_some, bool line_done = true,
                                               std::string_view unparsed = {})
{
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

/// The answer to a request whose header parsed but which the server will not serve as is;
/// nullopt when it may be served.
template <class Fields>
std::optional<verdict> check_header(const http::request_header<Fields>& h)
{
    // Transfer-Encoding whose last coding is not chunked: the length cannot be known (RFC 9112
    // 6.3); with a Content-Length too: a request smuggling attempt, as often as not (6.1).
    if (auto te = h.find(http::field::transfer_encoding); te != h.end()) {
        std::string_view v(te->value().data(), te->value().size());
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        auto last = v.substr(v.find_last_of(", \t") == std::string_view::npos ? 0 : v.find_last_of(", \t") + 1);
        if (last.size() != 7 || !std::equal(last.begin(), last.end(), "chunked", [](char a, char b) {
                return std::tolower(static_cast<unsigned char>(a)) == b;
            }))
            return verdict{http::status::bad_request, "Transfer-Encoding must end in chunked"};
        if (h.find(http::field::content_length) != h.end())
            return verdict{http::status::bad_request, "both Transfer-Encoding and Content-Length"};
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

/// The client a limit applies to: the peer, or the last X-Forwarded-For entry (the one
/// the trusted proxy itself appended) when the peer is one of `trusted`. Entries further
/// left were written by the client and could be anything; an entry that is no IP address
/// leaves the peer. What it returns is the peer or an address in its canonical text.
template <class Fields, class Set>
std::string client_of(const http::request_header<Fields>& h, const std::string& peer, const Set& trusted)
{
    if (!trusted.contains(peer)) return peer;
    auto it = h.find("X-Forwarded-For");
    if (it == h.end()) return peer;
    std::string_view v(it->value().data(), it->value().size());
    if (auto comma = v.rfind(','); comma != std::string_view::npos) v.remove_prefix(comma + 1);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    boost::system::error_code ec;
    auto addr = boost::asio::ip::make_address(v, ec);
    return ec ? peer : addr.to_string();   // garbage in the header: fall back to the peer
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

} // namespace server_check
