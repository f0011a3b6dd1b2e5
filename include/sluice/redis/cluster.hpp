// Redis Cluster as an Asio I/O object: commands routed to the master that owns the slot.
#pragma once

#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/redis/basic_client.hpp>
#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/hash_slot.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <string>
#include <utility>

namespace sluice::redis {

/// A client of a Redis Cluster with the operations of basic_client. A request goes to
/// the master that owns the hash slot of its first key (argv[1] for async_exec, keys[0]
/// for async_eval; hash tags "{...}" honoured; no key: any master). The slot map comes
/// from CLUSTER SLOTS at start and again after a MOVED redirection; ASK is followed with
/// ASKING. A request answered TRYAGAIN (several keys while their slot migrates) or
/// CLUSTERDOWN (slot not served, cluster down), which Redis refuses before running it, is
/// sent again after a pause (5 ms, doubling to 100 ms) while the command timeout allows;
/// then that reply is the answer. One basic_connection-like link per master, made on
/// first use, with the seed's timeouts and password.
///
/// Errors: as basic_connection; also error::backend_unavailable when no slot map could
/// be loaded.
///
/// Executor: completions run on the handler's associated executor (default: the
/// client's), never inside the initiating call; the links to the masters and the loading
/// of the slot map run on the client's executor.
///
/// Commands whose first key is not argv[1] (EVAL with keys, XREAD...) are routed wrongly
/// and answered with MOVED, which is then followed: use async_eval for scripts.
template <class Executor = boost::asio::any_io_executor>
class basic_cluster : public basic_client<Executor> {
public:
    /// The cluster's type on another executor type, as on Asio's I/O objects.
    template <class Other>
    struct rebind_executor {
        /// The same cluster on another executor type.
        using other = basic_cluster<Other>;
    };

    /// `seed`: any node of the cluster. Starts loading the slot map at once. Throws
    /// boost::system::system_error(error::invalid_option) when `seed` lists Sentinels (a
    /// cluster finds its masters itself).
    basic_cluster(const Executor& ex, connection_config seed)
        : basic_client<Executor>(ex, detail::make_cluster(ex, std::move(seed)))
    {
    }

    /// The same, on the executor of an execution context (an io_context).
    template <sluice::detail::execution_context_ref Context>
    basic_cluster(Context& ctx, connection_config seed) : basic_cluster(Executor(ctx.get_executor()), std::move(seed))
    {
    }

    /// The master ("host:port") this client would send `slot` to; empty before the map is
    /// loaded. For tests and diagnostics; call on the executor.
    std::string node_for_slot(std::uint16_t slot) const
    {
        return this->impl() ? detail::slot_owner(*this->impl(), slot) : std::string();
    }
};

/// A cluster client on any_io_executor.
using cluster = basic_cluster<>;

} // namespace sluice::redis
