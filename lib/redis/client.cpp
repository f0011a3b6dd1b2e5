// The entry points of every client core: taken on the caller's thread, run on the core's
// executor (see pending_op's start_on).
#include "client.hpp"

#include <boost/asio/dispatch.hpp>

#include <utility>

namespace sluice::redis::detail {

void exec(const std::shared_ptr<client_impl>& c, std::vector<std::string> argv, exec_handler h)
{
    start_on(c->executor(), std::move(h), [c, argv = std::move(argv)](auto op) mutable {
        c->exec(std::move(argv), std::move(op));
    });
}

void eval(const std::shared_ptr<client_impl>& c, const script& s, std::vector<std::string> keys,
          std::vector<std::string> args, exec_handler h)
{
    start_on(c->executor(), std::move(h), [c, s, keys = std::move(keys), args = std::move(args)](auto op) mutable {
        c->eval(s, std::move(keys), std::move(args), std::move(op));
    });
}

void close(const std::shared_ptr<client_impl>& c)
{
    boost::asio::dispatch(c->executor(), [c] { c->close(); });
}

bool connected(const client_impl& c) noexcept { return c.connected(); }

link_stats stats(const client_impl& c) noexcept { return c.stats(); }

std::string slot_owner(const client_impl& c, std::uint16_t slot) { return c.slot_owner(slot); }

} // namespace sluice::redis::detail
