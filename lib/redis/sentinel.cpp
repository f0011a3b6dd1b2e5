// Master discovery through Redis Sentinel: the steps of detail::sentinel_fsm performed
// over short-lived TCP connections (one per Sentinel asked or master checked), RESP
// written and read by hiredis_adapter's format_commands and reply_reader. A coroutine: discovery runs
// once per connection attempt, where clarity matters more than an allocation or two.
#include <sluice/redis/detail/sentinel_fsm.hpp>
#include <sluice/redis/detail/sentinel_impl.hpp>
#include <sluice/redis/sentinel_error.hpp>

#include <sluice/error.hpp>

#include "hiredis_adapter.hpp"

#include <boost/asio/append.hpp>
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

#include <array>
#include <exception>
#include <memory>
#include <optional>
#include <utility>

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
          order_(cfg_.sentinels)
    {
    }

    asio::any_io_executor executor() const { return ex_; }
    const sentinel_config& config() const noexcept { return cfg_; }
    const std::string& master_password() const noexcept { return master_password_; }

    // On the executor only: the order the next round asks the Sentinels in.
    const std::vector<sentinel_address>& order() const noexcept { return order_; }
    void set_order(std::vector<sentinel_address> o) { order_ = std::move(o); }

private:
    asio::any_io_executor ex_;
    sentinel_config cfg_;
    std::string master_password_;
    std::vector<sentinel_address> order_;
};

namespace {

constexpr auto nothrow = asio::as_tuple(asio::use_awaitable);

// What one exchange produced: the answer (the last reply, or an earlier error reply such
// as a refused AUTH) or why there is none, and the peer it came from.
struct exchange_result {
    error_code ec;
    reply answer;
    tcp::endpoint peer;
};

// The I/O objects of one exchange, shared with its timeout's handler, which may run after
// the coroutine has moved on.
struct exchange_io {
    explicit exchange_io(const asio::any_io_executor& ex) : resolver(ex), socket(ex) {}
    tcp::resolver resolver;
    tcp::socket socket;
    bool timed_out = false;
    // Here, not in the coroutine frame: with a frame this large GCC 12 pairs Asio's frame
    // allocation (aligned_alloc) with its operator delete, a false -Wmismatched-new-delete.
    std::array<char, 1024> buf;
};

asio::awaitable<error_code> talk(exchange_io& io, const sentinel_address& to,
                                 const std::vector<std::vector<std::string>>& commands,
                                 exchange_result& out)
{
    auto [rec, endpoints] = co_await io.resolver.async_resolve(to.host, std::to_string(to.port), nothrow);
    if (rec) co_return rec;
    error_code ec = asio::error::host_not_found;
    for (const auto& e : endpoints) {
        // A closed socket would be opened again by async_connect: look first.
        if (io.timed_out) co_return error::backend_unavailable;
        std::tie(ec) = co_await io.socket.async_connect(e.endpoint(), nothrow);
        if (!ec) {
            out.peer = e.endpoint();
            break;
        }
        error_code ignored;
        io.socket.close(ignored);
    }
    if (ec) co_return ec;

    const std::string wire = format_commands(commands);
    auto [wec, written] = co_await asio::async_write(io.socket, asio::buffer(wire), nothrow);
    (void)written;
    if (wec) co_return wec;

    reply_reader reader;
    std::optional<reply> r;
    std::size_t due = commands.size();
    while (due > 0) {
        auto [e, n] = co_await io.socket.async_read_some(asio::buffer(io.buf), nothrow);
        if (e) co_return e;
        if (!reader.feed(io.buf.data(), n)) co_return error::protocol_error;
        while (due > 0) {
            if (!reader.next(r)) co_return error::protocol_error;
            if (!r) break;
            --due;
            if (!out.answer.is_error()) out.answer = std::move(*r);
        }
    }
    co_return error_code{};
}

// Connects to `to`, sends `commands` pipelined and reads as many replies, all within
// `timeout` (then error::backend_unavailable).
asio::awaitable<exchange_result> exchange(sentinel_address to,
                                          std::vector<std::vector<std::string>> commands,
                                          std::chrono::milliseconds timeout)
{
    auto ex = co_await asio::this_coro::executor;
    auto io = std::make_shared<exchange_io>(ex);
    asio::steady_timer timer(ex, timeout);
    timer.async_wait([io](error_code ec) {
        if (ec) return;
        io->timed_out = true;
        io->resolver.cancel();   // Asio 1.81's resolver has no per-operation cancellation
        error_code ignored;
        io->socket.close(ignored);
    });
    exchange_result out;
    out.ec = co_await talk(*io, to, commands, out);
    timer.cancel();
    if (io->timed_out) out.ec = error::backend_unavailable;
    co_return out;
}

using resolution = std::pair<error_code, tcp::endpoint>;

asio::awaitable<resolution> run(std::shared_ptr<sentinel_impl> self)
{
    const auto& cfg = self->config();
    sentinel_fsm fsm(self->order(), cfg.master_name);
    tcp::endpoint master;
    auto a = fsm.start();
    try {
        while (a.what != sentinel_fsm::step::done) {
            const bool asking = a.what == sentinel_fsm::step::ask_sentinel;
            std::vector<std::vector<std::string>> commands;
            const std::string& password = asking ? cfg.password : self->master_password();
            if (!password.empty()) commands.push_back({"AUTH", password});
            commands.push_back(asking ? fsm.sentinel_command() : sentinel_fsm::role_command());
            auto x = co_await exchange(a.target, std::move(commands), cfg.timeout);
            auto cs = co_await asio::this_coro::cancellation_state;
            if (cs.cancelled() != asio::cancellation_type::none)
                co_return resolution{asio::error::operation_aborted, {}};
            if (asking) {
                a = fsm.on_sentinel_reply(x.ec, x.answer);
            } else {
                master = x.peer;
                a = fsm.on_role_reply(x.ec, x.answer);
            }
        }
    } catch (const boost::system::system_error& e) {
        // Once cancelled, a co_await throws instead of starting an operation: the connect
        // after a name resolution (which Asio 1.81 cannot cancel), or the next endpoint's.
        if (e.code() != asio::error::operation_aborted) throw;
        co_return resolution{asio::error::operation_aborted, {}};
    }
    if (a.ec) co_return resolution{a.ec, {}};
    self->set_order(fsm.sentinels());
    co_return resolution{{}, master};
}

} // namespace

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

} // namespace sluice::redis::detail
