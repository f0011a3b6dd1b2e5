// URL resolution: every example of RFC 3986 section 5.4 (normal and abnormal), the
// cleaning of references as found in pages, and the URLs the crawler accepts.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "url.hpp"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

using crawl::resolve;

TEST_CASE("url: RFC 3986 section 5.4.1, normal examples")
{
    const std::string base = "http://a/b/c/d;p?q";
    const std::vector<std::pair<const char*, const char*>> cases = {
        {"g:h", "g:h"},
        {"g", "http://a/b/c/g"},
        {"./g", "http://a/b/c/g"},
        {"g/", "http://a/b/c/g/"},
        {"/g", "http://a/g"},
        {"//g", "http://g"},
        {"?y", "http://a/b/c/d;p?y"},
        {"g?y", "http://a/b/c/g?y"},
        {"#s", "http://a/b/c/d;p?q#s"},
        {"g#s", "http://a/b/c/g#s"},
        {"g?y#s", "http://a/b/c/g?y#s"},
        {";x", "http://a/b/c/;x"},
        {"g;x", "http://a/b/c/g;x"},
        {"g;x?y#s", "http://a/b/c/g;x?y#s"},
        {"", "http://a/b/c/d;p?q"},
        {".", "http://a/b/c/"},
        {"./", "http://a/b/c/"},
        {"..", "http://a/b/"},
        {"../", "http://a/b/"},
        {"../g", "http://a/b/g"},
        {"../..", "http://a/"},
        {"../../", "http://a/"},
        {"../../g", "http://a/g"},
    };
    for (auto [ref, want] : cases) {
        CAPTURE(ref);
        CHECK(resolve(base, ref) == std::optional<std::string>(want));
    }
}

TEST_CASE("url: RFC 3986 section 5.4.2, abnormal examples")
{
    const std::string base = "http://a/b/c/d;p?q";
    const std::vector<std::pair<const char*, const char*>> cases = {
        {"../../../g", "http://a/g"},
        {"../../../../g", "http://a/g"},
        {"/./g", "http://a/g"},
        {"/../g", "http://a/g"},
        {"g.", "http://a/b/c/g."},
        {".g", "http://a/b/c/.g"},
        {"g..", "http://a/b/c/g.."},
        {"..g", "http://a/b/c/..g"},
        {"./../g", "http://a/b/g"},
        {"./g/.", "http://a/b/c/g/"},
        {"g/./h", "http://a/b/c/g/h"},
        {"g/../h", "http://a/b/c/h"},
        {"g;x=1/./y", "http://a/b/c/g;x=1/y"},
        {"g;x=1/../y", "http://a/b/c/y"},
        {"g?y/./x", "http://a/b/c/g?y/./x"},
        {"g?y/../x", "http://a/b/c/g?y/../x"},
        {"g#s/./x", "http://a/b/c/g#s/./x"},
        {"g#s/../x", "http://a/b/c/g#s/../x"},
        {"http:g", "http:g"},   // strict parsers, as section 5.2.2 says
    };
    for (auto [ref, want] : cases) {
        CAPTURE(ref);
        CHECK(resolve(base, ref) == std::optional<std::string>(want));
    }
}

TEST_CASE("url: references are cleaned as browsers do, then resolved and normalized")
{
    using crawl::clean_reference;
    CHECK(clean_reference("  p1.html\n") == "p1.html");
    CHECK(clean_reference("a b.html") == "a%20b.html");
    CHECK(clean_reference("caf\xc3\xa9.html") == "caf%C3%A9.html");
    CHECK(clean_reference("x%zz%41") == "x%25zz%41");
    CHECK(clean_reference("p\t1.ht\nml") == "p1.html");
    CHECK(clean_reference("a#b#c") == "a#b%23c");
    CHECK(clean_reference("list[1].html") == "list%5B1%5D.html");
    CHECK(clean_reference("http://[::1]:8080/x[1]") == "http://[::1]:8080/x%5B1%5D");
    CHECK(clean_reference("q?a=1&b=<2>") == "q?a=1&b=%3C2%3E");
    // Normalization: case of the scheme and host, percent-encoding, dot segments.
    CHECK(resolve("HTTP://Example.COM/a/", "%7euser/./x%2f") == std::optional<std::string>("http://example.com/a/~user/x%2F"));
    CHECK(resolve("http://a/b", "http://a/b/../c") == std::optional<std::string>("http://a/c"));
    CHECK_FALSE(resolve("http://a/b", "http://a b/").has_value());
    CHECK_FALSE(resolve("not absolute", "x").has_value());
}

TEST_CASE("url: what the crawler fetches: http, a host, a port, a target without fragment")
{
    std::string why;
    auto u = crawl::parse_http_url("http://127.0.0.1:8080/a/../b?x=1#top", why);
    REQUIRE(u);
    CHECK(u->host == "127.0.0.1");
    CHECK(u->port == 8080);
    CHECK(u->target == "/b?x=1");
    CHECK(u->authority() == "127.0.0.1:8080");
    CHECK(u->str() == "http://127.0.0.1:8080/b?x=1");
    u = crawl::parse_http_url("http://LocalHost", why);
    REQUIRE(u);
    CHECK(u->host == "localhost");
    CHECK(u->port == 80);
    CHECK(u->target == "/");
    CHECK(u->authority() == "localhost");
    u = crawl::parse_http_url("http://[::1]:81?q", why);
    REQUIRE(u);
    CHECK(u->host == "::1");
    CHECK(u->target == "/?q");
    CHECK(u->authority() == "[::1]:81");

    CHECK_FALSE(crawl::parse_http_url("https://example.com/", why));
    CHECK(why.find("https is not supported") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("ftp://example.com/", why));
    CHECK(why.find("http only") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("127.0.0.1:8080/", why));
    CHECK_FALSE(crawl::parse_http_url("localhost:8080/", why));
    CHECK(why.find("absolute") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("/relative", why));
    CHECK(why.find("absolute") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("http://h:0/", why));
    CHECK(why.find("bad port") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("http://h:99999/", why));
    CHECK_FALSE(crawl::parse_http_url("http://user:pw@h/", why));
    CHECK(why.find("user information") != std::string::npos);
    CHECK_FALSE(crawl::parse_http_url("http://a b/", why));
    CHECK(why.find("not a valid URL") != std::string::npos);
}

TEST_CASE("url: a path that would read back as an authority is no link (found by fuzzing)")
{
    // "/.//h/a" loses its "/." to normalization: the path "//h/a" without an authority
    // would be written "http://h/a", a URL of another host than the text names.
    CHECK_FALSE(resolve("http:/.//H/a", "b").has_value());
    CHECK_FALSE(resolve("http://a/b", "http:/.//evil/x").has_value());
    CHECK_FALSE(resolve("foo:/.//x", "").has_value());
    // With an authority, or without one and a path of one slash, nothing changes.
    CHECK(resolve("http://a/b", "/.//x") == "http://a//x");
    CHECK(resolve("http:/a/b", "c") == "http:/a/c");
    CHECK(resolve("http:///x", "y") == "http:///y");
}
