// One Redis connection as an Asio I/O object: hiredis' asynchronous API driven by Asio.
#pragma once

#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/redis/basic_client.hpp>
#include <sluice/redis/connection_config.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <utility>

namespace sluice::redis {

/// One logical connection to a Redis server: pipelined (any number of commands in
/// flight, replies matched in order), reconnecting with exponential backoff. Its
/// operations, executor, cancellation and thread-safety are those of basic_client.
///
/// Errors: error::backend_unavailable (no connection: commands are not queued between
/// reconnection attempts but fail at once; the link was lost or reset while the command
/// was in flight; or no reply within command_timeout, after which the link is reset),
/// error::closed, error::invalid_option (an empty command), error::backend_error (an error
/// reply to async_eval; BUSY and LOADING, where the server ran nothing and cannot answer
/// now, are error::backend_unavailable), asio::error::operation_aborted (per-operation
/// cancellation).
template <class Executor = boost::asio::any_io_executor>
class basic_connection : public basic_client<Executor> {
public:
    /// The connection's type on another executor type, as on Asio's I/O objects.
    template <class Other>
    struct rebind_executor {
        /// The same connection on another executor type.
        using other = basic_connection<Other>;
    };

    /// Starts connecting at once.
    explicit basic_connection(const Executor& ex, connection_config cfg = {})
        : basic_client<Executor>(ex, detail::make_connection(ex, std::move(cfg)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <sluice::detail::execution_context_ref Context>
    explicit basic_connection(Context& ctx, connection_config cfg = {})
        : basic_connection(Executor(ctx.get_executor()), std::move(cfg))
    {
    }

    /// True once the handshake succeeded, until the link is lost or closed.
    bool connected() const noexcept { return this->impl() && detail::connected(*this->impl()); }
};

/// A connection on any_io_executor.
using connection = basic_connection<>;

} // namespace sluice::redis
