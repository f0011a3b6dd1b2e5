// What a failed acquire leaves in an empty permit, shared by the permits of
// concurrency_limit and adaptive_concurrency.
#pragma once

#include <sluice/error.hpp>

#include <boost/system/error_code.hpp>

#include <utility>

namespace sluice::detail {

/// The error half of a permit: empty for a granted, default-constructed or released
/// permit; why it is empty for one from a failed acquire.
class permit_error {
public:
    /// Why a failed acquire gave this empty permit: error::timed_out or
    /// error::timed_out (timed_out() tells either), error::closed,
    /// error::queue_full, error::exceeds_limit, error::invalid_count,
    /// asio::error::operation_aborted. Empty for a granted, default-constructed or
    /// released permit.
    const boost::system::error_code& error() const noexcept { return ec_; }

    /// Whether the acquire failed on its deadline (error::timed_out or
    /// error::timed_out).
    bool timed_out() const noexcept
    {
        return ec_ == sluice::error::timed_out;
    }

    /// Whether the acquire failed because the limit was closed.
    bool closed() const noexcept { return ec_ == sluice::error::closed; }

protected:
    permit_error() noexcept = default;
    explicit permit_error(const boost::system::error_code& ec) noexcept : ec_(ec) {}
    permit_error(permit_error&& o) noexcept : ec_(std::exchange(o.ec_, {})) {}
    permit_error& operator=(permit_error&& o) noexcept
    {
        ec_ = std::exchange(o.ec_, {});
        return *this;
    }
    ~permit_error() = default;

private:
    boost::system::error_code ec_;
};

} // namespace sluice::detail
