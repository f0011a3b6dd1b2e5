// Timer wait traits for manual clocks: the timer service never sleeps on a manual clock
// (its time only moves by hand), it polls, so tests that advance the clock and run
// io_context::poll() see expired timers at once.
#pragma once

#include <sluice/manual_clock.hpp>

#include <boost/asio/wait_traits.hpp>

template <class Tag>
struct boost::asio::wait_traits<sluice::basic_manual_clock<Tag>> {
    using clock = sluice::basic_manual_clock<Tag>;

    static typename clock::duration to_wait_duration(const typename clock::duration&) { return {}; }

    static typename clock::duration to_wait_duration(const typename clock::time_point&) { return {}; }
};
