// Master discovery through Redis Sentinel: the steps of detail::sentinel_fsm performed
// over short-lived TCP connections (one per Sentinel asked or master checked), RESP
// written and read by hiredis_adapter's format_commands and reply_reader. A coroutine: discovery runs
// once per connection attempt, where clarity matters more than an allocation or two.
// And the watch: one long-lived subscription per known Sentinel, on the same connect and
// RESP code, feeding detail::sentinel_events' parsers and detail::sentinel_list.
#include <sluice/redis/detail/store/sentinel_events.hpp>
#include <sluice/redis/detail/store/sentinel_fsm.hpp>
#include <sluice/redis/detail/store/sentinel_list.hpp>
#include <sluice/redis/detail/store/sentinel_impl.hpp>
#include <sluice/redis/sentinel_error.hpp>

#include <sluice/error.hpp>

#include "backoff.hpp"
#include "hiredis_adapter.hpp"

#include <boost/asio/append.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis {
namespace {

const char* describe(sentinel_error e) noexcept
{
    switch (e) {
    case sentinel_error::sentinels_unreachable: return "no Redis Sentinel could be reached";
    case sentinel_error::unknown_master: return "the Redis Sentinels know no master of that name";
    case sentinel_error::master_unreachable: return "the master named by Redis Sentinel could not be reached";
    case sentinel_error::not_master: return "the instance named by Redis Sentinel is not a master";
    }
    return nullptr;
}

} // namespace

const boost::system::error_category& sentinel_category() noexcept
{
    static const sluice::detail::enum_category<sentinel_error> instance(0x51a1ce0000000003ULL,
                                                                          "sluice.redis.sentinel", describe);
    return instance;
}

} // namespace sluice::redis

namespace sluice::redis::detail {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

class sentinel_impl {
public:
    sentinel_impl(const asio::any_io_executor& ex, sentinel_config cfg, std::string master_password)
        : ex_(ex), cfg_(std::move(cfg)), master_password_(std::move(master_password)),
          list_(cfg_.sentinels)
    {
    }

    asio::any_io_executor executor() const { return ex_; }
    const sentinel_config& config() const noexcept { return cfg_; }
    const std::string& master_password() const noexcept { return master_password_; }

    // On the executor only: the Sentinels, in the order the next round asks them.
    const std::vector<sentinel_address>& order() const noexcept { return list_.order(); }
    sentinel_list& list() noexcept { return list_; }

    // The watch subscribed to the Sentinels, told when the list changes.
    std::weak_ptr<sentinel_watch> watch;

private:
    asio::any_io_executor ex_;
    sentinel_config cfg_;
    std::string master_password_;
    sentinel_list list_;
};

namespace {

constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

// What one exchange produced: every reply (as many as commands sent, unless `ec`) or why
// there are none, and the peer it came from.
struct exchange_result {
    error_code ec;
    std::vector<reply> replies;
    tcp::endpoint peer;

    // Why command `i` has no reply: none if it was read, even when the link failed after
    // (a Sentinel that closes after its answer, before SENTINEL SENTINELS).
    error_code status(std::size_t i) const
    {
        if (i < replies.size()) return {};
        return ec ? ec : error_code(error::protocol_error);
    }

    // The answer to command `i`: an earlier error reply (a refused AUTH) wins; a nil reply
    // when there is none.
    reply answer(std::size_t i) const
    {
        for (std::size_t k = 0; k < i && k < replies.size(); ++k)
            if (replies[k].is_error()) return replies[k];
        return i < replies.size() ? replies[i] : reply{};
    }
};

// The I/O objects of one exchange or subscription, shared with its timeout's handler,
// which may run after the coroutine has moved on.
struct exchange_io {
    explicit exchange_io(const asio::any_io_executor& ex) : resolver(ex), socket(ex) {}
    tcp::resolver resolver;
    tcp::socket socket;
    bool timed_out = false;
    bool stopped = false;   // no operation starts any more
    bool heard = false;     // a subscription: a reply since the last PING
    bool pinging = false;   // a subscription: a PING being written
    // Here, not in the coroutine frame: with a frame this large GCC 12 pairs Asio's frame
    // allocation (aligned_alloc) with its operator delete, a false -Wmismatched-new-delete.
    std::array<char, 1024> buf;

    // Ends the exchange: the operation in flight fails, and none starts after it. The
    // socket is cancelled, not closed: Asio 1.81's io_uring backend reuses the memory of a
    // socket closed with an operation in flight before the kernel has answered it (see
    // hiredis_adapter::socket_). It closes with the last handler holding this.
    void stop()
    {
        stopped = true;
        resolver.cancel();   // Asio 1.81's resolver has no per-operation cancellation
        error_code ignored;
        socket.cancel(ignored);
    }
};

// Gives up the I/O of `io` after `timeout` (then io.timed_out): its pending or next
// operation fails. Until the returned timer is cancelled or destroyed.
std::unique_ptr<asio::steady_timer> arm_timeout(const std::shared_ptr<exchange_io>& io,
                                                std::chrono::milliseconds timeout)
{
    auto timer = std::make_unique<asio::steady_timer>(io->socket.get_executor(), timeout);
    timer->async_wait([io](error_code ec) {
        if (ec) return;
        io->timed_out = true;
        io->stop();
    });
    return timer;
}

// Resolves `to` and connects to the first endpoint that accepts, then writes `commands`
// pipelined.
asio::awaitable<error_code> open(exchange_io& io, const sentinel_address& to,
                                 const std::vector<std::vector<std::string>>& commands,
                                 tcp::endpoint& peer)
{
    auto [rec, endpoints] = co_await io.resolver.async_resolve(to.host, std::to_string(to.port), nothrow);
    if (rec) co_return rec;
    error_code ec = asio::error::host_not_found;
    for (const auto& e : endpoints) {
        if (io.stopped) co_return error::backend_unavailable;
        std::tie(ec) = co_await io.socket.async_connect(e.endpoint(), nothrow);
        if (!ec) {
            peer = e.endpoint();
            break;
        }
        error_code ignored;
        io.socket.close(ignored);
    }
    if (ec) co_return ec;

    if (io.stopped) co_return error::backend_unavailable;
    const std::string wire = format_commands(commands);
    auto [wec, written] = co_await asio::async_write(io.socket, asio::buffer(wire), nothrow);
    (void)written;
    co_return wec;
}

// Reads replies into `on_reply` until it returns false (then no error) or the link fails.
template <class OnReply>
asio::awaitable<error_code> read_replies(exchange_io& io, OnReply on_reply)
{
    reply_reader reader;
    std::optional<reply> r;
    for (;;) {
        if (io.stopped) co_return asio::error::operation_aborted;
        auto [e, n] = co_await io.socket.async_read_some(asio::buffer(io.buf), nothrow);
        if (e) co_return e;
        if (!reader.feed(io.buf.data(), n)) co_return error::protocol_error;
        for (;;) {
            if (!reader.next(r)) co_return error::protocol_error;
            if (!r) break;
            if (!on_reply(std::move(*r))) co_return error_code{};
        }
    }
}

// Connects to `to`, sends `commands` pipelined and reads as many replies, all within
// `timeout` (then error::backend_unavailable).
asio::awaitable<exchange_result> exchange(sentinel_address to,
                                          std::vector<std::vector<std::string>> commands,
                                          std::chrono::milliseconds timeout)
{
    auto io = std::make_shared<exchange_io>(co_await asio::this_coro::executor);
    auto timer = arm_timeout(io, timeout);
    exchange_result out;
    out.ec = co_await open(*io, to, commands, out.peer);
    if (!out.ec)
        out.ec = co_await read_replies(*io, [&](reply r) {
            out.replies.push_back(std::move(r));
            return out.replies.size() < commands.size();
        });
    timer->cancel();
    if (io->timed_out) out.ec = error::backend_unavailable;
    co_return out;
}

using resolution = std::pair<error_code, tcp::endpoint>;

std::vector<std::string> sentinels_command(const std::string& master_name)
{
    return {"SENTINEL", "SENTINELS", master_name};
}

void sync_watch(sentinel_impl& s);

asio::awaitable<resolution> run(std::shared_ptr<sentinel_impl> self)
{
    const auto& cfg = self->config();
    sentinel_fsm fsm(self->order(), cfg.master_name);
    tcp::endpoint master;
    reply others;   // SENTINEL SENTINELS of the Sentinel asked last
    auto a = fsm.start();
    try {
        while (a.what != sentinel_fsm::step::done) {
            const bool asking = a.what == sentinel_fsm::step::ask_sentinel;
            std::vector<std::vector<std::string>> commands;
            const std::string& password = asking ? cfg.password : self->master_password();
            if (!password.empty()) commands.push_back({"AUTH", password});
            const std::size_t answer = commands.size();
            commands.push_back(asking ? fsm.sentinel_command() : sentinel_fsm::role_command());
            // The Sentinel's peers in the same round trip: the list refreshed at every
            // discovery, from the Sentinel whose answer is verified.
            if (asking) commands.push_back(sentinels_command(cfg.master_name));
            auto x = co_await exchange(a.target, std::move(commands), cfg.timeout);
            auto cs = co_await asio::this_coro::cancellation_state;
            if (cs.cancelled() != asio::cancellation_type::none)
                co_return resolution{asio::error::operation_aborted, {}};
            if (asking) {
                others = x.answer(answer + 1);
                a = fsm.on_sentinel_reply(x.status(answer), x.answer(answer));
            } else {
                master = x.peer;
                a = fsm.on_role_reply(x.status(answer), x.answer(answer));
            }
        }
    } catch (const boost::system::system_error& e) {
        // Once cancelled, a co_await throws instead of starting an operation: the connect
        // after a name resolution (which Asio 1.81 cannot cancel), or the next endpoint's.
        if (e.code() != asio::error::operation_aborted) throw;
        co_return resolution{asio::error::operation_aborted, {}};
    }
    if (a.ec) co_return resolution{a.ec, {}};
    // The fsm moved the verified Sentinel first in its copy of the list.
    const auto verified = fsm.sentinels().front();
    auto& list = self->list();
    list.promote(verified);
    if (list.refresh(verified, others)) sync_watch(*self);
    co_return resolution{{}, master};
}

} // namespace

// ---- the watch: a subscription per known Sentinel ------------------------------------------

class sentinel_watch : public std::enable_shared_from_this<sentinel_watch> {
public:
    sentinel_watch(std::shared_ptr<sentinel_impl> s, std::chrono::milliseconds retry_min,
                   std::chrono::milliseconds retry_max, switch_handler h)
        : s_(std::move(s)), retry_min_(retry_min), retry_max_(retry_max), on_switch_(std::move(h))
    {
    }

    // A subscription for every known Sentinel, none for the others.
    void sync();
    void stop(bool cancel);

    // Whether the subscription to `at` should end.
    bool ended(const sentinel_address& at) const { return stopped_ || !find(at); }

    const sentinel_impl& sentinel() const noexcept { return *s_; }
    std::chrono::milliseconds retry_min() const noexcept { return retry_min_; }
    std::chrono::milliseconds retry_max() const noexcept { return retry_max_; }

    // What the subscription to `at` read.
    void on_sentinels(const sentinel_address& at, const reply& r)
    {
        if (!stopped_ && s_->list().refresh(at, r)) sync();
    }
    void on_message(const sentinel_address& at, const pubsub_message& m)
    {
        if (stopped_) return;
        const auto& name = s_->config().master_name;
        if (m.channel == switch_master_channel) {
            auto sw = parse_switch_master(m.payload);
            if (!sw || sw->name != name) return;
            // It knows the new master: asked first by the next discovery, before Sentinels
            // that may not have heard yet and still name the old one.
            s_->list().promote(at);
            on_switch_(*sw);
        } else if (m.channel == sentinel_added_channel) {
            if (auto a = parse_sentinel_added(m.payload, name); a && s_->list().add(*a)) sync();
        }
    }

private:
    struct subscription {
        sentinel_address at;
        std::shared_ptr<asio::cancellation_signal> stop;
    };

    const subscription* find(const sentinel_address& at) const
    {
        for (const auto& s : subs_)
            if (s.at == at) return &s;
        return nullptr;
    }

    std::shared_ptr<sentinel_impl> s_;
    std::chrono::milliseconds retry_min_, retry_max_;
    switch_handler on_switch_;
    std::vector<subscription> subs_;
    bool stopped_ = false;
};

namespace {

// A subscribed link: a PING every `period`, and the link given up when nothing came back
// over a whole period (a Sentinel gone silent: its host down or cut off, which no read
// would ever report), so that the subscription is made again. Until `timer` is cancelled.
void keep_alive(std::shared_ptr<exchange_io> io, std::shared_ptr<asio::steady_timer> timer,
                std::chrono::milliseconds period)
{
    timer->expires_after(period);
    timer->async_wait([io, timer, period](error_code ec) mutable {
        if (ec || io->stopped) return;
        if (!io->heard) return io->stop();
        io->heard = false;
        if (!io->pinging) {
            static const std::string ping = format_commands({{"PING"}});
            io->pinging = true;
            asio::async_write(io->socket, asio::buffer(ping), [io](error_code, std::size_t) { io->pinging = false; });
        }
        keep_alive(std::move(io), std::move(timer), period);
    });
}

// One subscription to `at`, until its link fails: connected, AUTH, the Sentinel's peers,
// SUBSCRIBE (all within the Sentinel timeout), then every message as it comes, the link
// kept alive by a PING every 4 Sentinel timeouts.
// `subscribed` tells whether it got that far.
asio::awaitable<error_code> subscribe_once(std::shared_ptr<sentinel_watch> w, sentinel_address at,
                                           bool& subscribed)
{
    const auto& cfg = w->sentinel().config();
    auto io = std::make_shared<exchange_io>(co_await asio::this_coro::executor);
    auto timer = arm_timeout(io, cfg.timeout);
    std::vector<std::vector<std::string>> commands;
    if (!cfg.password.empty()) commands.push_back({"AUTH", cfg.password});
    const std::size_t peers = commands.size();
    commands.push_back(sentinels_command(cfg.master_name));
    commands.push_back(sentinel_subscribe_command());
    tcp::endpoint peer;
    auto ec = co_await open(*io, at, commands, peer);
    if (ec) co_return ec;
    std::size_t seen = 0;
    auto pings = std::make_shared<asio::steady_timer>(io->socket.get_executor());
    // However this ends (a failure, or an exception once stopped), the PINGs end with it.
    struct ping_guard {
        std::shared_ptr<asio::steady_timer> t;
        ~ping_guard() { t->cancel(); }
    } guard{pings};
    ec = co_await read_replies(*io, [&](reply r) {
        if (w->ended(at)) return false;
        io->heard = true;
        const std::size_t i = seen++;
        if (i < peers) return !r.is_error();   // AUTH refused: give up this link
        if (i == peers) {
            w->on_sentinels(at, r);
            return true;
        }
        if (!subscribed) {
            // The first confirmation of SUBSCRIBE: the link is up, no timeout from now on.
            if (r.type != reply::kind::array || r.elements.empty() || r.elements[0].str != "subscribe")
                return false;
            subscribed = true;
            timer->cancel();
            keep_alive(io, pings, 4 * cfg.timeout);
            return true;
        }
        if (auto m = parse_pubsub_message(r)) w->on_message(at, *m);
        return true;
    });
    co_return ec;
}

// The subscription to `at` kept up while the watch wants it: after a failure, again after
// the backoff (reset once a subscription got through).
asio::awaitable<void> subscribe(std::shared_ptr<sentinel_watch> w, sentinel_address at)
{
    backoff wait(w->retry_min(), w->retry_max());
    asio::steady_timer pause(co_await asio::this_coro::executor);
    try {
        while (!w->ended(at)) {
            bool subscribed = false;
            co_await subscribe_once(w, at, subscribed);
            if (subscribed) wait.reset();
            if (w->ended(at)) break;
            pause.expires_after(wait.next());
            co_await pause.async_wait(nothrow);
        }
    } catch (const boost::system::system_error& e) {
        // Stopped: a co_await after the cancellation throws (see run()).
        if (e.code() != asio::error::operation_aborted) throw;
    }
}

void sync_watch(sentinel_impl& s)
{
    if (auto w = s.watch.lock()) w->sync();
}

} // namespace

void sentinel_watch::sync()
{
    if (stopped_) return;
    const auto& order = s_->order();
    for (auto it = subs_.begin(); it != subs_.end();) {
        if (std::find(order.begin(), order.end(), it->at) != order.end()) {
            ++it;
            continue;
        }
        it->stop->emit(asio::cancellation_type::terminal);
        it = subs_.erase(it);
    }
    for (const auto& a : order) {
        if (find(a)) continue;
        auto sig = std::make_shared<asio::cancellation_signal>();
        subs_.push_back({a, sig});
        // The signal lives as long as the coroutine that may still use its slot.
        asio::co_spawn(s_->executor(), subscribe(shared_from_this(), a),
                       asio::bind_cancellation_slot(sig->slot(), [sig](std::exception_ptr e) {
                           if (e) std::rethrow_exception(e);
                       }));
    }
}

void sentinel_watch::stop(bool cancel)
{
    stopped_ = true;
    auto subs = std::move(subs_);
    subs_.clear();
    if (cancel)
        for (auto& s : subs) s.stop->emit(asio::cancellation_type::terminal);
}


std::shared_ptr<sentinel_impl> make_sentinel(const asio::any_io_executor& ex, sentinel_config cfg,
                                             std::string master_password)
{
    if (cfg.sentinels.empty() || cfg.master_name.empty() || cfg.timeout.count() <= 0)
        throw boost::system::system_error(make_error_code(error::invalid_option));
    return std::make_shared<sentinel_impl>(ex, std::move(cfg), std::move(master_password));
}

void resolve_master(const std::shared_ptr<sentinel_impl>& s, resolve_master_handler h)
{
    asio::dispatch(s->executor(), [s, h = std::move(h)]() mutable {
        auto slot = h.get_cancellation_slot();
        // Never completes inside the initiating call: co_spawn posts the completion of a
        // coroutine that never suspended.
        asio::co_spawn(s->executor(), run(s),
                       asio::bind_cancellation_slot(
                           slot, [s, h = std::move(h)](std::exception_ptr e, resolution r) mutable {
                               if (e) std::rethrow_exception(e);
                               asio::dispatch(s->executor(),
                                              asio::append(std::move(h), r.first, r.second));
                           }));
    });
}

std::vector<sentinel_address> sentinel_order(const sentinel_impl& s)
{
    return s.order();
}

std::shared_ptr<sentinel_watch> watch_switches(const std::shared_ptr<sentinel_impl>& s,
                                               std::chrono::milliseconds retry_min,
                                               std::chrono::milliseconds retry_max, switch_handler h)
{
    auto w = std::make_shared<sentinel_watch>(s, retry_min, retry_max, std::move(h));
    s->watch = w;
    w->sync();
    return w;
}

void stop_watch(sentinel_watch& w, bool cancel) { w.stop(cancel); }

} // namespace sluice::redis::detail
