// The RateLimit field: any text parses or fails with an http::error; what parses has
// every member's r (and t) within the 15 digits of an Integer, formats back, parses to
// the same limits and formats to the same text.
#include "fuzz.hpp"

#include <sluice/http/ratelimit_fields.hpp>

namespace http = sluice::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto l = http::parse_ratelimit(text);
    if (!l) {
        FUZZ_CHECK(&l.error().category() == &http::error_category());
        return 0;
    }
    for (const auto& s : *l) {
        FUZZ_CHECK(s.remaining <= 999'999'999'999'999);
        FUZZ_CHECK(!s.reset || *s.reset <= 999'999'999'999'999);
        for (const auto& e : s.extensions) FUZZ_CHECK(e.key != "r" && e.key != "t" && e.key != "pk");
    }
    auto f = http::format_ratelimit(*l);
    FUZZ_CHECK(f.has_value());
    auto again = http::parse_ratelimit(*f);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *l);
    auto f2 = http::format_ratelimit(*again);
    FUZZ_CHECK(f2 && *f2 == *f);
    return 0;
}
