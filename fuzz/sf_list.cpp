// fuzz-covers: lib/http/structured_field.cpp
// RFC 8941 Lists: any text parses or fails with invalid_structured_field; what parses
// serialises (everything the parser accepts can be written back), the serialisation
// parses to the same list, and serialising that again gives the same text (canonical).
#include "fuzz.hpp"

#include <sluice/http/error.hpp>
#include <sluice/http/structured_field.hpp>

namespace sf = sluice::http::sf;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto l = sf::parse_list(text);
    if (!l) {
        FUZZ_CHECK(l.error() == sluice::http::error::invalid_structured_field);
        return 0;
    }
    for (const auto& m : *l) {
        // Integers within 15 digits, decimals within 12.3, keys lower-case, each once.
        auto bare_ok = [](const sf::bare_item& b) {
            if (b.type == sf::bare_item::kind::integer) return b.number >= -999'999'999'999'999 && b.number <= 999'999'999'999'999;
            if (b.type == sf::bare_item::kind::decimal) return b.number >= -999'999'999'999'999 && b.number <= 999'999'999'999'999;
            return true;
        };
        auto params_ok = [&](const sf::parameters& ps) {
            for (std::size_t i = 0; i < ps.size(); ++i) {
                if (!bare_ok(ps[i].value) || ps[i].key.empty()) return false;
                for (std::size_t j = 0; j < i; ++j)
                    if (ps[j].key == ps[i].key) return false;
            }
            return true;
        };
        FUZZ_CHECK(params_ok(m.params) && params_ok(m.value.params) && bare_ok(m.value.value));
        for (const auto& it : m.items) FUZZ_CHECK(bare_ok(it.value) && params_ok(it.params));
    }
    auto s = sf::serialize_list(*l);
    FUZZ_CHECK(s.has_value());
    auto again = sf::parse_list(*s);
    FUZZ_CHECK(again.has_value());
    FUZZ_CHECK(*again == *l);
    auto s2 = sf::serialize_list(*again);
    FUZZ_CHECK(s2 && *s2 == *s);
    return 0;
}
