// What every Redis client that sends commands shares (basic_connection, basic_cluster).
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/detail/store/client_impl.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis {

/// The base of the Redis clients that send commands, as Asio's basic_socket is the base
/// of its sockets: basic_connection (one server) and basic_cluster (a Redis Cluster) add
/// their constructors and what is theirs alone. Its work is done by a type-erased core
/// compiled in lib/redis (hiredis stays out of the headers).
///
/// Handler signature of both operations: void(boost::system::error_code, reply).
///
/// Executor: completions run on the handler's associated executor (default: the
/// client's), never inside the initiating call. The client's own work (hiredis' reads and
/// writes as stream_descriptor waits, its timers) runs on its executor: no thread of its
/// own.
///
/// Thread-safety: like an Asio socket. Its internal handlers run on its executor, so if
/// several threads run the io_context, give it a strand. async_exec, async_eval and
/// close may be called from any thread (they dispatch to the executor).
///
/// Cancellation: per-operation, terminal and partial. The operation completes at once with
/// operation_aborted; the command may still run on the server and its late reply is
/// dropped. close() and the destructor complete every pending operation with
/// error::closed. The slot is taken in the initiating call; emit the signal where the
/// handler runs (its associated executor), as for any Asio operation. The request is
/// carried to the client's executor, where a reply that got there first wins: either way
/// the handler runs once, on its own executor.
template <class Executor>
class basic_client {
public:
    /// The executor the client's I/O runs on.
    using executor_type = Executor;

    /// Takes over `other`'s links; `other` may then only be destroyed or assigned to.
    basic_client(basic_client&&) noexcept = default;
    /// Closes this client (pending operations complete with error::closed), then takes over
    /// `other`'s links.
    basic_client& operator=(basic_client&& other) noexcept
    {
        if (this != &other) {
            close();
            ex_ = std::move(other.ex_);
            impl_ = std::move(other.impl_);
        }
        return *this;
    }
    basic_client(const basic_client&) = delete;
    basic_client& operator=(const basic_client&) = delete;

    /// The executor the client's I/O runs on.
    executor_type get_executor() const noexcept { return ex_; }

    /// Sends one command (argv[0] is its name; a cluster client sends it to the master of
    /// argv[1]'s slot) and completes with its reply. An error reply is not an error_code:
    /// reply.type == reply::kind::error.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_exec(std::vector<std::string> argv, Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::client_impl> impl, std::vector<std::string> argv) {
                detail::exec(impl, std::move(argv), detail::exec_handler(std::move(handler)));
            },
            token, impl_, std::move(argv));
    }

    /// EVALSHA sha numkeys keys... args... (a cluster client: on the master of keys[0]'s
    /// slot); on NOSCRIPT (a new or restarted server, or SCRIPT FLUSH) it loads the script
    /// and runs it again, transparently. An error reply (a failing script, a WRONGTYPE key)
    /// completes with error::backend_error and the reply, whose str says why.
    template <BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, reply))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args,
                    Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_initiate<Token, void(boost::system::error_code, reply)>(
            [](auto handler, std::shared_ptr<detail::client_impl> impl, script s, std::vector<std::string> keys,
               std::vector<std::string> args) {
                detail::eval(impl, s, std::move(keys), std::move(args), detail::exec_handler(std::move(handler)));
            },
            token, impl_, s, std::move(keys), std::move(args));
    }

    /// What its links went through (connects, links lost, failovers followed); from any
    /// thread. Zero after a move.
    link_stats stats() const noexcept { return impl_ ? detail::stats(*impl_) : link_stats{}; }

    /// Pending operations complete with error::closed; later ones too. No reconnection.
    void close()
    {
        if (impl_) detail::close(impl_);
    }

protected:
    /// Takes the core made for `ex`.
    basic_client(const executor_type& ex, std::shared_ptr<detail::client_impl> impl)
        : ex_(ex), impl_(std::move(impl))
    {
    }

    /// Closes: pending operations complete with error::closed.
    ~basic_client() { close(); }

    /// The core (null after a move).
    const std::shared_ptr<detail::client_impl>& impl() const noexcept { return impl_; }

private:
    executor_type ex_;
    std::shared_ptr<detail::client_impl> impl_;
};

} // namespace sluice::redis
