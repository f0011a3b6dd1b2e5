// Redis Cluster routing on top of one connection core per master.
//
// Each request is a small coroutine on the cluster's executor: look the slot up, send to
// the owner, follow MOVED (and refresh the map) or ASK (ASKING first), at most a few hops;
// TRYAGAIN and CLUSTERDOWN (the request did not run) are retried after a growing pause
// for as long as the command timeout allows.
// The user's handler is held apart from the coroutine (a pending_op, as the connection's)
// so that per-operation cancellation can complete it at once; the coroutine's result is
// then dropped.
#include "backoff.hpp"
#include "client.hpp"
#include "cluster_replies.hpp"
#include "pending_op.hpp"

#include <sluice/error.hpp>
#include <sluice/redis/hash_slot.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <charconv>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using result = std::tuple<error_code, reply>;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::uint16_t no_owner = 0xffff;
constexpr int max_hops = 5;

// Pauses between tries of a request answered TRYAGAIN or CLUSTERDOWN.
constexpr std::chrono::milliseconds retry_first{5};
constexpr std::chrono::milliseconds retry_max{100};

// "TRYAGAIN ..." (a multi-key request while its slot migrates) or "CLUSTERDOWN ..." (the
// slot is not served, or the cluster is down): Redis refuses before running anything,
// so the request may be sent again.
bool refused_for_now(const std::string& err)
{
    return err.starts_with("TRYAGAIN") || err.starts_with("CLUSTERDOWN");
}

asio::awaitable<result> node_exec(std::shared_ptr<client_impl> c, std::vector<std::string> argv)
{
    return asio::async_initiate<decltype(use_tuple), void(error_code, reply)>(
        [c](auto h, std::vector<std::string> argv) {
            exec(c, std::move(argv), exec_handler(std::move(h)));
        },
        use_tuple, std::move(argv));
}

asio::awaitable<result> node_eval(std::shared_ptr<client_impl> c, const script& s,
                                  std::vector<std::string> keys, std::vector<std::string> args)
{
    return asio::async_initiate<decltype(use_tuple), void(error_code, reply)>(
        [c, s](auto h, std::vector<std::string> keys, std::vector<std::string> args) {
            eval(c, s, std::move(keys), std::move(args), exec_handler(std::move(h)));
        },
        use_tuple, std::move(keys), std::move(args));
}

} // namespace

class cluster_impl final : public client_impl, public std::enable_shared_from_this<cluster_impl> {
public:
    cluster_impl(const asio::any_io_executor& ex, connection_config seed)
        : ex_(ex), cfg_(std::move(seed)), refreshed_(ex), owner_(cluster_slots, no_owner)
    {
        refreshed_.expires_at(asio::steady_timer::time_point::max());
        seed_ = cfg_.host + ":" + std::to_string(cfg_.port);
    }

    void start() { spawn_refresh(); }

    void exec(std::vector<std::string> argv, std::shared_ptr<pending_op> op) override
    {
        if (closed_) return op->complete(error::closed);
        if (argv.empty()) return op->complete(error::invalid_option);
        request rq;
        if (argv.size() > 1) rq.slot = key_slot(argv[1]);
        rq.argv = std::move(argv);
        launch(std::move(rq), std::move(op));
    }

    void eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args,
              std::shared_ptr<pending_op> op) override
    {
        if (closed_) return op->complete(error::closed);
        request rq;
        if (!keys.empty()) rq.slot = key_slot(keys.front());
        rq.s = s;
        rq.keys = std::move(keys);
        rq.args = std::move(args);
        launch(std::move(rq), std::move(op));
    }

    void close() override
    {
        if (closed_) return;
        closed_ = true;
        for (auto& [addr, c] : nodes_) detail::close(c);
        refreshed_.cancel();
    }

    link_stats stats() const noexcept override { return counters_->snapshot(); }

    std::string slot_owner(std::uint16_t slot) const override
    {
        auto i = owner_.at(slot);
        return i == no_owner ? std::string() : addrs_[i];
    }

    const asio::any_io_executor& executor() const noexcept override { return ex_; }

private:
    struct request {
        std::vector<std::string> argv;   // async_exec
        std::optional<script> s;         // async_eval
        std::vector<std::string> keys;
        std::vector<std::string> args;
        std::optional<std::uint16_t> slot;   // none: any node
    };

    void launch(request rq, std::shared_ptr<pending_op> op)
    {
        asio::co_spawn(ex_, run(shared_from_this(), std::move(rq)),
                       [op = std::move(op)](std::exception_ptr e, result res) {
                           auto& [ec, r] = res;
                           if (e) ec = error::protocol_error;
                           op->complete(ec, std::move(r));   // nothing if cancelled meanwhile
                       });
    }

    // GCC 12 inlines the frame's allocation (Asio's recycling allocator, aligned_alloc on a
    // miss) and then takes the frame's own operator delete for a mismatched pair: a false
    // positive that comes and goes with the inlining around this coroutine.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
    static asio::awaitable<result> run(std::shared_ptr<cluster_impl> self, request rq)
    {
        result res{make_error_code(error::backend_unavailable), reply{}};
        std::string ask;
        const auto deadline = std::chrono::steady_clock::now() + self->cfg_.command_timeout;
        detail::backoff pause(retry_first, retry_max);
        for (int hop = 0; hop <= max_hops; ++hop) {
            if (self->closed_) co_return result{make_error_code(error::closed), reply{}};
            std::string addr = ask;
            if (addr.empty()) {
                if (!self->has_map_) co_await self->refresh();
                if (self->closed_) co_return result{make_error_code(error::closed), reply{}};
                addr = rq.slot ? self->slot_owner(*rq.slot) : self->any_node();
                if (addr.empty()) co_return res;   // backend_unavailable: no map
            }
            auto c = self->node(addr);
            if (!ask.empty()) {
                // Adjacent on that link: both are dispatched in order on one executor.
                std::vector<std::string> asking{"ASKING"};
                detail::exec(c, std::move(asking), exec_handler([](error_code, reply) {}));
                if (rq.s) {
                    // EVAL, not EVALSHA: a NOSCRIPT retry would lose the ASKING before it.
                    std::vector<std::string> argv{"EVAL", rq.s->source(),
                                                  std::to_string(rq.keys.size())};
                    argv.insert(argv.end(), rq.keys.begin(), rq.keys.end());
                    argv.insert(argv.end(), rq.args.begin(), rq.args.end());
                    res = co_await node_exec(c, std::move(argv));
                } else {
                    res = co_await node_exec(c, rq.argv);
                }
            } else if (rq.s) {
                res = co_await node_eval(c, *rq.s, rq.keys, rq.args);
            } else {
                res = co_await node_exec(c, rq.argv);
            }
            ask.clear();
            auto& [ec, r] = res;
            // A master that went away may have been failed over: look again for the next
            // requests (this one fails: it may have run).
            if (ec == error::backend_unavailable) self->spawn_refresh();
            if ((ec && ec != error::backend_error) || !r.is_error()) break;
            if (auto to = parse_redirect(r.str, "MOVED")) {
                self->set_owner(to->first, to->second);
                self->spawn_refresh();
                continue;
            }
            if (auto to = parse_redirect(r.str, "ASK")) {
                ask = to->second;
                continue;
            }
            if (!refused_for_now(r.str)) break;
            const auto wait = pause.next();
            if (std::chrono::steady_clock::now() + wait < deadline) {
                // A CLUSTERDOWN may come from a node whose slots moved: look again.
                if (r.str.starts_with("CLUSTERDOWN")) self->spawn_refresh();
                asio::steady_timer t(self->ex_, wait);
                co_await t.async_wait(use_tuple);
                --hop;   // not a redirection
                continue;
            }
            break;
        }
        auto& [ec, r] = res;
        if (rq.s && !ec && r.is_error()) ec = error::backend_error;   // as async_eval
        co_return res;
    }
#pragma GCC diagnostic pop

    // ---- the slot map ---------------------------------------------------------------------

    void spawn_refresh()
    {
        if (refreshing_ || closed_) return;
        asio::co_spawn(ex_, [](std::shared_ptr<cluster_impl> self) -> asio::awaitable<void> {
            co_await self->refresh();
        }(shared_from_this()), asio::detached);
    }

    // One CLUSTER SLOTS at a time; requests that need the map meanwhile wait for it.
    asio::awaitable<void> refresh()
    {
        if (refreshing_) {
            co_await refreshed_.async_wait(asio::as_tuple(asio::use_awaitable));
            co_return;
        }
        refreshing_ = true;
        std::vector<std::string> candidates{seed_};
        for (const auto& a : addrs_)
            if (a != seed_) candidates.push_back(a);
        for (const auto& a : candidates) {
            if (closed_) break;
            std::vector<std::string> cmd{"CLUSTER", "SLOTS"};   // gcc 12: no braces in co_await
            auto [ec, r] = co_await node_exec(node(a), std::move(cmd));
            if (!ec && r.type == reply::kind::array && apply(r)) break;
        }
        refreshing_ = false;
        refreshed_.cancel();   // wakes the waiters; the expiry stays at "never"
    }

    bool apply(const reply& slots)
    {
        auto ranges = parse_cluster_slots(slots, cfg_.host);
        if (ranges.empty()) return false;
        std::vector<std::uint16_t> next(cluster_slots, no_owner);
        for (const auto& r : ranges) {
            auto idx = intern(r.address);
            for (std::size_t s = r.first; s <= r.last; ++s) next[s] = idx;
        }
        owner_ = std::move(next);
        has_map_ = true;
        return true;
    }

    void set_owner(std::uint16_t slot, const std::string& addr)
    {
        owner_[slot] = intern(addr);
        has_map_ = true;
    }

    std::uint16_t intern(const std::string& addr)
    {
        for (std::size_t i = 0; i < addrs_.size(); ++i)
            if (addrs_[i] == addr) return static_cast<std::uint16_t>(i);
        addrs_.push_back(addr);
        return static_cast<std::uint16_t>(addrs_.size() - 1);
    }

    std::string any_node() const
    {
        for (auto i : owner_)
            if (i != no_owner) return addrs_[i];
        return {};
    }

    // One connection per node, made on first use with the seed's settings.
    std::shared_ptr<client_impl> node(const std::string& addr)
    {
        auto it = nodes_.find(addr);
        if (it != nodes_.end()) return it->second;
        auto cfg = cfg_;
        auto colon = addr.rfind(':');
        cfg.host = addr.substr(0, colon);
        unsigned port = 0;
        std::from_chars(addr.data() + colon + 1, addr.data() + addr.size(), port);
        cfg.port = static_cast<std::uint16_t>(port);
        auto c = make_connection(ex_, std::move(cfg), counters_);
        nodes_.emplace(addr, c);
        return c;
    }

    asio::any_io_executor ex_;
    connection_config cfg_;
    std::string seed_;
    asio::steady_timer refreshed_;
    bool refreshing_ = false;
    bool has_map_ = false;
    bool closed_ = false;
    std::vector<std::uint16_t> owner_;   // slot -> index into addrs_
    std::vector<std::string> addrs_;
    std::map<std::string, std::shared_ptr<client_impl>> nodes_;
    // Every node's links, summed; read from any thread, unlike nodes_.
    std::shared_ptr<link_counters> counters_ = std::make_shared<link_counters>();
};

std::shared_ptr<client_impl> make_cluster(const asio::any_io_executor& ex, connection_config seed)
{
    // A cluster finds its masters itself (CLUSTER SLOTS): Sentinel has no part in it.
    if (!seed.sentinel.sentinels.empty())
        throw boost::system::system_error(make_error_code(error::invalid_option));
    auto c = std::make_shared<cluster_impl>(ex, std::move(seed));
    asio::dispatch(ex, [c] { c->start(); });
    return c;
}

} // namespace sluice::redis::detail
