// Link extraction from real-world markup: relative links, single and double quotes and
// none, upper-case names, entities, <base>, a robots meta tag, and broken markup.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "links.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using crawl::extract_links;
using strings = std::vector<std::string>;

TEST_CASE("links: every way of writing an href")
{
    auto l = extract_links(R"(<!doctype html><html><body>
        <a href="p1.html">double</a>
        <a href='p2.html'>single</a>
        <A HREF="P3.html">upper case</A>
        <a href=p4.html>unquoted</a>
        <a hReF = "dir/p5.html" >spaces</a>
        <a href="page?a=1&amp;b=2">entity</a>
        <a href="x&#47;y">numeric entity</a>
        <a name="anchor">no href</a>
        <area href="/map.html">
        <link href="/style.css" rel="stylesheet">
        <img src="i.png">
        </body></html>)");
    CHECK(l.hrefs == strings{"p1.html", "p2.html", "P3.html", "p4.html", "dir/p5.html", "page?a=1&b=2", "x/y",
                             "/map.html"});
    CHECK(l.base.empty());
    CHECK_FALSE(l.nofollow);
}

TEST_CASE("links: <base href> and the robots meta tag")
{
    auto l = extract_links(R"(<html><head><BASE HREF="http://h/sub/"><base href="/ignored/">
        <META NAME="Robots" CONTENT="noindex, NoFollow"></head><body><a href="a">a</a></body></html>)");
    CHECK(l.base == "http://h/sub/");
    CHECK(l.nofollow);
    CHECK(extract_links(R"(<meta name="robots" content="none"><a href=x>)").nofollow);
    CHECK_FALSE(extract_links(R"(<meta name="robots" content="noindex"><a href=x>)").nofollow);
    CHECK_FALSE(extract_links(R"(<meta name="description" content="nofollow">)").nofollow);
}

TEST_CASE("links: broken markup, scripts and comments, other encodings")
{
    auto l = extract_links("<html><body><p><a href=\"one\">1<div><a href='two'>2</p></b>"
                           "<script>var s = '<a href=\"not-a-link\">';</script>"
                           "<!-- <a href=\"commented\"> --><a href=\"three\"");
    CHECK(l.hrefs == strings{"one", "two", "three"});
    CHECK(extract_links("").hrefs.empty());
    CHECK(extract_links("no markup at all").hrefs.empty());
    // UTF-8 without a declared charset, and Latin-1 declared by the Content-Type.
    CHECK(extract_links("<a href=\"caf\xc3\xa9.html\">").hrefs == strings{"caf\xc3\xa9.html"});
    CHECK(extract_links("<a href=\"caf\xe9.html\">", "ISO-8859-1").hrefs == strings{"caf\xc3\xa9.html"});
}

TEST_CASE("links: the UTF-8 check that picks the encoding")
{
    using crawl::detail::valid_utf8;
    CHECK(valid_utf8(""));
    CHECK(valid_utf8("ascii"));
    CHECK(valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
    CHECK_FALSE(valid_utf8("caf\xe9"));           // Latin-1
    CHECK_FALSE(valid_utf8("\xc3"));              // cut short
    CHECK_FALSE(valid_utf8("\xc0\xaf"));          // overlong
    CHECK_FALSE(valid_utf8("\xed\xa0\x80"));      // a surrogate
    CHECK_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
    CHECK_FALSE(valid_utf8("\xf8\x88\x80\x80\x80"));
}
