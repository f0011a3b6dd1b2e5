// fuzz-covers: examples/crawler/robots.hpp
// robots.txt as a crawled site sends it (RFC 9309): any bytes, for any User-Agent. Checked:
// robots.txt itself is always allowed; the product token is the User-Agent's leading
// letters, '-' and '_'; pattern matching agrees with a plain reference (a table of which
// prefixes of the pattern match which prefixes of the path); for plain paths and patterns
// (printable ASCII, no '%'), a file of a few rules allows what the longest matching rule
// says (allow on a tie); and a file past the limit reads as the lines that end within it.
//
// Input: a mode byte (bit 0: read with a small limit, bits 2-7 part of it; bit 1: build a
// file from rules), the User-Agent, a path and a pattern (length-prefixed), then the file,
// or the rules (a byte: allow?, then the pattern, length-prefixed); the file is preceded
// by a byte of the limit in mode 1.
#include "fuzz.hpp"

#include "../examples/crawler/robots.hpp"

#include <string>
#include <vector>

using crawl::robots_rules;

namespace {

// Whether `pattern` ('*' any characters, a final '$' the end) matches a prefix of `path`.
bool reference_match(std::string_view pattern, std::string_view path)
{
    bool anchored = !pattern.empty() && pattern.back() == '$';
    if (anchored) pattern.remove_suffix(1);
    // m[j]: the pattern's first i characters match the path's first j.
    std::vector<char> m(path.size() + 1, 0), next(path.size() + 1);
    m[0] = 1;
    for (char c : pattern) {
        std::fill(next.begin(), next.end(), 0);
        for (std::size_t j = 0; j <= path.size(); ++j) {
            if (c == '*') next[j] = m[j] || (j > 0 && next[j - 1]);
            else next[j] = j > 0 && m[j - 1] && path[j - 1] == c;
        }
        m.swap(next);
    }
    if (anchored) return m[path.size()];
    for (char x : m)
        if (x) return true;
    return false;
}

bool plain(std::string_view s)
{
    for (char c : s)
        if (c <= ' ' || c >= 0x7f || c == '%' || c == '#') return false;
    return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::uint8_t mode = in.byte();
    const std::string agent = in.text();
    const std::string path = in.text();
    const std::string pattern = in.text();

    const std::string token = crawl::product_token(agent);
    FUZZ_CHECK(std::string_view(agent).starts_with(token));
    for (char c : token) FUZZ_CHECK(std::isalpha(static_cast<unsigned char>(c)) || c == '-' || c == '_');

    FUZZ_CHECK(robots_rules::matches(pattern, path) == reference_match(pattern, path));
    FUZZ_CHECK(robots_rules::disallow_all().allowed(path) == (path == "/robots.txt"));
    FUZZ_CHECK(robots_rules().allowed(path));

    if (mode & 2) {
        // A file of plain rules for every agent: the reference decides as RFC 9309 2.2.2 says.
        std::string text = "User-agent: *\n";
        std::size_t best = 0;
        bool matched = false, allow = true;
        for (int i = 0; i < 8 && !in.empty(); ++i) {
            const bool a = in.flag();
            const std::string p = in.text();
            if (p.empty() || !plain(p)) continue;
            text += (a ? "Allow: " : "Disallow: ") + p + "\n";
            if (!reference_match(p, path)) continue;
            if (!matched || p.size() > best) allow = a;
            else if (p.size() == best) allow = allow || a;
            else continue;
            best = p.size();
            matched = true;
        }
        auto r = robots_rules::parse(text, agent);
        if (plain(path) && path != "/robots.txt") FUZZ_CHECK(r.allowed(path) == allow);
        return 0;
    }

    const std::uint8_t limit_byte = (mode & 1) ? in.byte() : 0;
    std::string text(in.rest());
    auto r = robots_rules::parse(text, agent);
    FUZZ_CHECK(r.allowed("/robots.txt"));
    FUZZ_CHECK(!r.disallows_all());
    if (auto d = r.crawl_delay()) FUZZ_CHECK(*d >= 0);
    const bool allowed = r.allowed(path);

    if (mode & 1) {
        // Read from its first `limit` bytes only (500 KiB in the crawler; here a few, so that
        // the cut is met at the fuzzer's speed): what is read is what a file cut after its
        // last line end within them says.
        const std::size_t limit = 1 + limit_byte % 64 + (mode >> 2);
        std::string_view expect = std::string_view(text).substr(0, std::min(text.size(), limit));
        if (text.size() > limit) expect = expect.substr(0, expect.find_last_of("\r\n") + 1);
        auto b = robots_rules::parse(text, agent, limit);
        auto e = robots_rules::parse(expect, agent);
        FUZZ_CHECK(b.allowed(path) == e.allowed(path));
        FUZZ_CHECK(b.rule_count() == e.rule_count());
        FUZZ_CHECK(b.crawl_delay() == e.crawl_delay());
        if (text.size() <= limit) FUZZ_CHECK(b.allowed(path) == allowed);
    }
    return 0;
}
