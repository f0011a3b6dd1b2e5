// fuzz-covers: examples/crawler/url.hpp
// URLs as a crawled site writes them: an href (or a Location) cleaned as a browser would,
// resolved against a base (RFC 3986 5.2) and normalized (6.2.2), and the crawler's own
// reading of an absolute http URL. Checked: a cleaned reference holds only what a URI may
// (every '%' starting an escape, one '#' at most) and cleaning it again changes nothing;
// a resolved URL re-parses to itself (resolving it against itself gives it back, against
// nothing it without its fragment); an http URL the crawler accepts has a host, a port in
// 1..65535, a target starting with '/' and no fragment, and reads back from its str() as
// the same URL.
//
// Input: the base (length-prefixed), then the reference.
#include "fuzz.hpp"

#include "../examples/crawler/url.hpp"

#include <string>

namespace {

bool uri_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("-._~:/?#[]@!$&'()*+,;=%").find(c) != std::string_view::npos;
}

void check_http(const std::string& text)
{
    std::string why;
    auto u = crawl::parse_http_url(text, why);
    if (!u) {
        FUZZ_CHECK(!why.empty());
        return;
    }
    FUZZ_CHECK(!u->host.empty());
    FUZZ_CHECK(u->port != 0);
    FUZZ_CHECK(!u->target.empty() && u->target.front() == '/');
    FUZZ_CHECK(u->target.find('#') == std::string::npos);
    std::string why2;
    auto again = crawl::parse_http_url(u->str(), why2);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(again->host == u->host && again->port == u->port && again->target == u->target);
    FUZZ_CHECK(again->authority() == u->authority());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::string base = in.text();
    const std::string_view raw = in.rest();

    const std::string ref = crawl::clean_reference(raw);
    for (std::size_t i = 0; i < ref.size(); ++i) {
        FUZZ_CHECK(uri_char(ref[i]));
        if (ref[i] == '%')
            FUZZ_CHECK(i + 2 < ref.size() && crawl::detail::is_hex(ref[i + 1]) && crawl::detail::is_hex(ref[i + 2]));
    }
    FUZZ_CHECK(ref.find('#') == ref.rfind('#'));
    FUZZ_CHECK(crawl::clean_reference(ref) == ref);

    if (auto to = crawl::resolve(base, ref)) {
        // An empty reference is the base without its fragment (RFC 3986 5.2.2).
        FUZZ_CHECK(crawl::resolve(*to, "") == to->substr(0, to->find('#')));
        FUZZ_CHECK(crawl::resolve(*to, *to) == to);
        check_http(*to);
    }
    check_http(base);
    check_http(std::string(raw));
    return 0;
}
