// The type-erased core of basic_cluster, compiled in lib/redis/cluster.cpp.
#pragma once

#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/detail/connection_impl.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

class cluster_impl;

/// Creates the core and starts loading the slot map from the seed node `seed`.
std::shared_ptr<cluster_impl> make_cluster(const boost::asio::any_io_executor& ex,
                                           connection_config seed);

// These may be called from any thread: they dispatch to the cluster's executor.
void exec(const std::shared_ptr<cluster_impl>& c, std::vector<std::string> argv,
          exec_handler h);
void eval(const std::shared_ptr<cluster_impl>& c, const script& s,
          std::vector<std::string> keys, std::vector<std::string> args, exec_handler h);
void close(const std::shared_ptr<cluster_impl>& c);

/// The node ("host:port") that the client's map gives for `slot`; empty if none (yet).
/// Call on the cluster's executor.
std::string slot_owner(const cluster_impl& c, std::uint16_t slot);

} // namespace sluice::redis::detail
