// The type-erased core of basic_connection, compiled in lib/redis/ (connection.cpp and the
// parts it is made of) so that hiredis stays out of the public headers.
#pragma once

#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/system/error_code.hpp>

#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

class connection_impl;

using exec_handler =
    boost::asio::any_completion_handler<void(boost::system::error_code, reply)>;

/// Creates the core and starts connecting on `ex`.
std::shared_ptr<connection_impl> make_connection(const boost::asio::any_io_executor& ex,
                                                 connection_config cfg);

// These may be called from any thread: they dispatch to the connection's executor.
void exec(const std::shared_ptr<connection_impl>& c, std::vector<std::string> argv,
          exec_handler h);
void eval(const std::shared_ptr<connection_impl>& c, const script& s,
          std::vector<std::string> keys, std::vector<std::string> args, exec_handler h);
void close(const std::shared_ptr<connection_impl>& c);
bool connected(const connection_impl& c) noexcept;

} // namespace sluice::redis::detail
