// hiredis' asynchronous API driven by Asio.
//
// Lifetime rules, because this is where such adapters crash:
// - hiredis may free its context inside redisAsyncHandleRead/Write (EOF, refused
//   connection, socket error). Its `cleanup` event tells us: we release the descriptor
//   from Asio (hiredis closes the fd itself) and forget the context; after each
//   HandleRead/Write we look whether the context is still there.
// - Our hiredis callbacks never call back into hiredis and never run user code: they move
//   the reply out and post. Everything that frees the context (timeouts, close, a failed
//   handshake) therefore runs from our own handlers, never inside a hiredis callback.
// - Every Asio handler holds a weak_ptr to the core and the link generation it was armed
//   for; a handler of an older link, or of a core that is gone, does nothing. Weak, because
//   io_uring keeps the operations of a released descriptor until its service is destroyed:
//   a strong reference would destroy the core (and its timers) after their services.
#include <sluice/redis/detail/connection_impl.hpp>

#include <sluice/error.hpp>

#include <boost/asio/append.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <csignal>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>
#include <strings.h>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;
using clock_type = std::chrono::steady_clock;

namespace {

reply convert(const redisReply* r)
{
    reply out;
    switch (r->type) {
    case REDIS_REPLY_STRING:
        out.type = reply::kind::string;
        out.str.assign(r->str, r->len);
        break;
    case REDIS_REPLY_STATUS:
        out.type = reply::kind::status;
        out.str.assign(r->str, r->len);
        break;
    case REDIS_REPLY_ERROR:
        out.type = reply::kind::error;
        out.str.assign(r->str, r->len);
        break;
    case REDIS_REPLY_INTEGER:
        out.type = reply::kind::integer;
        out.integer = r->integer;
        break;
    case REDIS_REPLY_ARRAY:
        out.type = reply::kind::array;
        out.elements.reserve(r->elements);
        for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
        break;
    default:
        out.type = reply::kind::nil;
        break;
    }
    return out;
}

// hiredis writes with write(2), not send(MSG_NOSIGNAL): a peer that went away would kill
// the process with SIGPIPE. Ignored once, and only if nobody installed a handler.
void ignore_sigpipe()
{
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction old {};
        if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
            struct sigaction ign {};
            ign.sa_handler = SIG_IGN;
            sigemptyset(&ign.sa_mask);
            ::sigaction(SIGPIPE, &ign, nullptr);
        }
    });
}

// hiredis keeps the callbacks of these outside its reply queue: they would break the
// one-reply-per-command order that the pipeline relies on.
bool is_push_command(const std::string& name)
{
    for (const char* c : {"SUBSCRIBE", "PSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "MONITOR"})
        if (::strcasecmp(name.c_str(), c) == 0) return true;
    return false;
}

bool starts_with(const std::string& s, const char* prefix)
{
    return s.rfind(prefix, 0) == 0;
}

} // namespace

class connection_impl : public std::enable_shared_from_this<connection_impl> {
public:
    connection_impl(const asio::any_io_executor& ex, connection_config cfg)
        : ex_(ex), cfg_(std::move(cfg)), resolver_(ex), socket_(ex), cmd_timer_(ex), link_timer_(ex),
          backoff_(cfg_.reconnect_min)
    {
    }

    connection_impl(const connection_impl&) = delete;
    connection_impl& operator=(const connection_impl&) = delete;

    // Reached only when nothing runs any more (the io_context is being destroyed): the
    // handlers are dropped, not posted.
    ~connection_impl()
    {
        if (ac_) {
            destroying_ = true;
            redisAsyncFree(ac_);
        }
    }

    void start() { connect(); }

    void exec(std::vector<std::string> argv, exec_handler h)
    {
        if (auto e = refuse(argv)) return deliver(std::move(h), *e);
        submit(argv, std::move(h), true);
    }

    void eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args,
              exec_handler h)
    {
        if (state_ == state::closed) return deliver(std::move(h), error::closed);
        if (!ac_ && !resolving_) return deliver(std::move(h), error::backend_unavailable);
        auto st = std::make_shared<eval_state>(eval_state{std::move(h), {}, s, std::move(keys),
                                                          std::move(args), false, {}});
        abort_on_cancel(st);
        send_evalsha(st);
    }

    // The io_context is going away: drop what is queued without running it, as Asio does
    // with its own operations. Queued handlers may own the connection (a coroutine frame
    // holding it): dropping them here is what breaks such cycles.
    void shutdown()
    {
        state_ = state::closed;
        connected_ = false;
        destroying_ = true;
        if (ac_) redisAsyncFree(ac_);
        auto dropped = std::move(ops_);
        dropped.clear();
        resolving_ = false;
        auto held = std::move(held_);
        held.clear();
    }

    void close()
    {
        if (state_ == state::closed) return;
        state_ = state::closed;
        connected_ = false;
        resolver_.cancel();
        link_timer_.cancel();
        cmd_timer_.cancel();
        free_link(error::closed);
        release_held();   // closed: each fails with error::closed
    }

    bool connected() const noexcept { return connected_.load(std::memory_order_relaxed); }

    asio::any_io_executor executor() const { return ex_; }

private:
    enum class state { backoff, connecting, connected, closed };

    struct op {
        exec_handler handler;   // empty once completed (cancelled, timed out)
        asio::cancellation_slot slot;
        clock_type::time_point deadline;
    };

    struct eval_state {
        exec_handler handler;
        asio::cancellation_slot slot;
        script s;
        std::vector<std::string> keys;
        std::vector<std::string> args;
        bool reloaded;
        reply load_error;
    };

    // Per-operation cancellation (terminal, partial) of an entry with `handler` and `slot`:
    // its handler completes at once with operation_aborted; the entry stays where it is,
    // with no handler, until its turn comes (a reply still due, a held command).
    template <class Entry>
    void abort_on_cancel(const std::shared_ptr<Entry>& e)
    {
        auto slot = e->handler.get_cancellation_slot();
        if (!slot.is_connected()) return;
        e->slot = slot;
        slot.assign([w = std::weak_ptr<Entry>(e), self = weak_from_this()](asio::cancellation_type t) {
            if ((t & (asio::cancellation_type::terminal | asio::cancellation_type::partial))
                == asio::cancellation_type::none)
                return;
            auto e = w.lock();
            auto c = self.lock();
            if (e && c && e->handler)
                c->deliver(std::move(e->handler), asio::error::operation_aborted);
        });
    }

    // ---- completions ----------------------------------------------------------------------

    void deliver(exec_handler h, error_code ec, reply r = {})
    {
        // Posted even from our own handlers: the caller's stack never grows, and a hiredis
        // callback never runs user code.
        asio::post(ex_, asio::append(std::move(h), ec, std::move(r)));
    }

    void deliver(exec_handler h, error e) { deliver(std::move(h), make_error_code(e)); }

    std::optional<error> refuse(const std::vector<std::string>& argv) const
    {
        if (state_ == state::closed) return error::closed;
        if (argv.empty() || is_push_command(argv.front())) return error::invalid_option;
        if (!ac_ && !resolving_) return error::backend_unavailable;
        return std::nullopt;
    }

    // ---- commands -------------------------------------------------------------------------

    void submit(const std::vector<std::string>& argv, exec_handler h, bool cancellable)
    {
        if (argv.empty()) return deliver(std::move(h), error::invalid_option);
        if (!ac_ && resolving_) return hold(argv, std::move(h), cancellable);
        if (!ac_) return deliver(std::move(h), error::backend_unavailable);
        std::vector<const char*> ptrs;
        std::vector<std::size_t> lens;
        ptrs.reserve(argv.size());
        lens.reserve(argv.size());
        for (const auto& a : argv) {
            ptrs.push_back(a.data());
            lens.push_back(a.size());
        }
        if (redisAsyncCommandArgv(ac_, &on_reply, nullptr, static_cast<int>(argv.size()),
                                  ptrs.data(), lens.data())
            != REDIS_OK)
            return deliver(std::move(h), error::backend_unavailable);

        // Constructed, not assigned: Boost 1.81's any_completion_handler move assignment
        // recurses (it copies `other` as an lvalue into a new wrapper).
        auto o = std::make_shared<op>(
            op{std::move(h), {}, clock_type::now() + cfg_.command_timeout});
        // A cancelled entry stays queued: its reply is still due and is dropped then.
        if (cancellable) abort_on_cancel(o);
        ops_.push_back(std::move(o));
        arm_cmd_timer();
    }

    // While the host name resolves there is no link to queue on: commands wait here (at
    // most connect_timeout), in order, and are sent or failed once it is known.
    struct held_command {
        std::vector<std::string> argv;
        exec_handler handler;   // empty once cancelled
        bool cancellable;
        asio::cancellation_slot slot;
    };

    void hold(const std::vector<std::string>& argv, exec_handler h, bool cancellable)
    {
        auto c = std::make_shared<held_command>(held_command{argv, std::move(h), cancellable, {}});
        if (cancellable) abort_on_cancel(c);
        held_.push_back(std::move(c));
    }

    // The name resolved (a link exists now) or could not be: send or fail what waited.
    void release_held()
    {
        resolving_ = false;
        auto held = std::move(held_);
        held_.clear();
        for (auto& c : held) {
            if (!c->handler) continue;
            c->slot.clear();
            if (state_ == state::closed)
                deliver(std::move(c->handler), error::closed);
            else
                submit(c->argv, std::move(c->handler), c->cancellable);
        }
    }

    // An internal command: its handler runs on our executor (the lambda has no executor).
    template <class F>
    void submit_internal(const std::vector<std::string>& argv, F&& f)
    {
        submit(argv, exec_handler(std::forward<F>(f)), false);
    }

    static void on_reply(redisAsyncContext* ac, void* r, void*)
    {
        static_cast<connection_impl*>(ac->data)->complete_front(static_cast<redisReply*>(r));
    }

    // hiredis calls back in request order, also with a null reply for every pending
    // command when it frees the context, so the front entry is always the one answered.
    void complete_front(const redisReply* r)
    {
        assert(!ops_.empty() || destroying_);
        if (ops_.empty()) return;
        auto o = std::move(ops_.front());
        ops_.pop_front();
        if (o.get() == handshake_) {
            handshake_ = nullptr;
            // Known now, not when the handshake's handler runs: replies that came in the
            // same read (NOAUTH...) belong to a link that never was up.
            refused_ = !r || r->type == REDIS_REPLY_ERROR;
        }
        if (!o->handler || destroying_) return;
        o->slot.clear();
        if (refused_)
            deliver(std::move(o->handler), r == nullptr ? link_error_ : error::backend_unavailable);
        else if (r)
            deliver(std::move(o->handler), {}, convert(r));
        else
            deliver(std::move(o->handler), link_error_);
    }

    void send_evalsha(const std::shared_ptr<eval_state>& st)
    {
        std::vector<std::string> argv;
        argv.reserve(3 + st->keys.size() + st->args.size());
        argv.push_back("EVALSHA");
        argv.push_back(st->s.sha1());
        argv.push_back(std::to_string(st->keys.size()));
        argv.insert(argv.end(), st->keys.begin(), st->keys.end());
        argv.insert(argv.end(), st->args.begin(), st->args.end());
        // Internal handlers hold the core weakly: they sit in ops_, inside the core.
        submit_internal(argv, [w = weak_from_this(), st](error_code ec, reply r) {
            auto self = w.lock();
            if (!self || !st->handler) return;   // gone, or cancelled
            if (!ec && r.is_error() && starts_with(r.str, "NOSCRIPT") && !st->reloaded) {
                // The server has not got the script (new, restarted, SCRIPT FLUSH): load it
                // and evaluate again, pipelined, so the load precedes the retry.
                st->reloaded = true;
                self->submit_internal({"SCRIPT", "LOAD", st->s.source()},
                                      [st](error_code ec, reply r) {
                                          if (!ec && r.is_error()) st->load_error = std::move(r);
                                      });
                self->send_evalsha(st);
                return;
            }
            if (!ec && st->load_error.is_error()) r = std::move(st->load_error);
            self->finish_eval(*st, ec, std::move(r));
        });
    }

    void finish_eval(eval_state& st, error_code ec, reply r)
    {
        if (!ec && r.is_error()) ec = error::backend_error;
        st.slot.clear();
        deliver(std::move(st.handler), ec, std::move(r));
    }

    // ---- command timeout ------------------------------------------------------------------

    // One timer for the oldest command: replies come in order and all commands have the
    // same timeout, so the oldest one is always the first to expire.
    void arm_cmd_timer()
    {
        if (cmd_timer_armed_ || ops_.empty()) return;
        cmd_timer_armed_ = true;
        cmd_timer_.expires_at(ops_.front()->deadline);
        cmd_timer_.async_wait([w = weak_from_this()](error_code) {
            auto self = w.lock();
            if (!self) return;
            self->cmd_timer_armed_ = false;
            self->on_cmd_timer();
        });
    }

    void on_cmd_timer()
    {
        if (ops_.empty() || state_ == state::closed) return;
        if (clock_type::now() < ops_.front()->deadline) return arm_cmd_timer();
        // A pipelined reply cannot be skipped: the late command fails and the link goes.
        auto& front = *ops_.front();
        if (front.handler) {
            front.slot.clear();
            deliver(std::move(front.handler), error::timed_out);
        }
        reset_link();
    }

    // ---- the link -------------------------------------------------------------------------

    void connect()
    {
        ignore_sigpipe();
        state_ = state::connecting;
        error_code ec;
        (void)asio::ip::make_address(cfg_.host, ec);
        if (!ec) return connect_to(cfg_.host);
        // A name: resolved by Asio's resolver (getaddrinfo on a thread of its own, never on
        // the executor's), again at every reconnection; the connect timeout covers it.
        ++gen_;
        resolving_ = true;
        arm_connect_timeout();
        resolver_.async_resolve(cfg_.host, std::to_string(cfg_.port),
                                [w = weak_from_this(), gen = gen_](error_code ec, asio::ip::tcp::resolver::results_type rs) {
                                    auto self = w.lock();
                                    if (!self || gen != self->gen_ || self->state_ != state::connecting) return;
                                    if (ec || rs.empty()) return self->reset_link();
                                    self->connect_to(rs.begin()->endpoint().address().to_string());
                                    self->release_held();
                                });
    }

    // Connects to a numeric address.
    void connect_to(const std::string& address)
    {
        redisAsyncContext* ac = redisAsyncConnect(address.c_str(), cfg_.port);
        if (!ac) return schedule_reconnect();
        if (ac->err) {
            redisAsyncFree(ac);
            return schedule_reconnect();
        }
        error_code ec;
        socket_.assign(ac->c.fd, ec);
        if (ec) {
            redisAsyncFree(ac);
            return schedule_reconnect();
        }
        ac_ = ac;
        ++gen_;
        ac->data = this;
        ac->ev.data = this;
        ac->ev.addRead = &on_add_read;
        ac->ev.delRead = &on_del_read;
        ac->ev.addWrite = &on_add_write;
        ac->ev.delWrite = &on_del_write;
        ac->ev.cleanup = &on_cleanup;

        // Up only once the server answered: a listener that accepts but never speaks
        // must count as a failed connect, not as a link whose first command times out.
        std::vector<std::string> hello{"PING"};
        if (!cfg_.password.empty()) hello = {"AUTH", cfg_.password};
        handshake_ = nullptr;
        refused_ = false;
        submit_internal(hello, [w = weak_from_this(), gen = gen_](error_code ec, reply r) {
            auto self = w.lock();
            if (!self || gen != self->gen_ || self->state_ != state::connecting) return;
            if (ec || r.is_error()) return self->reset_link();
            self->state_ = state::connected;
            self->connected_ = true;
            self->backoff_ = self->cfg_.reconnect_min;
            self->link_timer_.cancel();
        });
        if (!ops_.empty()) handshake_ = ops_.back().get();
        arm_connect_timeout();
    }

    // A connection attempt (name resolution, TCP, handshake) longer than connect_timeout
    // is dropped, and retried after the backoff.
    void arm_connect_timeout()
    {
        link_timer_.expires_after(cfg_.connect_timeout);
        link_timer_.async_wait([w = weak_from_this(), gen = gen_](error_code ec) {
            auto self = w.lock();
            if (!self || ec || gen != self->gen_ || self->state_ != state::connecting) return;
            self->resolver_.cancel();
            self->reset_link();
        });
    }

    // Frees the context from our side (never inside a hiredis callback): hiredis answers
    // every pending command with a null reply, which completes it with `e`.
    void free_link(error e)
    {
        if (!ac_) return;
        link_error_ = e;
        redisAsyncFree(ac_);   // calls on_cleanup, which forgets ac_
        link_error_ = error::backend_unavailable;
        assert(!ac_ && ops_.empty());
    }

    void reset_link()
    {
        free_link(error::backend_unavailable);
        connected_ = false;
        if (state_ != state::closed) schedule_reconnect();
        if (resolving_) release_held();   // no link: each fails with backend_unavailable
    }

    void schedule_reconnect()
    {
        connected_ = false;
        state_ = state::backoff;
        link_timer_.expires_after(backoff_);
        backoff_ = std::min(backoff_ * 2, std::max(cfg_.reconnect_max, cfg_.reconnect_min));
        link_timer_.async_wait([w = weak_from_this(), seq = ++backoff_seq_](error_code ec) {
            auto self = w.lock();
            if (!self || ec || seq != self->backoff_seq_ || self->state_ != state::backoff) return;
            self->connect();
        });
    }

    // hiredis freed the context by itself (refused, EOF, socket error).
    void on_link_lost()
    {
        if (state_ != state::closed) schedule_reconnect();
    }

    // ---- hiredis events onto descriptor waits ---------------------------------------------

    static connection_impl& self_of(void* p) { return *static_cast<connection_impl*>(p); }

    static void on_add_read(void* p)
    {
        auto& s = self_of(p);
        s.reading_ = true;
        s.arm(asio::posix::stream_descriptor::wait_read);
    }
    static void on_del_read(void* p) { self_of(p).reading_ = false; }
    static void on_add_write(void* p)
    {
        auto& s = self_of(p);
        s.writing_ = true;
        s.arm(asio::posix::stream_descriptor::wait_write);
    }
    static void on_del_write(void* p) { self_of(p).writing_ = false; }

    // Last event before hiredis closes the fd: take it away from Asio first (release
    // cancels our waits; their handlers see a new generation and do nothing).
    static void on_cleanup(void* p)
    {
        auto& s = self_of(p);
        s.reading_ = s.writing_ = false;
        s.read_armed_ = s.write_armed_ = false;
        if (s.socket_.is_open()) s.socket_.release();
        s.ac_ = nullptr;
        s.handshake_ = nullptr;
        ++s.gen_;
    }

    void arm(asio::posix::stream_descriptor::wait_type w)
    {
        const bool read = w == asio::posix::stream_descriptor::wait_read;
        bool& armed = read ? read_armed_ : write_armed_;
        if (armed || !ac_) return;
        armed = true;
        socket_.async_wait(w, [wp = weak_from_this(), gen = gen_, read](error_code ec) {
            auto self = wp.lock();
            if (!self || gen != self->gen_) return;
            (read ? self->read_armed_ : self->write_armed_) = false;
            if (ec == asio::error::operation_aborted) return;
            self->on_ready(read);
        });
    }

    void on_ready(bool read)
    {
        if (!ac_ || !(read ? reading_ : writing_)) return;
        if (read)
            redisAsyncHandleRead(ac_);
        else
            redisAsyncHandleWrite(ac_);
        if (!ac_) return on_link_lost();
        if (reading_) arm(asio::posix::stream_descriptor::wait_read);
        if (writing_) arm(asio::posix::stream_descriptor::wait_write);
    }

    asio::any_io_executor ex_;
    connection_config cfg_;
    asio::ip::tcp::resolver resolver_;
    asio::posix::stream_descriptor socket_;
    asio::steady_timer cmd_timer_;
    asio::steady_timer link_timer_;   // connect timeout, then reconnection backoff
    std::chrono::milliseconds backoff_;

    redisAsyncContext* ac_ = nullptr;
    std::uint64_t gen_ = 0;   // link generation: handlers of an older link do nothing
    std::uint64_t backoff_seq_ = 0;
    state state_ = state::backoff;
    std::atomic<bool> connected_{false};
    bool reading_ = false, writing_ = false;
    bool read_armed_ = false, write_armed_ = false;
    bool cmd_timer_armed_ = false;
    bool destroying_ = false;
    const op* handshake_ = nullptr;   // identity only, while its reply is due
    bool refused_ = false;            // the handshake failed: nothing on this link counts
    error link_error_ = error::backend_unavailable;
    std::deque<std::shared_ptr<op>> ops_;
    bool resolving_ = false;   // the host name is being resolved: commands are held
    std::vector<std::shared_ptr<held_command>> held_;
};

namespace {

// Knows the live connections of one execution context, to shut them down with it.
class connection_registry : public asio::execution_context::service {
public:
    inline static asio::execution_context::id id;

    explicit connection_registry(asio::execution_context& ctx) : service(ctx) {}

    void add(const std::shared_ptr<connection_impl>& c)
    {
        std::lock_guard lock(mutex_);
        std::erase_if(live_, [](const auto& w) { return w.expired(); });
        live_.push_back(c);
    }

private:
    void shutdown() override
    {
        std::vector<std::shared_ptr<connection_impl>> alive;
        {
            std::lock_guard lock(mutex_);
            for (auto& w : live_)
                if (auto c = w.lock()) alive.push_back(std::move(c));
            live_.clear();
        }
        for (auto& c : alive) c->shutdown();
    }

    std::mutex mutex_;
    std::vector<std::weak_ptr<connection_impl>> live_;
};

} // namespace

std::shared_ptr<connection_impl> make_connection(const asio::any_io_executor& ex,
                                                 connection_config cfg)
{
    auto c = std::make_shared<connection_impl>(ex, std::move(cfg));
    asio::use_service<connection_registry>(asio::query(ex, asio::execution::context)).add(c);
    asio::dispatch(ex, [c] { c->start(); });
    return c;
}

void exec(const std::shared_ptr<connection_impl>& c, std::vector<std::string> argv,
          exec_handler h)
{
    asio::dispatch(c->executor(), [c, argv = std::move(argv), h = std::move(h)]() mutable {
        c->exec(std::move(argv), std::move(h));
    });
}

void eval(const std::shared_ptr<connection_impl>& c, const script& s,
          std::vector<std::string> keys, std::vector<std::string> args, exec_handler h)
{
    asio::dispatch(c->executor(), [c, s, keys = std::move(keys), args = std::move(args),
                                   h = std::move(h)]() mutable {
        c->eval(s, std::move(keys), std::move(args), std::move(h));
    });
}

void close(const std::shared_ptr<connection_impl>& c)
{
    asio::dispatch(c->executor(), [c] { c->close(); });
}

bool connected(const connection_impl& c) noexcept { return c.connected(); }

} // namespace sluice::redis::detail
