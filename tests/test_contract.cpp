// Every public local limiter keeps the one contract (sluice::limiter, local_limiter): a
// compile-time check of each type, and one generic function run on each of them.
#include "contract_support.hpp"

#include <sluice/adaptive_concurrency.hpp>
#include <sluice/adaptive_rate.hpp>
#include <sluice/all_of.hpp>
#include <sluice/basic_limiter.hpp>
#include <sluice/concurrency_limit.hpp>
#include <sluice/fixed_window.hpp>
#include <sluice/keyed.hpp>
#include <sluice/leaky_bucket.hpp>
#include <sluice/limiter.hpp>
#include <sluice/manual_clock.hpp>
#include <sluice/shm.hpp>
#include <sluice/sliding_window.hpp>
#include <sluice/sliding_window_counter.hpp>
#include <sluice/time_wheel.hpp>
#include <sluice/token_bucket.hpp>
#include <sluice/tsc_clock.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <unistd.h>

using namespace std::chrono_literals;
using sluice::limiter;
using sluice::local_limiter;

namespace {

using strand = boost::asio::strand<boost::asio::io_context::executor_type>;
using clk = sluice::basic_manual_clock<struct contract_tag>;

// The contract, for every public limiter type, on the default clock and executor, on
// another clock, and on another executor type.
static_assert(local_limiter<sluice::token_bucket<>>);
static_assert(local_limiter<sluice::leaky_bucket<>>);
static_assert(local_limiter<sluice::fixed_window<>>);
static_assert(local_limiter<sluice::sliding_window<>>);
static_assert(local_limiter<sluice::sliding_window_counter<>>);
static_assert(local_limiter<sluice::time_wheel<>>);
static_assert(local_limiter<sluice::all_of<sluice::policy::gcra, sluice::policy::sliding_log>>);
static_assert(local_limiter<sluice::rate_limiter<sluice::policy::gcra>>);
static_assert(local_limiter<sluice::concurrency_limit<>>);
static_assert(local_limiter<sluice::adaptive_concurrency<>>);
static_assert(local_limiter<sluice::adaptive_rate<>>);
static_assert(local_limiter<sluice::keyed<sluice::token_bucket<>>, std::string_view>);
static_assert(local_limiter<sluice::keyed<sluice::leaky_bucket<>>, std::string>);
static_assert(local_limiter<sluice::keyed<sluice::sliding_window<>, std::uint64_t>, std::uint64_t>);
static_assert(local_limiter<sluice::shm::token_bucket<>>);
static_assert(local_limiter<sluice::shm::leaky_bucket<>>);
static_assert(local_limiter<sluice::shm::token_bucket<std::chrono::steady_clock, strand>>);
static_assert(local_limiter<sluice::shm::keyed_bucket<>, std::string_view>);
static_assert(local_limiter<sluice::shm::keyed_bucket<>, std::uint64_t>);
static_assert(local_limiter<sluice::shm::keyed_bucket<clk, strand>, std::string_view>);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static_assert(local_limiter<sluice::shm::keyed<>, std::string_view>);   // the former name
#pragma GCC diagnostic pop
static_assert(local_limiter<sluice::token_bucket<clk>>);
static_assert(local_limiter<sluice::token_bucket<sluice::tsc_clock>>);
static_assert(local_limiter<sluice::concurrency_limit<clk, strand>>);
static_assert(local_limiter<sluice::keyed<sluice::fixed_window<clk, strand>>, std::string_view>);

// A keyed limiter takes its key in every call: without one it is not a limiter.
static_assert(!limiter<sluice::keyed<sluice::token_bucket<>>>);
static_assert(!limiter<sluice::token_bucket<>, std::string_view>);
static_assert(!limiter<sluice::shm::keyed_bucket<>>);

// Every limiter is one front (basic_limiter) over its backend.
static_assert(std::is_base_of_v<sluice::basic_limiter<sluice::detail::rate_engine<sluice::policy::gcra, sluice::default_clock,
                                                                                  boost::asio::any_io_executor>,
                                                      sluice::detail::local_answers<>>,
                                sluice::token_bucket<>>);

// Runs `check` (one of contract_support.hpp's functions) to its end.
void run(boost::asio::io_context& io, boost::asio::awaitable<void> check)
{
    std::exception_ptr failed;
    bool done = false;
    boost::asio::co_spawn(io, std::move(check), [&](std::exception_ptr e) {
        failed = e;
        done = true;
    });
    io.run();
    REQUIRE(done);
    if (failed) std::rethrow_exception(failed);
}

// Runs exercise() on `l`, which admits `capacity` permits at once, to its end.
template <class L, class... Key>
void run(boost::asio::io_context& io, L& l, std::size_t capacity, const Key&... key)
{
    run(io, contract::exercise(l, capacity, key...));
}

const sluice::rate two_an_hour = sluice::rate::per(2, 1h);

} // namespace

TEST_SUITE_BEGIN("contract");

TEST_CASE("one generic function runs on every local limiter")
{
    boost::asio::io_context io;
    SUBCASE("token_bucket") {
        sluice::token_bucket l(io, two_an_hour, 2);
        run(io, l, 2);
    }
    SUBCASE("leaky_bucket: one at a time") {
        sluice::leaky_bucket l(io, sluice::rate::per(1, 1h));
        run(io, l, 1);
    }
    SUBCASE("fixed_window") {
        sluice::fixed_window l(io, 2, 1h);
        run(io, l, 2);
    }
    SUBCASE("sliding_window") {
        sluice::sliding_window l(io, 2, 1h);
        run(io, l, 2);
    }
    SUBCASE("sliding_window_counter") {
        sluice::sliding_window_counter l(io, 2, 1h);
        run(io, l, 2);
    }
    SUBCASE("time_wheel") {
        sluice::time_wheel l(io, 2, 1min, 60);
        run(io, l, 2);
    }
    SUBCASE("all_of") {
        sluice::all_of<sluice::policy::gcra, sluice::policy::sliding_log> l(io, std::tuple{two_an_hour, 10},
                                                                            std::tuple{2, 1h});
        run(io, l, 2);
    }
    SUBCASE("concurrency_limit") {
        sluice::concurrency_limit l(io, 2);
        run(io, l, 2);
    }
    SUBCASE("adaptive_concurrency") {
        sluice::adaptive_concurrency l(io, {.initial_limit = 2});
        run(io, l, 2);
    }
    SUBCASE("adaptive_rate") {
        sluice::adaptive_rate_options o;
        o.initial = two_an_hour;
        o.floor = sluice::rate::per(1, 24h);
        sluice::adaptive_rate l(io, o, 2);
        run(io, l, 2);
    }
    SUBCASE("shm::token_bucket") {
        std::string name = "/sluice-contract-tb-" + std::to_string(::getpid());
        sluice::shm::remove(name);
        {
            sluice::shm::token_bucket<> l(io, name, two_an_hour, 2);
            run(io, l, 2);
        }
        CHECK(sluice::shm::remove(name));
    }
    SUBCASE("shm::leaky_bucket: one at a time") {
        std::string name = "/sluice-contract-lb-" + std::to_string(::getpid());
        sluice::shm::remove(name);
        {
            sluice::shm::leaky_bucket<> l(io, name, sluice::rate::per(1, 1h));
            run(io, l, 1);
        }
        CHECK(sluice::shm::remove(name));
    }
    SUBCASE("keyed token_bucket, a std::string key given as a temporary") {
        sluice::keyed<sluice::token_bucket<>> l(io, two_an_hour, 2);
        run(io, l, 2, std::string("client-1"));
    }
    SUBCASE("keyed sliding_window, integer keys") {
        sluice::keyed<sluice::sliding_window<>, std::uint64_t> l(io, 2, 1h);
        run(io, l, 2, std::uint64_t{42});
    }
    SUBCASE("shm::keyed_bucket, a string key") {
        std::string name = "/sluice-contract-kb-" + std::to_string(::getpid());
        sluice::shm::remove(name);
        {
            sluice::shm::keyed_bucket<> l(io, name, two_an_hour, 2);
            run(io, l, 2, std::string_view("client-1"));
        }
        CHECK(sluice::shm::remove(name));
    }
    SUBCASE("shm::keyed_bucket, integer keys") {
        std::string name = "/sluice-contract-ki-" + std::to_string(::getpid());
        sluice::shm::remove(name);
        {
            sluice::shm::keyed_bucket<> l(io, name, two_an_hour, 2, {.integer_keys = true});
            run(io, l, 2, std::uint64_t{42});
        }
        CHECK(sluice::shm::remove(name));
    }
}

TEST_CASE("an asynchronous operation owns its key: a view of a buffer reused before it starts")
{
    boost::asio::io_context io;
    SUBCASE("keyed token_bucket") {
        sluice::keyed<sluice::token_bucket<>> l(io, two_an_hour, 2);
        run(io, contract::views_are_owned(l));
    }
    SUBCASE("keyed sliding_window") {
        sluice::keyed<sluice::sliding_window<>> l(io, 2, 1h);
        run(io, contract::views_are_owned(l));
    }
    SUBCASE("shm::keyed_bucket") {
        std::string name = "/sluice-contract-kv-" + std::to_string(::getpid());
        sluice::shm::remove(name);
        {
            sluice::shm::keyed_bucket<> l(io, name, two_an_hour, 2);
            run(io, contract::views_are_owned(l));
        }
        CHECK(sluice::shm::remove(name));
    }
}

TEST_SUITE_END();
