// The type-erased core of basic_sentinel_resolver, compiled in lib/redis/sentinel.cpp so
// that hiredis stays out of the public headers.
#pragma once

#include <sluice/redis/sentinel_config.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

class sentinel_impl;
class sentinel_watch;
struct master_switch;

using resolve_master_handler = boost::asio::any_completion_handler<void(
    boost::system::error_code, boost::asio::ip::tcp::endpoint)>;

/// The core; throws error::invalid_option without Sentinels or without a master name.
std::shared_ptr<sentinel_impl> make_sentinel(const boost::asio::any_io_executor& ex,
                                             sentinel_config cfg, std::string master_password);

// May be called from any thread: it dispatches to the executor. `order` is for tests.
void resolve_master(const std::shared_ptr<sentinel_impl>& s, resolve_master_handler h);
std::vector<sentinel_address> sentinel_order(const sentinel_impl& s);

/// Called on the executor with every +switch-master announcement about the master's name.
using switch_handler = std::function<void(const master_switch&)>;

/// On the executor: subscribes to +switch-master and +sentinel on every Sentinel `s`
/// knows (and on those it learns of later), each subscription reconnecting after a
/// backoff from `retry_min` doubling to `retry_max` while its Sentinel stays known.
std::shared_ptr<sentinel_watch> watch_switches(const std::shared_ptr<sentinel_impl>& s,
                                               std::chrono::milliseconds retry_min,
                                               std::chrono::milliseconds retry_max, switch_handler h);

/// On the executor: the handler is not called again and every subscription ends (closing
/// its socket at once when `cancel`; without it, from an execution context's shutdown,
/// the pending operations are left for the context to destroy).
void stop_watch(sentinel_watch& w, bool cancel);

} // namespace sluice::redis::detail
