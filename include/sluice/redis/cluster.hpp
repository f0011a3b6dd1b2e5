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
/// ASKING. One basic_connection-like link per master, made on first use, with the seed's
/// timeouts and password.
///
/// Handler signature, executor, errors, cancellation and thread-safety: as
/// basic_connection. Also error::backend_unavailable when no slot map could be loaded.
/// Commands whose first key is not argv[1] (EVAL with keys, XREAD...) are routed wrongly
/// and answered with MOVED, which is then followed: use async_eval for scripts.
template <class Executor = boost::asio::any_io_executor>
class basic_cluster {
public:
    using executor_type = Executor;

    template <class Other>
    struct rebind_executor {
        using other = basic_cluster<Other>;
    };

    /// `seed`: any node of the cluster. Starts loading the slot map at once.
    basic_cluster(const executor_type& ex, connection_config seed)
        : ex_(ex), impl_(detail::make_cluster(ex, std::move(seed)))
    {
    }

    template <class Context>
    basic_cluster(Context& ctx, connection_config seed,
                  std::enable_if_t<std::is_convertible_v<
                      Context&, boost::asio::execution_context&>>* = nullptr)
        : basic_cluster(executor_type(ctx.get_executor()), std::move(seed))
    {
    }

    basic_cluster(basic_cluster&&) noexcept = default;
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

    ~basic_cluster()
    {
        if (impl_) detail::close(impl_);
    }

    executor_type get_executor() const noexcept { return ex_; }

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

using cluster = basic_cluster<>;

} // namespace sluice::redis
