// How a local backend answers basic_limiter's verbs: a try decided in the call and posted,
// an acquire that waits in a wait engine. `Grant` says what the handler receives.
#pragma once

#include <sluice/decision.hpp>
#include <sluice/detail/wait/immediate.hpp>
#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/error.hpp>

#include <boost/system/error_code.hpp>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace sluice::detail {

/// The initiation of a local async_try_acquire: decides in the call and posts the answer,
/// error::closed after close().
template <class State, class Grant>
struct answer_now {
    std::shared_ptr<State> state;

    using executor_type = typename State::executor_type;
    executor_type get_executor() const noexcept { return state->get_executor(); }

    template <class Handler, class... Key>
    void operator()(Handler&& handler, std::uint64_t n, const Key&... key) const
    {
        if (state->closed()) {
            const auto closed = make_error_code(error::closed);
            return post_answer(std::move(handler), operation_executor(*state), closed, Grant::refused(closed));
        }
        post_answer(std::move(handler), operation_executor(*state), boost::system::error_code(),
                    Grant::answer(state, state->try_acquire(key..., n), n));
    }
};

/// The answers of a local backend (a wait engine, a keyed store, the shm table): tries
/// decided in the call, waiters in a wait engine (initiate_acquire).
template <class Grant = no_grant>
struct local_answers {
    static constexpr bool at_once = true;
    using answer_type = typename Grant::answer_type;
    using acquire_signature = typename Grant::signature;

    template <class State, class... Key>
    [[gnu::always_inline]] static answer_type try_acquire(const std::shared_ptr<State>& s, std::uint64_t n,
                                                          const Key&... key) noexcept(noexcept(s->try_acquire(key..., n)))
    {
        // Without a grant to make, the decision goes back as the state returned it: passed
        // through Grant::answer, GCC copied it once more through the stack on every try.
        if constexpr (std::is_same_v<Grant, no_grant>)
            return s->try_acquire(key..., n);
        else
            return Grant::answer(s, s->try_acquire(key..., n), n);
    }

    /// Shadow mode: a refused try's answer, admitted without taking anything.
    template <class State>
    static answer_type admitted_in_dark(const std::shared_ptr<State>& s, std::uint64_t n) noexcept
    {
        return Grant::admitted_in_dark(s, n);
    }

    template <class State>
    static answer_now<State, Grant> try_initiation(std::shared_ptr<State> s) noexcept
    {
        return {std::move(s)};
    }

    template <class State>
    static initiate_acquire<State, Grant> acquire_initiation(std::shared_ptr<State> s) noexcept
    {
        return {std::move(s)};
    }
};

} // namespace sluice::detail
