// Shared pieces of the sans-io queue tests: waiter nodes that record their completion,
// and a helper that runs one queue operation and returns what it completed, in order.
#pragma once

#include <sluice/detail/wait/waiter.hpp>

#include <boost/system/error_code.hpp>

#include <deque>
#include <utility>
#include <vector>

namespace sluice_test {

/// A waiter node owned by the test. complete() only records the call.
struct test_waiter : sluice::detail::waiter {
    int id = 0;
    int completions = 0;

    explicit test_waiter(int i = 0) : id(i)
    {
        complete = &on_complete;
        destroy = &on_destroy;
    }

    static std::vector<test_waiter*>& log()
    {
        static std::vector<test_waiter*> v;
        return v;
    }

    static void on_complete(sluice::detail::waiter* w, bool)
    {
        auto* t = static_cast<test_waiter*>(w);
        ++t->completions;
        log().push_back(t);
    }

    static void on_destroy(sluice::detail::waiter*) {}
};

/// Runs f(done) and completes what it handed out; returns those waiters in order.
template <class F>
std::vector<test_waiter*> handed_out(F&& f)
{
    sluice::detail::completion_list done;
    std::forward<F>(f)(done);
    test_waiter::log().clear();
    done.complete_all();
    return std::exchange(test_waiter::log(), {});
}

/// Ids of waiters, for readable comparisons.
inline std::vector<int> ids(const std::vector<test_waiter*>& ws)
{
    std::vector<int> v;
    for (auto* w : ws)
        v.push_back(w->id);
    return v;
}

/// Stable storage for the waiters of a test.
struct waiter_pool {
    std::deque<test_waiter> all;
    test_waiter* make() { return &all.emplace_back(static_cast<int>(all.size())); }
};

} // namespace sluice_test
