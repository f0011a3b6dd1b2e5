// What every Redis-backed limiter shares (redis::token_bucket, redis::sliding_window)
// beyond the verbs of basic_limiter: the Redis key of a key and the configuration calls.
// The named limiters derive from it and add their constructors, setters and accessors.
#pragma once

#include <sluice/basic_limiter.hpp>
#include <sluice/error.hpp>
#include <sluice/redis/detail/store/acquire_fsm.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/redis_op.hpp>
#include <sluice/redis/detail/store/try_fsm.hpp>
#include <sluice/redis/shared_options.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/compose.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::redis::detail {

/// `Core`: a shared_backend with script_for() and args() (see redis_op); `AcquireFsm`: the
/// state machine behind async_acquire, which differs per limiter (reserve ahead, or ask
/// again). The verbs are basic_limiter's, answered by script calls (script_answers).
template <class Core, class AcquireFsm>
class shared_limiter : public basic_limiter<Core, script_answers<AcquireFsm>> {
    using base_type = basic_limiter<Core, script_answers<AcquireFsm>>;

public:
    using client_type = typename Core::client_type;
    using executor_type = typename Core::executor_type;
    using clock_type = typename Core::clock_type;

    shared_limiter(shared_limiter&&) noexcept = default;
    shared_limiter& operator=(shared_limiter&&) noexcept = default;

    /// The Redis key that holds `key`'s state.
    std::string redis_key(std::string_view key) const { return this->state_->key_for(key); }

protected:
    using core_type = Core;

    // set_rate, set_window: a new span (interval, window) for `key`, rounded up to whole
    // us; one that is not positive is Core::bad_span. One configure script call.
    template <class Token>
    auto async_set_span(std::string_view key, std::chrono::nanoseconds span, Token&& token)
    {
        auto req = Core::configure_request(span.count(), 0);
        if (span.count() <= 0) req.second = make_error_code(Core::bad_span);
        return async_configure(key, req, std::forward<Token>(token));
    }

    // set_burst, set_limit: a new count for `key`; 0 is error::invalid_limit.
    template <class Token>
    auto async_set_count(std::string_view key, std::uint64_t count, Token&& token)
    {
        auto req = Core::configure_request(0, count);
        if (count == 0) req.second = make_error_code(error::invalid_limit);
        return async_configure(key, req, std::forward<Token>(token));
    }

    template <class Token>
    auto async_configure(std::string_view key, std::pair<eval_request, boost::system::error_code> r, Token&& token)
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code)>(
            redis_op<Core, configure_fsm>{this->state_, configure_fsm(this->state_->key_for(key), r.first, r.second)},
            token, this->state_->client().get_executor());
    }

    explicit shared_limiter(std::shared_ptr<Core> core) : base_type(std::move(core)) {}

    ~shared_limiter() = default;
};

} // namespace sluice::redis::detail
