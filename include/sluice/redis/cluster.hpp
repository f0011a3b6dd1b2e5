// Redis Cluster as an Asio I/O object: commands routed to the master that owns the slot.
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/detail/cluster_impl.hpp>
#include <sluice/redis/hash_slot.hpp>
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

/// A client of a Redis Cluster with the operations of basic_connection. A request goes to
/// the master that owns the hash slot of its first key (argv[1] for async_exec, keys[0]
/// for async_eval; hash tags "{...}" honoured; no key: any master). The slot map comes
/// from CLUSTER SLOTS at start and again after a MOVED redirection; ASK is followed with
/// ASKING. A request answered TRYAGAIN (several keys while their slot migrates) or
/// CLUSTERDOWN (slot not served, cluster down), which Redis refuses before running it, is
/// sent again after a pause (5 ms, doubling to 100 ms) while the command timeout allows;
/// then that reply is the answer. One basic_connection-like link per master, made on
/// first use, with the seed's timeouts and password.
///
/// Handler signature and errors: as basic_connection; also error::backend_unavailable
/// when no slot map could be loaded.
///
/// Executor: completions run on the handler's associated executor (default: the
/// client's), never inside the initiating call; the links to the masters and the loading
/// of the slot map run on the client's executor.
///
/// Cancellation: per-operation, terminal and partial, as basic_connection: the operation
/// completes at once with operation_aborted, the command may still run on the server.
/// close() and the destructor complete every pending operation with error::closed. Emit
/// the signal where the handler runs; the request is carried to the client's executor.
///
/// Thread-safety: as basic_connection (an Asio socket): give it a strand if several
/// threads run its io_context.
/// Commands whose first key is not argv[1] (EVAL with keys, XREAD...) are routed wrongly
/// and answered with MOVED, which is then followed: use async_eval for scripts.
template <class Executor = boost::asio::any_io_executor>
class basic_cluster {
public:
    /// The executor the client's I/O runs on.
    using executor_type = Executor;

    /// The cluster's type on another executor type, as on Asio's I/O objects.
    template <class Other>
    struct rebind_executor {
        /// The same cluster on another executor type.
        using other = basic_cluster<Other>;
    };

    /// `seed`: any node of the cluster. Starts loading the slot map at once.
    basic_cluster(const executor_type& ex, connection_config seed)
        : ex_(ex), impl_(detail::make_cluster(ex, std::move(seed)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <class Context>
    basic_cluster(Context& ctx, connection_config seed,
                  std::enable_if_t<std::is_convertible_v<
                      Context&, boost::asio::execution_context&>>* = nullptr)
        : basic_cluster(executor_type(ctx.get_executor()), std::move(seed))
    {
    }

    /// Takes over `other`'s links; `other` may then only be destroyed or assigned to.
    basic_cluster(basic_cluster&&) noexcept = default;
    /// Closes this client (pending operations complete with error::closed), then takes over
    /// `other`'s links.
    basic_cluster& operator=(basic_cluster&& other) noexcept
    {
        if (this != &other) {
            if (impl_) detail::close(impl_);
            ex_ = std::move(other.ex_);
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    basic_cluster(const basic_cluster&) = delete;
    basic_cluster& operator=(const basic_cluster&) = delete;

    /// Closes: pending operations complete with error::closed.
    ~basic_cluster()
    {
        if (impl_) detail::close(impl_);
    }

    /// The executor the client's I/O runs on.
    executor_type get_executor() const noexcept { return ex_; }

    /// Sends one command (argv[0] is its name) to the master of argv[1]'s slot; completes
    /// with its reply, as basic_connection::async_exec.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_exec(std::vector<std::string> argv,
                    Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::cluster_impl> impl,
               std::vector<std::string> argv) {
                detail::exec(impl, std::move(argv), detail::exec_handler(std::move(handler)));
            },
            token, impl_, std::move(argv));
    }

    /// Runs a script (EVALSHA, loading it on NOSCRIPT) on the master of keys[0]'s slot, as
    /// basic_connection::async_eval.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_eval(const script& s, std::vector<std::string> keys,
                    std::vector<std::string> args,
                    Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::cluster_impl> impl, script s,
               std::vector<std::string> keys, std::vector<std::string> args) {
                detail::eval(impl, s, std::move(keys), std::move(args),
                             detail::exec_handler(std::move(handler)));
            },
            token, impl_, s, std::move(keys), std::move(args));
    }

    /// The master ("host:port") this client would send `slot` to; empty before the map is
    /// loaded. For tests and diagnostics; call on the executor.
    std::string node_for_slot(std::uint16_t slot) const
    {
        return impl_ ? detail::slot_owner(*impl_, slot) : std::string();
    }

    /// Pending operations complete with error::closed; later ones too.
    void close()
    {
        if (impl_) detail::close(impl_);
    }

private:
    executor_type ex_;
    std::shared_ptr<detail::cluster_impl> impl_;
};

/// A cluster client on any_io_executor.
using cluster = basic_cluster<>;

} // namespace sluice::redis
