#include "pipeline.hpp"

#include <sluice/redis/detail/store/sentinel_events.hpp>
#include <sluice/redis/detail/store/sentinel_fsm.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/ip/address.hpp>

#include <cassert>
#include <strings.h>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;

namespace {

// hiredis keeps the callbacks of these outside its reply queue: they would break the
// one-reply-per-command order that the pipeline relies on.
bool is_push_command(const std::string& name)
{
    for (const char* c : {"SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "MONITOR"})
        if (::strcasecmp(name.c_str(), c) == 0) return true;
    return false;
}

} // namespace

pipeline::pipeline(const asio::any_io_executor& ex, connection_config cfg, std::shared_ptr<link_counters> counters)
    : ex_(ex), cfg_(std::move(cfg)), resolver_(ex),
      counters_(counters ? std::move(counters) : std::make_shared<link_counters>()), cmd_timer_(ex), link_timer_(ex),
      backoff_(cfg_.reconnect_min, cfg_.reconnect_max), link_(ex, *this)
{
    if (!cfg_.sentinel.sentinels.empty())
        sentinel_ = make_sentinel(ex, cfg_.sentinel, cfg_.password);
}

pipeline::~pipeline()
{
    destroying_ = true;
    if (watch_) stop_watch(*watch_, false);
    link_.close();
}

void pipeline::start()
{
    // With Sentinels, their announcements too: a failover is followed as soon as it is
    // announced, not when the link to the old master breaks (which may be never: a
    // demoted master that is still up keeps answering, and accepts writes until the
    // Sentinels reconfigure it).
    if (sentinel_)
        watch_ = watch_switches(sentinel_, cfg_.reconnect_min, cfg_.reconnect_max,
                                [w = weak_from_this()](const master_switch& m) {
                                    if (auto self = w.lock()) self->on_switch_announced(m);
                                });
    connect();
}

void pipeline::exec(std::vector<std::string> argv, std::shared_ptr<pending_op> op)
{
    if (state_ == state::closed) return op->complete(error::closed);
    if (argv.empty() || is_push_command(argv.front())) return op->complete(error::invalid_option);
    if (auto e = refusal()) return op->complete(*e);
    submit(std::move(argv), std::move(op));
}

std::optional<error> pipeline::refusal() const noexcept
{
    if (state_ == state::closed) return error::closed;
    if (!link_.is_open() && !resolving_) return error::backend_unavailable;
    return std::nullopt;
}

void pipeline::submit(std::vector<std::string> argv, std::shared_ptr<pending_op> op)
{
    if (op->done()) return;   // a held command cancelled while it waited
    if (!link_.is_open() && resolving_) {
        held_.push_back({std::move(argv), std::move(op)});
        return;
    }
    if (!link_.send(argv)) return op->complete(error::backend_unavailable);
    // A cancelled entry stays queued: its reply is still due and is dropped then.
    queue_.push(std::move(op), clock_type::now() + cfg_.command_timeout);
    arm_cmd_timer();
}

// The name resolved (a link exists now) or could not be: send or fail what waited.
void pipeline::release_held()
{
    resolving_ = false;
    auto held = std::move(held_);
    held_.clear();
    for (auto& c : held) {
        if (state_ == state::closed)
            c.op->complete(error::closed);
        else
            submit(std::move(c.argv), std::move(c.op));
    }
}

void pipeline::close()
{
    if (state_ == state::closed) return;
    state_ = state::closed;
    connected_ = false;
    resolver_.cancel();
    cancel_discovery();
    if (watch_) stop_watch(*watch_, true);
    link_timer_.cancel();
    cmd_timer_.cancel();
    free_link(error::closed);
    release_held();   // closed: each fails with error::closed
}

void pipeline::shutdown()
{
    state_ = state::closed;
    connected_ = false;
    destroying_ = true;
    if (watch_) stop_watch(*watch_, false);
    link_.close();
    queue_.clear();
    resolving_ = false;
    auto held = std::move(held_);
    held.clear();
}

// ---- replies ------------------------------------------------------------------------------

void pipeline::on_reply(raw_reply r)
{
    assert(!queue_.empty() || destroying_);
    if (queue_.empty()) return;
    // With Sentinel the handshake ends with ROLE: a link to an instance that is not (or no
    // longer) master is refused as a failed AUTH is, replies of the same read included.
    const bool refused = r.is_error()
        || (sentinel_ && !r.none() && queue_.front_is_handshake()
            && !sentinel_fsm::is_master_role(r.to_reply()));
    auto [op, how] = queue_.pop(!r.none(), refused);
    if (destroying_ || op->done()) return;   // shut down, or cancelled: dropped
    using outcome = decltype(queue_)::outcome;
    switch (how) {
    case outcome::reply:
        return op->complete({}, r.to_reply());
    case outcome::refused:
        return op->complete(error::backend_unavailable);
    case outcome::link_error:
        return op->complete(link_error_);
    }
}

void pipeline::on_cleanup()
{
    queue_.link_gone();
    ++gen_;
}

// hiredis freed the context by itself (refused, EOF, socket error).
void pipeline::on_link_lost()
{
    if (state_ != state::closed) schedule_reconnect();
}

// ---- command timeout ----------------------------------------------------------------------

// One timer for the oldest command: replies come in order and all commands have the same
// timeout, so the oldest one is always the first to expire.
void pipeline::arm_cmd_timer()
{
    if (cmd_timer_armed_ || queue_.empty()) return;
    cmd_timer_armed_ = true;
    cmd_timer_.expires_at(queue_.front_deadline());
    cmd_timer_.async_wait([w = weak_from_this()](error_code) {
        auto self = w.lock();
        if (!self) return;
        self->cmd_timer_armed_ = false;
        self->on_cmd_timer();
    });
}

void pipeline::on_cmd_timer()
{
    if (queue_.empty() || state_ == state::closed) return;
    if (clock_type::now() < queue_.front_deadline()) return arm_cmd_timer();
    // A pipelined reply cannot be skipped: the late command fails and the link goes.
    queue_.front()->complete(error::backend_unavailable);
    reset_link();
}

// ---- the link -----------------------------------------------------------------------------

void pipeline::connect()
{
    state_ = state::connecting;
    if (sentinel_) return discover();
    error_code ec;
    (void)asio::ip::make_address(cfg_.host, ec);
    if (!ec) return connect_to(cfg_.host, cfg_.port);
    // A name: resolved by Asio's resolver (getaddrinfo on a thread of its own, never on the
    // executor's), again at every reconnection; the connect timeout covers it.
    ++gen_;
    resolving_ = true;
    arm_connect_timeout();
    resolver_.async_resolve(
        cfg_.host, std::to_string(cfg_.port),
        [w = weak_from_this(), gen = gen_](error_code ec, asio::ip::tcp::resolver::results_type rs) {
            auto self = w.lock();
            if (!self || gen != self->gen_ || self->state_ != state::connecting) return;
            if (ec || rs.empty()) return self->reset_link();
            self->connect_to(rs.begin()->endpoint().address().to_string(), self->cfg_.port);
            self->release_held();
        });
}

// Sentinel: the master is asked of the Sentinels at every attempt (after a lost link, this
// is what follows a failover). Commands are held meanwhile, as during a name resolution,
// and the connect timeout covers it the same way.
void pipeline::discover()
{
    master_.reset();
    ++gen_;
    resolving_ = true;
    arm_connect_timeout();
    // A signal per attempt: an abandoned discovery may complete after the next one began.
    discovery_ = std::make_shared<asio::cancellation_signal>();
    resolve_master(
        sentinel_,
        asio::bind_cancellation_slot(
            discovery_->slot(),
            [w = weak_from_this(), gen = gen_, keep = discovery_](error_code ec,
                                                                  asio::ip::tcp::endpoint master) {
                auto self = w.lock();
                if (!self || gen != self->gen_ || self->state_ != state::connecting) return;
                self->discovery_.reset();
                if (ec) return self->reset_link();
                self->connect_to(master.address().to_string(), master.port());
                self->release_held();
            }));
}

void pipeline::cancel_discovery()
{
    if (auto d = std::move(discovery_)) d->emit(asio::cancellation_type::terminal);
}

// Connects to a numeric address.
void pipeline::connect_to(const std::string& address, std::uint16_t port)
{
    if (sentinel_) master_ = sentinel_address{address, port};
    if (!link_.connect(address, port, weak_from_this())) return schedule_reconnect();
    ++gen_;
    queue_.new_link();

    // Up only once the server answered: a listener that accepts but never speaks must count
    // as a failed connect, not as a link whose first command times out. With Sentinel, up
    // only once ROLE says master on this link too: the discovery checked on another
    // connection, and a failover may have come in between (on_reply refuses another role).
    std::vector<std::vector<std::string>> hello;
    if (!cfg_.password.empty()) hello.push_back({"AUTH", cfg_.password});
    if (sentinel_) hello.push_back(sentinel_fsm::role_command());
    if (hello.empty()) hello.push_back({"PING"});
    const auto before = queue_.size();
    for (std::size_t i = 0; i < hello.size(); ++i)
        submit_internal(std::move(hello[i]), [w = weak_from_this(), gen = gen_,
                                              last = i + 1 == hello.size()](error_code ec, reply r) {
            if (auto self = w.lock()) self->on_handshake(gen, ec, r, last);
        });
    // The last command of the handshake: the link's replies count only if it succeeds.
    if (queue_.size() > before) queue_.mark_handshake();
    arm_connect_timeout();
}

// A reply of the handshake; `last` brings the link up.
void pipeline::on_handshake(std::uint64_t gen, error_code ec, const reply& r, bool last)
{
    if (gen != gen_ || state_ != state::connecting) return;
    if (ec || r.is_error()) return reset_link();
    if (!last) return;
    state_ = state::connected;
    connected_ = true;
    link_counters::bump(counters_->connects);
    backoff_.reset();
    link_timer_.cancel();
}

// A connection attempt (name resolution, TCP, handshake) longer than connect_timeout is
// dropped, and retried after the backoff.
void pipeline::arm_connect_timeout()
{
    link_timer_.expires_after(cfg_.connect_timeout);
    link_timer_.async_wait([w = weak_from_this(), gen = gen_](error_code ec) {
        auto self = w.lock();
        if (!self || ec || gen != self->gen_ || self->state_ != state::connecting) return;
        self->resolver_.cancel();
        self->cancel_discovery();
        self->reset_link();
    });
}

// Frees the context from our side (never inside a hiredis callback): hiredis answers every
// pending command with a null reply, which completes it with `e`.
void pipeline::free_link(error e)
{
    if (!link_.is_open()) return;
    link_error_ = e;
    link_.close();
    link_error_ = error::backend_unavailable;
    assert(queue_.empty());
}

void pipeline::reset_link()
{
    free_link(error::backend_unavailable);
    link_down();
    if (state_ != state::closed) schedule_reconnect();
    if (resolving_) release_held();   // no link: each fails with backend_unavailable
}

void pipeline::schedule_reconnect()
{
    master_.reset();
    link_down();
    state_ = state::backoff;
    link_timer_.expires_after(backoff_.next());
    link_timer_.async_wait([w = weak_from_this(), seq = ++backoff_seq_](error_code ec) {
        auto self = w.lock();
        if (!self || ec || seq != self->backoff_seq_ || self->state_ != state::backoff) return;
        self->connect();
    });
}

// A link that was up is gone (not by close(): the user's own closing is not a loss).
void pipeline::link_down() noexcept
{
    if (connected_.exchange(false, std::memory_order_relaxed)) link_counters::bump(counters_->links_lost);
}

// A Sentinel announced a failover. The link to the old master goes as a lost link does
// (its commands in flight fail with backend_unavailable), and the next one goes straight
// to the announced master, without the backoff and without a discovery: the Sentinels it
// would ask may not have heard yet, and the old master may still answer ROLE with master.
// The handshake's ROLE check still applies; if it fails, the usual discovery follows.
void pipeline::on_switch_announced(const master_switch& m)
{
    if (state_ == state::closed) return;
    if (decide_switch(m, cfg_.sentinel.master_name, master_) != switch_verdict::switch_now) return;
    link_counters::bump(counters_->master_switches);
    free_link(error::backend_unavailable);
    link_down();
    cancel_discovery();
    state_ = state::connecting;
    error_code ec;
    (void)asio::ip::make_address(m.to.host, ec);
    // A host name (Sentinels announcing host names): found by a discovery, as on any
    // reconnection; hiredis would resolve it on the executor's thread.
    if (ec) return connect();
    connect_to(m.to.host, m.to.port);
    if (resolving_) release_held();
}

} // namespace sluice::redis::detail
