// fuzz-covers: examples/crawler/links.hpp
// An HTML page as a crawled site sends it, read by libxml2's recovering HTML parser for its
// links, <base> and robots meta tag, with any charset parameter. Checked: no crash, leak or
// hang; the same page gives the same links each time (no state kept between parses); the
// UTF-8 check agrees with RFC 3629's table of well-formed sequences; the robots directives
// are found as a plain split of the list finds them.
//
// Input: a byte choosing the Content-Type's charset, then the page.
#include "fuzz.hpp"

#include "../examples/crawler/links.hpp"

#include <string>

namespace {

// RFC 3629 section 4: the well-formed sequences, byte by byte.
bool reference_utf8(std::string_view s)
{
    auto in = [](unsigned char c, unsigned lo, unsigned hi) { return c >= lo && c <= hi; };
    for (std::size_t i = 0; i < s.size();) {
        auto b = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u; };
        const unsigned c = b(0);
        auto tail = [&](std::size_t k) { return b(k) <= 0xFF && in(static_cast<unsigned char>(b(k)), 0x80, 0xBF); };
        auto at = [&](std::size_t k, unsigned lo, unsigned hi) { return b(k) <= 0xFF && b(k) >= lo && b(k) <= hi; };
        if (c <= 0x7F) i += 1;
        else if (c >= 0xC2 && c <= 0xDF && tail(1)) i += 2;
        else if (c == 0xE0 && at(1, 0xA0, 0xBF) && tail(2)) i += 3;
        else if (((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) && tail(1) && tail(2)) i += 3;
        else if (c == 0xED && at(1, 0x80, 0x9F) && tail(2)) i += 3;
        else if (c == 0xF0 && at(1, 0x90, 0xBF) && tail(2) && tail(3)) i += 4;
        else if (c >= 0xF1 && c <= 0xF3 && tail(1) && tail(2) && tail(3)) i += 4;
        else if (c == 0xF4 && at(1, 0x80, 0x8F) && tail(2) && tail(3)) i += 4;
        else return false;
    }
    return true;
}

bool reference_directive(std::string_view list, std::string_view word)
{
    std::string item;
    auto done = [&] {
        while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
        std::size_t k = 0;
        while (k < item.size() && std::isspace(static_cast<unsigned char>(item[k]))) ++k;
        bool same = crawl::detail::iequals(std::string_view(item).substr(k), word);
        item.clear();
        return same;
    };
    for (char c : list) {
        if (c == ',') {
            if (done()) return true;
        } else {
            item += c;
        }
    }
    return done();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    static constexpr const char* charsets[] = {"", "utf-8", "UTF-8", "iso-8859-1", "windows-1252", "utf-16",
                                               "shift_jis", "no-such-charset", "ascii", "UTF-16LE"};
    const std::string_view charset = charsets[in.byte() % std::size(charsets)];
    const std::string_view html = in.rest();

    FUZZ_CHECK(crawl::detail::valid_utf8(html) == reference_utf8(html));
    FUZZ_CHECK(crawl::detail::has_directive(html, "nofollow") == reference_directive(html, "nofollow"));

    auto a = crawl::extract_links(html, charset);
    auto b = crawl::extract_links(html, charset);
    FUZZ_CHECK(a.hrefs == b.hrefs);
    FUZZ_CHECK(a.base == b.base);
    FUZZ_CHECK(a.nofollow == b.nofollow);
    return 0;
}
