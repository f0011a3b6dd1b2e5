// robots.txt rules as RFC 9309 defines them, with its examples: groups and their merging,
// the product token, the longest match, allow on a tie, "*" and "$", percent-encoding.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "robots.hpp"

#include <doctest/doctest.h>

using crawl::robots_rules;

TEST_CASE("robots: the product token of a User-Agent")
{
    CHECK(crawl::product_token("sluice-crawler/0.2 (+https://example.com)") == "sluice-crawler");
    CHECK(crawl::product_token("ExampleBot") == "ExampleBot");
    CHECK(crawl::product_token("my_bot2") == "my_bot");
    CHECK(crawl::product_token("/x").empty());
}

TEST_CASE("robots: the group of the crawler's token, else '*'; groups of one token merge (RFC 9309 2.2.1)")
{
    const char* text = "User-Agent : foobot\n"
                       "Disallow: /a\n"
                       "\n"
                       "user-agent: *\n"
                       "disallow: /b\n"
                       "\n"
                       "User-agent: FOOBOT/1.0\n"
                       "Disallow: /c\n"
                       "user-agent: barbot\n"
                       "user-agent: bazbot\n"
                       "disallow: /d   # a comment\n";
    auto foo = robots_rules::parse(text, "FooBot/2.1");
    CHECK_FALSE(foo.allowed("/a"));
    CHECK_FALSE(foo.allowed("/c/x"));
    CHECK(foo.allowed("/b"));
    CHECK(foo.allowed("/d"));
    auto baz = robots_rules::parse(text, "bazbot");
    CHECK_FALSE(baz.allowed("/d"));
    CHECK(baz.allowed("/a"));
    auto other = robots_rules::parse(text, "sluice-crawler");
    CHECK_FALSE(other.allowed("/b"));
    CHECK(other.allowed("/a"));
    // Rules before any user-agent line, and unknown lines, are ignored.
    auto r = robots_rules::parse("Disallow: /\nfoo bar\nUser-agent: *\nAllow: /\n", "x");
    CHECK(r.allowed("/anything"));
}

TEST_CASE("robots: the longest match wins, allow on a tie; '*' and '$' (RFC 9309 2.2.2, 2.2.3)")
{
    auto r = robots_rules::parse("User-agent: *\n"
                                 "Allow: /example/page/\n"
                                 "Disallow: /example/page/disallowed.gif\n"
                                 "Disallow: /example/\n"
                                 "Allow: /same\n"
                                 "Disallow: /same\n"
                                 "Disallow: /*.php$\n"
                                 "Disallow: /private*/\n",
                                 "bot");
    CHECK(r.allowed("/example/page/"));
    CHECK(r.allowed("/example/page/x.html"));
    CHECK_FALSE(r.allowed("/example/page/disallowed.gif"));
    CHECK_FALSE(r.allowed("/example/other"));
    CHECK(r.allowed("/same/x"));
    CHECK_FALSE(r.allowed("/index.php"));
    CHECK(r.allowed("/index.php?x=1"));
    CHECK(r.allowed("/index.phps"));
    CHECK_FALSE(r.allowed("/private-area/x"));
    CHECK(r.allowed("/private"));
    CHECK(r.allowed("/robots.txt"));
    CHECK(r.rule_count() == 7);
}

TEST_CASE("robots: matching of patterns")
{
    CHECK(robots_rules::matches("/", "/anything"));
    CHECK(robots_rules::matches("/fish", "/fish.html"));
    CHECK_FALSE(robots_rules::matches("/fish", "/Fish.asp"));   // paths are case-sensitive
    CHECK(robots_rules::matches("/fish*", "/fish/salmon.html"));
    CHECK(robots_rules::matches("/*.php", "/folder/filename.php?parameters"));
    CHECK(robots_rules::matches("/fish*.php", "/fishheads/catfish.php?parameters"));
    CHECK_FALSE(robots_rules::matches("/fish*.php", "/Fish.PHP"));
    CHECK(robots_rules::matches("/*.php$", "/folder/filename.php"));
    CHECK_FALSE(robots_rules::matches("/*.php$", "/filename.php/"));
    CHECK(robots_rules::matches("/a*b*c$", "/aXbYbZc"));
    CHECK(robots_rules::matches("*", "/"));
    CHECK_FALSE(robots_rules::matches("/a$", "/ab"));
}

TEST_CASE("robots: percent-encoding, CR line ends, Crawl-delay, empty rules, the limits")
{
    auto r = robots_rules::parse("User-agent: *\r\nDisallow: /caf\xc3\xa9\r\nDisallow: /%7ejoe\rCrawl-delay: 2.5\r\n"
                                 "Disallow:\n",
                                 "bot");
    CHECK_FALSE(r.allowed("/caf%C3%A9/x"));
    CHECK_FALSE(r.allowed("/caf%c3%a9"));
    CHECK_FALSE(r.allowed("/%7Ejoe/"));
    CHECK(r.crawl_delay() == 2.5);
    CHECK(r.rule_count() == 2);   // an empty Disallow is no rule
    CHECK(robots_rules().allowed("/x"));
    CHECK_FALSE(robots_rules::disallow_all().allowed("/x"));
    CHECK(robots_rules::disallow_all().allowed("/robots.txt"));
    // Past 500 KiB nothing is read.
    std::string big = "User-agent: *\n" + std::string(robots_rules::max_size, '\n') + "Disallow: /\n";
    CHECK(robots_rules::parse(big, "bot").allowed("/x"));
    CHECK_FALSE(robots_rules::parse("User-agent: *\nCrawl-delay: soon\n", "bot").crawl_delay().has_value());
}
