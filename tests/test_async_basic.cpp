#include "async_support.hpp"

#include <sluice/token_bucket.hpp>
#include <sluice/fixed_window.hpp>

#include <doctest/doctest.h>

using namespace std::chrono_literals;
using clk = sluice::basic_manual_clock<struct basic_tag>;
using sluice_test::drain;

TEST_CASE("smoke: leaky queue on manual clock")
{
    boost::asio::io_context io;
    clk::set(clk::duration{1'000'000'000});
    sluice::token_bucket<clk> bucket(io, sluice::rate::per_second(10), 1);
    std::vector<std::shared_ptr<sluice_test::outcome>> outs;
    for (int i = 0; i < 3; ++i) {
        auto [o, h] = sluice_test::make_recorder<clk>();
        bucket.async_acquire(1, 1s, h);
        outs.push_back(o);
    }
    CHECK_FALSE(outs[0]->done());   // never inline
    drain(io);
    CHECK(outs[0]->ok());
    CHECK_FALSE(outs[1]->done());
    sluice_test::advance<clk>(io, 99ms);
    CHECK_FALSE(outs[1]->done());
    sluice_test::advance<clk>(io, 1ms);
    CHECK(outs[1]->ok());
    sluice_test::advance<clk>(io, 100ms);
    CHECK(outs[2]->ok());
}

TEST_CASE("smoke: fixed window queue")
{
    boost::asio::io_context io;
    clk::set(clk::duration{0});
    sluice::fixed_window<clk> w(io, 2, 1s);
    std::vector<std::shared_ptr<sluice_test::outcome>> outs;
    for (int i = 0; i < 5; ++i) {
        auto [o, h] = sluice_test::make_recorder<clk>();
        w.async_acquire(1, 10s, h);
        outs.push_back(o);
    }
    drain(io);
    CHECK(outs[1]->ok());
    CHECK_FALSE(outs[2]->done());
    sluice_test::advance<clk>(io, 1s);
    CHECK(outs[3]->ok());
    CHECK_FALSE(outs[4]->done());
    sluice_test::advance<clk>(io, 1s);
    CHECK(outs[4]->ok());
}
