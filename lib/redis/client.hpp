// What a Redis client core is (detail::client_impl): a connection's pipeline or a
// cluster's router, behind one interface, so that the public clients and the free
// functions of client_impl.hpp are written once.
#pragma once

#include "link_counters.hpp"
#include "pending_op.hpp"

#include <sluice/redis/detail/store/client_impl.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

class client_impl {
public:
    virtual ~client_impl() = default;

    /// The executor everything below runs on.
    virtual const boost::asio::any_io_executor& executor() const noexcept = 0;

    // On the executor: a command, a script (EVALSHA, loading it on NOSCRIPT), closing.
    virtual void exec(std::vector<std::string> argv, std::shared_ptr<pending_op> op) = 0;
    virtual void eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args,
                      std::shared_ptr<pending_op> op) = 0;
    virtual void close() = 0;

    /// From any thread.
    virtual bool connected() const noexcept { return false; }
    /// From any thread.
    virtual link_stats stats() const noexcept = 0;
    /// On the executor.
    virtual std::string slot_owner(std::uint16_t) const { return {}; }
};

/// A connection whose link counts go to `counters` (a cluster's, shared by its nodes).
std::shared_ptr<client_impl> make_connection(const boost::asio::any_io_executor& ex, connection_config cfg,
                                             std::shared_ptr<link_counters> counters);

} // namespace sluice::redis::detail
