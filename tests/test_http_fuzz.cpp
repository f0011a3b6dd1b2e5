// Seeded random-input test of the sluice::http parsers: mutations of valid fields (byte
// flips, truncations, insertions of the characters the grammars care about, splices of two
// inputs). Every input must parse or fail cleanly (run it under ASan and UBSan), and every
// input that parses must round-trip: format(parse(x)) is canonical, parses to the same
// value, and formats to itself.
//
// SLUICE_FUZZ_ITERATIONS sets the number of inputs (default 1,000,000: about 4 s);
// SLUICE_FUZZ_SEED the seed (default 1).
#include <sluice/http/ratelimit_fields.hpp>
#include <sluice/http/retry_after.hpp>
#include <sluice/http/structured_field.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "rng.hpp"

namespace http = sluice::http;

namespace {

std::uint64_t env_or(const char* name, std::uint64_t fallback)
{
    const char* v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

const std::vector<std::string> seeds = {
    R"("default";q=100;w=10)",
    R"("permin";q=50;w=60,"perhr";q=1000;w=3600)",
    R"("peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:)",
    R"("default";q=100;w=1;sluice-burst=10)",
    R"("default";r=50;t=30)",
    R"("default";r=999;pk=:dHJpYWwxMjEzMjM=:)",
    R"("a";t=3;r=7 ,	"b";  r=0)",
    R"("x\"y\\z";r=1;acme=?0;d=-12.5;tk=abc/d:e, ("i" 1;a 2.25);p)",
    R"(limit=100, remaining=50, reset=30)",
    "120",
    "Sun, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 GMT",
    "Sun Nov  6 08:49:37 1994",
    "Tue, 29 Feb 2000 23:59:60 GMT",
};

const std::string interesting = "\"\\;=,() \t:?*-.0123456789abcqrtwpkAZ@%\x01\x7f\xff/+";

std::string mutate(sluice_test::rng& gen, std::string s)
{
    auto pick = [&](std::size_t n) { return static_cast<std::size_t>(gen() % n); };
    int steps = 1 + static_cast<int>(gen() % 4);
    for (int k = 0; k < steps; ++k) {
        switch (gen() % 6) {
        case 0: // flip a byte
            if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (gen() % 8));
            break;
        case 1: // replace with an interesting byte
            if (!s.empty()) s[pick(s.size())] = interesting[pick(interesting.size())];
            break;
        case 2: // insert
            s.insert(s.begin() + static_cast<std::ptrdiff_t>(pick(s.size() + 1)), interesting[pick(interesting.size())]);
            break;
        case 3: // truncate
            s.resize(pick(s.size() + 1));
            break;
        case 4: // delete a range
            if (!s.empty()) {
                std::size_t at = pick(s.size());
                s.erase(at, 1 + pick(4));
            }
            break;
        default: // splice another seed in
        {
            const std::string& o = seeds[pick(seeds.size())];
            std::size_t at = pick(s.size() + 1), from = pick(o.size() + 1);
            s.insert(at, o.substr(from, pick(o.size() - from + 1)));
            break;
        }
        }
    }
    return s;
}

struct counts {
    std::uint64_t policy_ok = 0, limit_ok = 0, list_ok = 0, retry_ok = 0;
};

void check_one(const std::string& x, counts& c)
{
    auto now = std::chrono::system_clock::from_time_t(1780000000);
    if (auto l = http::sf::parse_list(x)) {
        ++c.list_ok;
        auto s = http::sf::serialize_list(*l);
        REQUIRE_MESSAGE(s.has_value(), x); // everything the parser accepts can be written back
        auto again = http::sf::parse_list(*s);
        REQUIRE_MESSAGE(again.has_value(), x);
        REQUIRE_MESSAGE(*again == *l, x);
        REQUIRE_MESSAGE(*http::sf::serialize_list(*again) == *s, x);
    }
    if (auto p = http::parse_ratelimit_policy(x)) {
        ++c.policy_ok;
        auto s = http::format_ratelimit_policy(*p);
        REQUIRE_MESSAGE(s.has_value(), x);
        auto again = http::parse_ratelimit_policy(*s);
        REQUIRE_MESSAGE(again.has_value(), x);
        REQUIRE_MESSAGE(*again == *p, x);
        REQUIRE_MESSAGE(*http::format_ratelimit_policy(*again) == *s, x);
    }
    if (auto l = http::parse_ratelimit(x)) {
        ++c.limit_ok;
        auto s = http::format_ratelimit(*l);
        REQUIRE_MESSAGE(s.has_value(), x);
        auto again = http::parse_ratelimit(*s);
        REQUIRE_MESSAGE(again.has_value(), x);
        REQUIRE_MESSAGE(*again == *l, x);
    }
    if (auto r = http::parse_retry_after(x, now)) {
        ++c.retry_ok;
        auto s = http::format_retry_after(*r);
        REQUIRE_MESSAGE(s.has_value(), x);
        auto again = http::parse_retry_after(*s, now);
        REQUIRE_MESSAGE(again.has_value(), x);
        REQUIRE_MESSAGE(*again == *r, x);
        REQUIRE_MESSAGE(*http::format_retry_after(*again) == *s, x);
    }
}

} // namespace

TEST_CASE("http parsers: mutated fields parse or fail cleanly, and what parses round-trips")
{
    const std::uint64_t n = env_or("SLUICE_FUZZ_ITERATIONS", 1'000'000);
    sluice_test::rng gen{env_or("SLUICE_FUZZ_SEED", 1)};
    counts c;
    for (const auto& s : seeds) check_one(s, c);
    for (std::uint64_t i = 0; i < n; ++i) {
        std::string x = seeds[gen() % seeds.size()];
        // Mutate a mutation now and then, to wander further from the seeds.
        x = mutate(gen, x);
        if (gen() % 4 == 0) x = mutate(gen, x);
        check_one(x, c);
    }
    std::printf("fuzz: %llu inputs; parsed as List %llu, RateLimit-Policy %llu, RateLimit %llu, Retry-After %llu\n",
                static_cast<unsigned long long>(n), static_cast<unsigned long long>(c.list_ok),
                static_cast<unsigned long long>(c.policy_ok), static_cast<unsigned long long>(c.limit_ok),
                static_cast<unsigned long long>(c.retry_ok));
    // The mutations must reach both sides of each parser, or the test proves little.
    CHECK(c.policy_ok > n / 100);
    CHECK(c.limit_ok > n / 100);
    CHECK(c.retry_ok > n / 100);
    CHECK(c.list_ok < n);
}
