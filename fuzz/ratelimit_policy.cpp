// The RateLimit-Policy field: any text parses or fails with an http::error; what parses
// has q within the 15 digits of an Integer and w > 0 when present, formats back, parses to
// the same policies and formats to the same text; uint_extension agrees with the
// extension it reads.
#include "fuzz.hpp"

#include <sluice/http/ratelimit_fields.hpp>

namespace http = sluice::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto l = http::parse_ratelimit_policy(text);
    if (!l) {
        FUZZ_CHECK(&l.error().category() == &http::error_category());
        return 0;
    }
    for (const auto& p : *l) {
        FUZZ_CHECK(p.quota <= 999'999'999'999'999);
        FUZZ_CHECK(!p.window || (*p.window > 0 && *p.window <= 999'999'999'999'999));
        for (const auto& e : p.extensions) {
            FUZZ_CHECK(e.key != "q" && e.key != "w" && e.key != "qu" && e.key != "pk");
            auto u = http::uint_extension(p.extensions, e.key);
            bool is_uint = e.value.type == http::sf::bare_item::kind::integer && e.value.number >= 0;
            FUZZ_CHECK(u.has_value() == is_uint);
            FUZZ_CHECK(!u || static_cast<std::int64_t>(*u) == e.value.number);
        }
    }
    auto f = http::format_ratelimit_policy(*l);
    FUZZ_CHECK(f.has_value());
    auto again = http::parse_ratelimit_policy(*f);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *l);
    auto f2 = http::format_ratelimit_policy(*again);
    FUZZ_CHECK(f2 && *f2 == *f);
    return 0;
}
