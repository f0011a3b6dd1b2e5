// The type-erased core of basic_sentinel_resolver, compiled in lib/redis/sentinel.cpp so
// that hiredis stays out of the public headers.
#pragma once

#include <sluice/redis/sentinel_config.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

class sentinel_impl;

using resolve_master_handler = boost::asio::any_completion_handler<void(
    boost::system::error_code, boost::asio::ip::tcp::endpoint)>;

/// The core; throws error::invalid_option without Sentinels or without a master name.
std::shared_ptr<sentinel_impl> make_sentinel(const boost::asio::any_io_executor& ex,
                                             sentinel_config cfg, std::string master_password);

// May be called from any thread: it dispatches to the executor. `order` is for tests.
void resolve_master(const std::shared_ptr<sentinel_impl>& s, resolve_master_handler h);
std::vector<sentinel_address> sentinel_order(const sentinel_impl& s);

} // namespace sluice::redis::detail
