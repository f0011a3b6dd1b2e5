// The links of an HTML page, found by libxml2's HTML parser (a recovering parser for the
// tag soup of real pages: any case of names, single, double or no quotes, entities such as
// &amp; decoded), used through its SAX interface so that no tree is built. Sans-io.
#pragma once

#include <libxml/HTMLparser.h>
#include <libxml/parserInternals.h>
#include <libxml/xmlerror.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace crawl {

struct page_links {
    /// href of every <a> and <area>, in document order, as written (entities decoded).
    std::vector<std::string> hrefs;
    /// The first <base href>: relative links resolve against it (else the page's URL).
    std::string base;
    /// <meta name="robots" content="nofollow"> (or "none"): the page asks that its links
    /// not be followed.
    bool nofollow = false;
};

namespace detail {

inline bool iequals(std::string_view a, std::string_view b)
{
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

// Whether a comma-separated directive list (a robots meta tag's content) names `word`.
inline bool has_directive(std::string_view list, std::string_view word)
{
    while (!list.empty()) {
        auto comma = list.find(',');
        auto item = list.substr(0, comma);
        while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
        while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.remove_suffix(1);
        if (iequals(item, word)) return true;
        if (comma == std::string_view::npos) break;
        list.remove_prefix(comma + 1);
    }
    return false;
}

inline void on_start_element(void* ctx, const xmlChar* name, const xmlChar** atts)
{
    auto& out = *static_cast<page_links*>(static_cast<htmlParserCtxtPtr>(ctx)->_private);
    // The parser gives element and attribute names in lower case.
    const std::string_view element = reinterpret_cast<const char*>(name);
    auto attr = [atts](std::string_view key) -> const char* {
        for (auto a = atts; a && a[0]; a += 2)
            if (key == reinterpret_cast<const char*>(a[0])) return a[1] ? reinterpret_cast<const char*>(a[1]) : "";
        return nullptr;
    };
    if (element == "a" || element == "area") {
        if (auto href = attr("href")) out.hrefs.emplace_back(href);
    } else if (element == "base") {
        if (auto href = attr("href"); href && out.base.empty()) out.base = href;
    } else if (element == "meta") {
        auto n = attr("name");
        auto c = attr("content");
        if (n && c && iequals(n, "robots") && (has_directive(c, "nofollow") || has_directive(c, "none")))
            out.nofollow = true;
    }
}

// Whether s is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF).
inline bool valid_utf8(std::string_view s)
{
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        // Continuation bytes that follow a lead byte.
        const std::size_t n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : 4;
        if (n == 4 || n >= s.size() - i) return false;
        std::uint32_t cp = n == 0 ? c : c & (0x3F >> n);
        for (std::size_t k = 1; k <= n; ++k) {
            const auto d = static_cast<unsigned char>(s[i + k]);
            if ((d >> 6) != 2) return false;
            cp = (cp << 6) | (d & 0x3F);
        }
        if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

// Malformed markup is the normal case: nothing to report.
inline void ignore_error(void*, xmlErrorPtr) {}
// Errors raised outside the parser's context (a charset conversion that fails on the
// page's bytes) go to libxml2's generic handler, stderr by default: no message of ours.
inline void ignore_generic(void*, const char*, ...) {}

} // namespace detail

/// The links of `html`. `charset` is the Content-Type's charset parameter, if any. Without
/// it, a page that is well-formed UTF-8 is read as UTF-8 (as most pages are); any other is
/// left to the parser, which looks for a <meta charset> (else reads ISO-8859-1).
inline page_links extract_links(std::string_view html, std::string_view charset = {})
{
    page_links out;
    htmlSAXHandler sax;
    std::memset(&sax, 0, sizeof sax);
    sax.startElement = detail::on_start_element;
    sax.serror = detail::ignore_error;
    sax.initialized = XML_SAX2_MAGIC;   // so that serror is used
    xmlCharEncoding enc = XML_CHAR_ENCODING_NONE;
    if (!charset.empty()) enc = xmlParseCharEncoding(std::string(charset).c_str());
    if (enc == XML_CHAR_ENCODING_ERROR) enc = XML_CHAR_ENCODING_NONE;
    if (enc == XML_CHAR_ENCODING_NONE && detail::valid_utf8(html)) enc = XML_CHAR_ENCODING_UTF8;
    xmlSetGenericErrorFunc(nullptr, detail::ignore_generic);   // this thread's handler
    htmlParserCtxtPtr ctxt = htmlCreatePushParserCtxt(&sax, nullptr, nullptr, 0, nullptr, enc);
    if (!ctxt) return out;
    ctxt->_private = &out;
    htmlCtxtUseOptions(ctxt, HTML_PARSE_RECOVER | HTML_PARSE_NOERROR | HTML_PARSE_NOWARNING | HTML_PARSE_NONET |
                                 HTML_PARSE_NOIMPLIED);
    // The parser takes an int length: feed large pages in pieces.
    constexpr std::size_t piece = 1 << 20;
    for (std::size_t at = 0; at < html.size(); at += piece) {
        const auto n = std::min(piece, html.size() - at);
        htmlParseChunk(ctxt, html.data() + at, static_cast<int>(n), 0);
    }
    htmlParseChunk(ctxt, nullptr, 0, 1);
    if (ctxt->myDoc) xmlFreeDoc(ctxt->myDoc);
    htmlFreeParserCtxt(ctxt);
    return out;
}

} // namespace crawl
