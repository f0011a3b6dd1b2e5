// fuzz-covers: lib/http/ratelimit_fields.cpp
// The RateLimit and RateLimit-Policy fields, any text read as each: it parses or fails with
// an http::error; what parses has every member's numbers within the 15 digits of an
// Integer (w > 0 when present), formats back, parses to the same members and formats to the
// same text; uint_extension agrees with the extension it reads. What cannot be written (a
// number beyond 15 digits, w = 0) fails to format with unserializable / invalid_parameter.
#include "fuzz.hpp"

#include <sluice/http/ratelimit_fields.hpp>

namespace http = sluice::http;

namespace {

constexpr std::uint64_t max_integer = 999'999'999'999'999;

// An extension named as one of the field's own parameters, or twice, cannot be written:
// the parser would read it back merged.
template <class Members, class Format>
void bad_extensions(const Members& l, Format format, std::string_view reserved)
{
    if (l.empty()) return;
    auto bad = l;
    bad.back().extensions.push_back({std::string(reserved), http::sf::bare_item{}});
    auto f = format(bad);
    FUZZ_CHECK(!f && f.error() == http::error::invalid_parameter);
    if (l.back().extensions.empty()) return;
    bad = l;
    bad.back().extensions.push_back(bad.back().extensions.front());
    f = format(bad);
    FUZZ_CHECK(!f && f.error() == http::error::invalid_parameter);
}

void service_limits(std::string_view text)
{
    auto l = http::parse_ratelimit(text);
    if (!l) {
        FUZZ_CHECK(&l.error().category() == &http::error_category());
        return;
    }
    for (const auto& s : *l) {
        FUZZ_CHECK(s.remaining <= max_integer);
        FUZZ_CHECK(!s.reset || *s.reset <= max_integer);
        for (const auto& e : s.extensions) FUZZ_CHECK(e.key != "r" && e.key != "t" && e.key != "pk");
    }
    auto f = http::format_ratelimit(*l);
    FUZZ_CHECK(f.has_value());
    auto again = http::parse_ratelimit(*f);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *l);
    auto f2 = http::format_ratelimit(*again);
    FUZZ_CHECK(f2 && *f2 == *f);
    if (!l->empty()) {
        auto big = *l;
        (big.back().reset ? *big.back().reset : big.back().remaining) = max_integer + 1;
        auto bad = http::format_ratelimit(big);
        FUZZ_CHECK(!bad && bad.error() == http::error::unserializable);
    }
    bad_extensions(*l, [](const auto& m) { return http::format_ratelimit(m); }, "t");
}

void quota_policies(std::string_view text)
{
    auto l = http::parse_ratelimit_policy(text);
    if (!l) {
        FUZZ_CHECK(&l.error().category() == &http::error_category());
        return;
    }
    for (const auto& p : *l) {
        FUZZ_CHECK(p.quota <= max_integer);
        FUZZ_CHECK(!p.window || (*p.window > 0 && *p.window <= max_integer));
        for (const auto& e : p.extensions) {
            FUZZ_CHECK(e.key != "q" && e.key != "w" && e.key != "qu" && e.key != "pk");
            auto u = http::uint_extension(p.extensions, e.key);
            bool is_uint = e.value.type == http::sf::bare_item::kind::integer && e.value.number >= 0;
            FUZZ_CHECK(u.has_value() == is_uint);
            FUZZ_CHECK(!u || static_cast<std::int64_t>(*u) == e.value.number);
        }
        FUZZ_CHECK(!http::uint_extension(p.extensions, "q"));   // a member's own, not an extension
    }
    auto f = http::format_ratelimit_policy(*l);
    FUZZ_CHECK(f.has_value());
    auto again = http::parse_ratelimit_policy(*f);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *l);
    auto f2 = http::format_ratelimit_policy(*again);
    FUZZ_CHECK(f2 && *f2 == *f);
    if (!l->empty()) {
        auto bad = *l;
        (bad.back().window ? *bad.back().window : bad.back().quota) = max_integer + 1;
        auto big = http::format_ratelimit_policy(bad);
        FUZZ_CHECK(!big && big.error() == http::error::unserializable);
        bad = *l;
        bad.back().window = 0;
        auto zero = http::format_ratelimit_policy(bad);
        FUZZ_CHECK(!zero && zero.error() == http::error::invalid_parameter);
    }
    bad_extensions(*l, [](const auto& m) { return http::format_ratelimit_policy(m); }, "qu");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    service_limits(text);
    quota_policies(text);
    return 0;
}
