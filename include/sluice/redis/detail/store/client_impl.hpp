// The type-erased core of redis::basic_client (a connection or a cluster client), compiled
// in lib/redis/ so that hiredis stays out of the public headers.
#pragma once

#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/link_stats.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

/// One connection (lib/redis/connection.cpp) or a cluster of them (cluster.cpp).
class client_impl;

using exec_handler = boost::asio::any_completion_handler<void(boost::system::error_code, reply)>;

/// A connection's core; starts connecting on `ex`.
std::shared_ptr<client_impl> make_connection(const boost::asio::any_io_executor& ex, connection_config cfg);

/// A cluster client's core; starts loading the slot map from the seed node `seed`.
/// Throws error::invalid_option when `seed` lists Sentinels.
std::shared_ptr<client_impl> make_cluster(const boost::asio::any_io_executor& ex, connection_config seed);

// These may be called from any thread: they dispatch to the client's executor.
void exec(const std::shared_ptr<client_impl>& c, std::vector<std::string> argv, exec_handler h);
void eval(const std::shared_ptr<client_impl>& c, const script& s, std::vector<std::string> keys,
          std::vector<std::string> args, exec_handler h);
void close(const std::shared_ptr<client_impl>& c);

/// A connection: whether its link is up (from any thread). A cluster: false.
bool connected(const client_impl& c) noexcept;

/// Its links' counts (from any thread).
link_stats stats(const client_impl& c) noexcept;

/// A cluster: the node ("host:port") its map gives for `slot`, empty if none (yet); call on
/// the client's executor. A connection: empty.
std::string slot_owner(const client_impl& c, std::uint16_t slot);

} // namespace sluice::redis::detail
