// Finds the current master through Redis Sentinel, as an Asio I/O object.
#pragma once

#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/redis/detail/store/sentinel_impl.hpp>
#include <sluice/redis/sentinel_config.hpp>
#include <sluice/redis/sentinel_error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis {

/// Asks Sentinels for the master of a name and checks the answer with ROLE on that
/// instance, after Sentinel's client guidelines (see async_resolve). A connection whose
/// connection_config::sentinel lists Sentinels uses one at every connection attempt; use
/// it directly to find the master for something else.
///
/// Thread-safety: like an Asio socket; async_resolve may be called from any thread (it
/// dispatches to the executor). Several resolutions may run at once.
template <class Executor = boost::asio::any_io_executor>
class basic_sentinel_resolver {
public:
    /// The executor the resolution's I/O runs on.
    using executor_type = Executor;

    /// The resolver's type on another executor type, as on Asio's I/O objects.
    template <class Other>
    struct rebind_executor {
        /// The same resolver on another executor type.
        using other = basic_sentinel_resolver<Other>;
    };

    /// `master_password` authenticates the ROLE check on the master (the Sentinels' own
    /// password is cfg.password). Throws boost::system::system_error(error::invalid_option)
    /// when cfg has no Sentinels, no master name or a timeout that is not positive.
    basic_sentinel_resolver(const executor_type& ex, sentinel_config cfg,
                            std::string master_password = {})
        : ex_(ex), impl_(detail::make_sentinel(ex, std::move(cfg), std::move(master_password)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <sluice::detail::execution_context_ref Context>
    basic_sentinel_resolver(Context& ctx, sentinel_config cfg, std::string master_password = {})
        : basic_sentinel_resolver(executor_type(ctx.get_executor()), std::move(cfg), std::move(master_password))
    {
    }

    /// The executor the resolution's I/O runs on.
    executor_type get_executor() const noexcept { return ex_; }

    /// One discovery round: each Sentinel in turn (the one last verified first) is asked
    /// `SENTINEL get-master-addr-by-name` (and, in the same round trip, `SENTINEL
    /// SENTINELS`, which refreshes the list); the instance it names is asked `ROLE`; the
    /// first that says "master" is the answer, and its Sentinel is asked first next time,
    /// followed by the Sentinels it reports alive, then the configured ones it does not. An
    /// instance that is not a master (stale Sentinel, demoted master) is never the answer:
    /// the next Sentinel is asked. Each step is bounded by sentinel_config::timeout, so a
    /// round takes at most 2 x timeout per Sentinel.
    ///
    /// Handler signature: void(boost::system::error_code, boost::asio::ip::tcp::endpoint):
    /// the master's address as connected to for the ROLE check.
    ///
    /// Errors: a sentinel_error (the failure furthest along when the Sentinels disagree),
    /// asio::error::operation_aborted.
    ///
    /// Executor: the handler runs on its associated executor (default: the resolver's),
    /// never inside this call.
    ///
    /// Per-operation cancellation: terminal. The step in progress is abandoned (a name
    /// being resolved finishes first) and the operation completes with operation_aborted.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code,
                                                   boost::asio::ip::tcp::endpoint))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_resolve(Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code,
                                                       boost::asio::ip::tcp::endpoint)>(
            [](auto handler, std::shared_ptr<detail::sentinel_impl> impl) {
                detail::resolve_master(impl, detail::resolve_master_handler(std::move(handler)));
            },
            token, impl_);
    }

    /// The Sentinels in the order the next resolution asks them (the one whose answer was
    /// verified last comes first), the configured ones and those learnt from the
    /// Sentinels. Call it from the executor.
    std::vector<sentinel_address> sentinels() const { return detail::sentinel_order(*impl_); }

private:
    executor_type ex_;
    std::shared_ptr<detail::sentinel_impl> impl_;
};

/// A sentinel resolver on any_io_executor.
using sentinel_resolver = basic_sentinel_resolver<>;

} // namespace sluice::redis
