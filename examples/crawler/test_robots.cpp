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

TEST_CASE("robots: a file past 500 KiB is parsed up to its last line end within them (RFC 9309 2.5)")
{
    const auto max = robots_rules::max_size;
    // n bytes: a group disallowing /private/, then a comment line up to byte n.
    auto lines = [](std::size_t n) {
        const std::string head = "User-agent: *\nDisallow: /private/\n";
        return head + std::string(n - head.size() - 1, '#') + "\n";
    };
    // "Allow: /" ends within the limit; the next line ends past it, so does what follows.
    std::string cut = lines(max - 20) + "Allow: /\n" + std::string(40, 'x') + "\nDisallow: /later/\n";
    REQUIRE(cut.size() > max);
    auto r = robots_rules::parse(cut, "bot");
    CHECK(r.rule_count() == 2);
    CHECK_FALSE(r.allowed("/private/x"));   // the longer match still wins
    CHECK(r.allowed("/later/x"));           // past the limit: not read
    // A rule whose line straddles the limit is not read at all: not even "Allow: /".
    std::string straddle = lines(max - 5) + "Allow: /public/\n";
    auto s = robots_rules::parse(straddle, "bot");
    CHECK(s.rule_count() == 1);
    CHECK(s.allowed("/public/x"));
    CHECK_FALSE(s.allowed("/private/x"));
    CHECK_FALSE(robots_rules::parse(lines(max - 5) + "Allow: /private/\n", "bot").allowed("/private/x"));
    // A file of exactly max_size bytes is read whole, its last line too (without a line end).
    std::string exact = lines(max - 11) + "Disallow:/z";
    REQUIRE(exact.size() == max);
    CHECK_FALSE(robots_rules::parse(exact, "bot").allowed("/z"));
    CHECK(robots_rules::parse(exact + "\n", "bot").allowed("/z"));   // one byte more: the last line ends past it
    // No line end within the limit: nothing is read, everything allowed.
    CHECK(robots_rules::parse("User-agent: * Disallow: /" + std::string(max, 'a'), "bot").rule_count() == 0);
    CHECK(robots_rules::read_size == max + 1);
}

TEST_CASE("robots: a hostile pattern costs a pass over the path per piece, not a backtracking search")
{
    // With backtracking to the last '*', each of the path's 200,000 places would be tried
    // against the pattern's 100,000 a's: 2e10 steps. Taken piece by piece, it is linear.
    const std::string path = "/" + std::string(200'000, 'a');
    const std::string pattern = "/*" + std::string(100'000, 'a') + "b";
    CHECK_FALSE(robots_rules::matches(pattern, path));
    CHECK(robots_rules::matches(pattern, path + "b"));
    CHECK(robots_rules::matches("/*a*a*a$", path));
    CHECK_FALSE(robots_rules::matches("/*b*a", path));
    CHECK(robots_rules::matches("/a**a", "/aa"));
    CHECK_FALSE(robots_rules::matches("/ab*ba$", "/aba"));   // the pieces may not overlap
    CHECK(robots_rules::matches("/ab*ba$", "/abba"));
    CHECK(robots_rules::matches("$", ""));
    CHECK_FALSE(robots_rules::matches("$", "/"));
}
