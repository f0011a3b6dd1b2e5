// What a coroutine's acquire() tells: admitted, timed out, closed, or another error.
#pragma once

#include <sluice/error.hpp>

#include <boost/system/error_code.hpp>

namespace sluice {

/// The outcome of acquire(): admitted when it converts to true; otherwise why not. It is
/// returned, never thrown, for every error (cancellation included), so that the common
/// coroutine call needs no as_tuple:
///
///     if (auto r = co_await bucket.acquire(250ms); !r) {
///         if (r.closed()) co_return;          // shutting down
///         co_return too_busy();               // r.timed_out(), or r.error() for the rest
///     }
class acquire_result {
public:
    /// Admitted.
    acquire_result() noexcept = default;
    /// Admitted when `ec` is empty, refused for that reason otherwise.
    explicit acquire_result(const boost::system::error_code& ec) noexcept : ec_(ec) {}

    /// Whether the permits were admitted.
    explicit operator bool() const noexcept { return !ec_; }

    /// Refused because the wait would exceed max_wait (error::timed_out, nothing
    /// consumed) or the deadline passed while queued (error::timed_out).
    bool timed_out() const noexcept
    {
        return ec_ == sluice::error::timed_out;
    }

    /// Refused because the limiter was closed or destroyed (error::closed).
    bool closed() const noexcept { return ec_ == sluice::error::closed; }

    /// Why it was refused (empty when admitted): also error::queue_full, error::exceeds_limit,
    /// error::invalid_count, asio::error::operation_aborted (cancelled).
    const boost::system::error_code& error() const noexcept { return ec_; }

private:
    boost::system::error_code ec_;
};

} // namespace sluice
