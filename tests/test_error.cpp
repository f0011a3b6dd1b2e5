#include <sluice/error.hpp>

#include <boost/system/system_error.hpp>
#include <doctest/doctest.h>

#include <set>
#include <string>

using sluice::error;

TEST_SUITE_BEGIN("error");

TEST_CASE("the category is named sluice")
{
    CHECK(std::string(sluice::error_category().name()) == "sluice");
    // A single instance: codes made in different places compare equal.
    CHECK(&sluice::error_category() == &sluice::make_error_code(error::closed).category());
}

TEST_CASE("every enumerator has its own message")
{
    const std::string unknown = sluice::error_category().message(0);
    std::set<std::string> seen;
    for (int v = static_cast<int>(error::invalid_rate); v <= static_cast<int>(error::stale_admission); ++v) {
        CAPTURE(v);
        auto ec = sluice::make_error_code(static_cast<error>(v));
        CHECK(ec.value() == v);
        CHECK(ec.category() == sluice::error_category());
        CHECK(ec.failed());
        std::string m = ec.message();
        CHECK_FALSE(m.empty());
        CHECK(m != unknown);
        CHECK(seen.insert(m).second);
    }
    CHECK(seen.size() == 29);
}

TEST_CASE("error converts implicitly to error_code and compares")
{
    boost::system::error_code ec = error::parse_error;
    CHECK(ec == error::parse_error);
    CHECK(ec != error::invalid_rate);
    CHECK(ec.category() == sluice::error_category());
    boost::system::system_error se(error::invalid_limit);
    CHECK(se.code() == error::invalid_limit);
}

TEST_SUITE_END();
