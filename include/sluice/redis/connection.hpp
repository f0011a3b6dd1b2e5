// One Redis connection as an Asio I/O object: hiredis' asynchronous API driven by Asio.
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/detail/connection_impl.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice::redis {

/// One logical connection to a Redis server: pipelined (any number of commands in
/// flight, replies matched in order), reconnecting with exponential backoff.
///
/// Handler signature of both operations: void(boost::system::error_code, reply).
///
/// Executor: completions run on the handler's associated executor (default: the
/// connection's), never inside the initiating call. The connection's own work (hiredis'
/// reads and writes as stream_descriptor waits, its timers) runs on its executor: no
/// thread of its own.
///
/// Thread-safety: like an Asio socket. Its internal handlers run on its executor, so if
/// several threads run the io_context, give it a strand. async_exec, async_eval and
/// close may be called from any thread (they dispatch to the executor).
///
/// Errors: error::backend_unavailable (no connection: commands are not queued between
/// reconnection attempts but fail at once; or the link was lost or reset while the
/// command was in flight), error::timed_out (no reply within command_timeout; the link
/// is reset), error::closed, error::invalid_option (an empty command),
/// asio::error::operation_aborted (per-operation cancellation).
///
/// Cancellation: per-operation, terminal and partial. The operation completes at once with
/// operation_aborted; the command may still run on the server and its late reply is
/// dropped. close() and the destructor complete every pending operation with
/// error::closed. The slot is taken in the initiating call; emit the signal where the
/// handler runs (its associated executor), as for any Asio operation. The request is
/// carried to the connection's executor, where a reply that got there first wins: either
/// way the handler runs once, on its own executor.
template <class Executor = boost::asio::any_io_executor>
class basic_connection {
public:
    /// The executor the connection's I/O runs on.
    using executor_type = Executor;

    /// The connection's type on another executor type, as on Asio's I/O objects.
    template <class Other>
    struct rebind_executor {
        /// The same connection on another executor type.
        using other = basic_connection<Other>;
    };

    /// Starts connecting at once.
    basic_connection(const executor_type& ex, connection_config cfg = {})
        : ex_(ex), impl_(detail::make_connection(ex, std::move(cfg)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <class Context>
    basic_connection(Context& ctx, connection_config cfg = {},
                     std::enable_if_t<std::is_convertible_v<
                         Context&, boost::asio::execution_context&>>* = nullptr)
        : basic_connection(executor_type(ctx.get_executor()), std::move(cfg))
    {
    }

    /// Takes over `other`'s link; `other` may then only be destroyed or assigned to.
    basic_connection(basic_connection&&) noexcept = default;
    /// Closes this connection (pending operations complete with error::closed), then takes
    /// over `other`'s link.
    basic_connection& operator=(basic_connection&& other) noexcept
    {
        if (this != &other) {
            if (impl_) detail::close(impl_);
            ex_ = std::move(other.ex_);
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    basic_connection(const basic_connection&) = delete;
    basic_connection& operator=(const basic_connection&) = delete;

    /// Closes: pending operations complete with error::closed.
    ~basic_connection()
    {
        if (impl_) detail::close(impl_);
    }

    /// The executor the connection's I/O runs on.
    executor_type get_executor() const noexcept { return ex_; }

    /// Sends one command (argv[0] is its name); completes with its reply. An error reply
    /// is not an error_code: reply.type == reply::kind::error.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_exec(std::vector<std::string> argv,
                    Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::connection_impl> impl,
               std::vector<std::string> argv) {
                detail::exec(impl, std::move(argv), detail::exec_handler(std::move(handler)));
            },
            token, impl_, std::move(argv));
    }

    /// EVALSHA sha numkeys keys... args...; on NOSCRIPT (a new or restarted server, or
    /// SCRIPT FLUSH) it loads the script and runs it again, transparently. An error reply
    /// (a failing script, a WRONGTYPE key) completes with error::backend_error and the
    /// reply, whose str says why.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_eval(const script& s, std::vector<std::string> keys,
                    std::vector<std::string> args,
                    Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::connection_impl> impl, script s,
               std::vector<std::string> keys, std::vector<std::string> args) {
                detail::eval(impl, s, std::move(keys), std::move(args),
                             detail::exec_handler(std::move(handler)));
            },
            token, impl_, s, std::move(keys), std::move(args));
    }

    /// True once the handshake succeeded, until the link is lost or closed.
    bool connected() const noexcept { return impl_ && detail::connected(*impl_); }

    /// Pending operations complete with error::closed; later ones too. No reconnection.
    void close()
    {
        if (impl_) detail::close(impl_);
    }

private:
    executor_type ex_;
    std::shared_ptr<detail::connection_impl> impl_;
};

/// A connection on any_io_executor.
using connection = basic_connection<>;

} // namespace sluice::redis
