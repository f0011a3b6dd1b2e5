#include "fault_proxy.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <cstdio>
#include <array>
#include <atomic>
#include <deque>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

// GCC 12 inlines the coroutine frames' allocation (Asio's recycling allocator,
// aligned_alloc on a miss) and then takes the frame's own operator delete for a mismatched
// pair: a false positive that comes and goes with the inlining (as in lib/redis/cluster.cpp).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

namespace sluice_test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

} // namespace

struct fault_proxy::impl : std::enable_shared_from_this<impl> {
    // One direction of a session: chunks read and waiting for their delivery time.
    struct chunk {
        std::vector<char> data;
        clock_type::time_point due;
        bool then_close = false;   // the session closes once this chunk is written
    };

    // A change armed for one chunk of one direction (of any session).
    struct tamper {
        enum class kind { none, cut, edit, duplicate } what = kind::none;
        std::size_t skip = 0;   // chunks let through first
        std::size_t keep = 0;   // cut: bytes delivered
        fault_proxy::edit f;    // edit
    };
    struct lane {
        explicit lane(const asio::any_io_executor& ex) : wake(ex) {}
        std::deque<chunk> queue;
        asio::steady_timer wake;
        clock_type::time_point last_due{};   // in order: never before the previous chunk
        clock_type::time_point link_free{};  // bandwidth: when the "wire" is free again
    };

    struct session {
        session(asio::io_context& io) : client(io), upstream(io), up(io.get_executor()), down(io.get_executor()) {}
        tcp::socket client;
        tcp::socket upstream;
        lane up, down;
        bool dead = false;
        bool black_hole = false;
        bool lossy = false;   // bytes of it were dropped: it never forwards again

        void close()
        {
            if (dead) return;
            dead = true;
            error_code ec;
            client.close(ec);
            upstream.close(ec);
            up.wake.cancel();
            down.wake.cancel();
        }
    };

    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    tcp::acceptor acceptor{io};
    std::uint16_t port = 0;
    std::uint16_t upstream_port;
    std::thread thread;
    std::vector<std::weak_ptr<session>> sessions;
    std::mt19937_64 rng{12345};

    // Controls: written and read on the proxy's thread only.
    std::chrono::milliseconds latency{0}, jitter{0};
    std::uint64_t bandwidth = 0;
    bool drop = false, black_hole = false, reset = false, refuse = false;
    tamper next_up, next_down;
    double corruption = 0;
    std::mt19937_64 corrupt_rng{1};

    std::atomic<std::uint64_t> connections{0}, bytes_up{0}, bytes_down{0}, dropped{0}, resets{0}, black_holed{0},
        tampered{0};

    explicit impl(std::uint16_t up) : upstream_port(up) {}

    // Listens on `port`, first on one outside the kernel's range of ephemeral ports: while
    // refusing, a client's connect to a port in that range can be given that very port as
    // its own and connect to itself (TCP simultaneous open), and the proxy could then not
    // listen there again.
    void listen()
    {
        if (port == 0) {
            const auto [lo, hi] = ephemeral_ports();
            std::mt19937 rng(std::random_device{}());
            const bool below = lo > 11024;   // room below the range, else above it
            for (int tries = 0; port == 0 && tries < 500; ++tries) {
                const auto p = static_cast<std::uint16_t>(below ? std::uniform_int_distribution<int>(10000, lo - 1)(rng)
                                                                : std::uniform_int_distribution<int>(hi + 1, 65535)(rng));
                if (!bind_at(p)) port = p;
            }
            if (port == 0) throw std::runtime_error("fault_proxy: no free port outside the ephemeral range");
        } else if (auto ec = bind_at(port)) {
            throw std::runtime_error("fault_proxy: cannot listen again on port " + std::to_string(port) + ": " + ec.message());
        }
        acceptor.listen();
        asio::co_spawn(io, accept_loop(shared_from_this()), asio::detached);
    }

    // Opens the acceptor bound to 127.0.0.1:p, or closed with the error.
    error_code bind_at(std::uint16_t p)
    {
        error_code ec, ignored;
        tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), p);
        acceptor.open(ep.protocol(), ec);
        if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
        if (!ec) acceptor.bind(ep, ec);
        if (ec) acceptor.close(ignored);
        return ec;
    }

    // The kernel's ephemeral port range (Linux's default when it cannot be read).
    static std::pair<int, int> ephemeral_ports()
    {
        int lo = 32768, hi = 60999;
        if (std::FILE* f = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r")) {
            if (std::fscanf(f, "%d %d", &lo, &hi) != 2) lo = 32768, hi = 60999;
            std::fclose(f);
        }
        return {lo, hi};
    }

    static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self)
    {
        for (;;) {
            auto s = std::make_shared<session>(self->io);
            auto [ec] = co_await self->acceptor.async_accept(s->client, use_tuple);
            if (ec == asio::error::operation_aborted || !self->acceptor.is_open()) co_return;
            if (ec) continue;
            ++self->connections;
            std::erase_if(self->sessions, [](const auto& w) { return w.expired(); });
            self->sessions.push_back(s);
            if (self->reset) {
                self->rst(*s);
                continue;
            }
            asio::co_spawn(self->io, run(self, s), asio::detached);
        }
    }

    static asio::awaitable<void> run(std::shared_ptr<impl> self, std::shared_ptr<session> s)
    {
        if (self->black_hole) {
            self->enter_black_hole(*s);
            co_await pump(self, s, s->client, s->up, &impl::next_up);
            co_return;
        }
        tcp::endpoint to(asio::ip::make_address("127.0.0.1"), self->upstream_port);
        auto [ec] = co_await s->upstream.async_connect(to, use_tuple);
        if (ec || s->dead) {
            s->close();   // the server is not there: a plain close, as a proxy would
            co_return;
        }
        asio::co_spawn(self->io, pump(self, s, s->client, s->up, &impl::next_up), asio::detached);
        asio::co_spawn(self->io, pump(self, s, s->upstream, s->down, &impl::next_down), asio::detached);
        asio::co_spawn(self->io, deliver(self, s, s->upstream, s->up, &impl::bytes_up), asio::detached);
        asio::co_spawn(self->io, deliver(self, s, s->client, s->down, &impl::bytes_down), asio::detached);
    }

    void enter_black_hole(session& s)
    {
        if (s.black_hole) return;
        s.black_hole = true;
        ++black_holed;
        s.up.queue.clear();
        s.down.queue.clear();
    }

    // Reads `from` into `lane` (or discards, in the black hole or while dropping), each
    // chunk as the direction's armed change makes it; the session ends when either side
    // closes.
    static asio::awaitable<void> pump(std::shared_ptr<impl> self, std::shared_ptr<session> s, tcp::socket& from,
                                      lane& l, tamper impl::* armed)
    {
        std::array<char, 16384> buf;
        for (;;) {
            auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), use_tuple);
            if (ec || s->dead) {
                s->close();
                co_return;
            }
            // A stream with a gap is not TCP: once a session lost bytes, it loses the rest
            // (delivered after the gap, they would desynchronise any RESP client).
            if (self->drop) s->lossy = true;
            if (s->black_hole || s->lossy) {
                self->dropped += n;
                continue;
            }
            auto now = clock_type::now();
            auto due = now + self->latency;
            if (self->jitter.count() > 0)
                due += std::chrono::microseconds(std::uniform_int_distribution<std::int64_t>(
                    0, std::chrono::duration_cast<std::chrono::microseconds>(self->jitter).count())(self->rng));
            if (self->bandwidth > 0) {
                l.link_free = std::max(l.link_free, now) +
                              std::chrono::nanoseconds(static_cast<std::int64_t>(n * 1'000'000'000ull / self->bandwidth));
                due = std::max(due, l.link_free);
            }
            due = std::max(due, l.last_due);
            l.last_due = due;
            std::vector<char> data(buf.data(), buf.data() + n);
            bool then_close = false, twice = false;
            self->apply((*self).*armed, data, then_close, twice);
            if (armed == &impl::next_down) self->corrupt(data);
            l.queue.push_back({data, due, then_close});
            if (twice) l.queue.push_back({std::move(data), due});
            l.wake.cancel();
        }
    }

    // The armed change, if this chunk is its: cut (then close), edited, or twice.
    void apply(tamper& t, std::vector<char>& data, bool& then_close, bool& twice)
    {
        if (t.what == tamper::kind::none) return;
        if (t.skip > 0) {
            --t.skip;
            return;
        }
        ++tampered;
        switch (t.what) {
        case tamper::kind::cut:
            data.resize(std::min(t.keep, data.size() - 1));
            then_close = true;
            break;
        case tamper::kind::edit: {
            std::string b(data.begin(), data.end());
            t.f(b);
            data.assign(b.begin(), b.end());
            break;
        }
        case tamper::kind::duplicate:
            twice = true;
            break;
        case tamper::kind::none:
            break;
        }
        t = tamper{};
    }

    // Random corruption of a chunk from the server: one byte flipped, sometimes.
    void corrupt(std::vector<char>& data)
    {
        if (corruption <= 0 || data.empty() || std::uniform_real_distribution<double>(0, 1)(corrupt_rng) >= corruption)
            return;
        ++tampered;
        const auto at = std::uniform_int_distribution<std::size_t>(0, data.size() - 1)(corrupt_rng);
        data[at] = static_cast<char>(data[at] ^ std::uniform_int_distribution<int>(1, 255)(corrupt_rng));
    }

    // Writes the lane's chunks to `to`, each at its time.
    static asio::awaitable<void> deliver(std::shared_ptr<impl> self, std::shared_ptr<session> s, tcp::socket& to,
                                         lane& l, std::atomic<std::uint64_t> impl::* counter)
    {
        for (;;) {
            if (s->dead) co_return;
            if (l.queue.empty() || s->black_hole) {
                l.wake.expires_at(clock_type::time_point::max());
                co_await l.wake.async_wait(use_tuple);
                continue;
            }
            if (clock_type::now() < l.queue.front().due) {
                l.wake.expires_at(l.queue.front().due);
                co_await l.wake.async_wait(use_tuple);
                continue;
            }
            auto data = std::move(l.queue.front().data);
            const bool then_close = l.queue.front().then_close;
            l.queue.pop_front();
            auto [ec, n] = co_await asio::async_write(to, asio::buffer(data), use_tuple);
            if (ec || s->dead || then_close) {
                s->close();
                co_return;
            }
            (*self).*counter += n;
        }
    }

    // SO_LINGER 0, then close: the client's next read or write fails with ECONNRESET.
    void rst(session& s)
    {
        if (s.dead) return;
        error_code ec;
        s.client.set_option(asio::socket_base::linger(true, 0), ec);
        ++resets;
        s.close();
    }

    template <class F>
    void on_thread(F f)
    {
        std::promise<void> done;
        asio::post(io, [&] {
            f();
            done.set_value();
        });
        done.get_future().get();
    }

    template <class F>
    void each_session(F f)
    {
        for (auto& w : sessions)
            if (auto s = w.lock(); s && !s->dead) f(*s);
    }
};

fault_proxy::fault_proxy(std::uint16_t upstream_port) : impl_(std::make_shared<impl>(upstream_port))
{
    impl_->listen();
    impl_->thread = std::thread([i = impl_.get()] { i->io.run(); });
}

fault_proxy::~fault_proxy()
{
    impl_->on_thread([i = impl_.get()] {
        error_code ec;
        i->acceptor.close(ec);
        i->each_session([](impl::session& s) { s.close(); });
        i->work.reset();
    });
    // Every socket closed and every timer cancelled: the coroutines end and run() returns.
    impl_->thread.join();
}

std::uint16_t fault_proxy::port() const noexcept { return impl_->port; }

sluice::redis::connection_config fault_proxy::config() const
{
    sluice::redis::connection_config c;
    c.host = "127.0.0.1";
    c.port = impl_->port;
    return c;
}

void fault_proxy::set_latency(std::chrono::milliseconds fixed, std::chrono::milliseconds jitter)
{
    impl_->on_thread([&, i = impl_.get()] {
        i->latency = fixed;
        i->jitter = jitter;
    });
}

void fault_proxy::set_bandwidth(std::uint64_t bytes_per_second)
{
    impl_->on_thread([&, i = impl_.get()] { i->bandwidth = bytes_per_second; });
}

void fault_proxy::set_drop(bool on)
{
    impl_->on_thread([&, i = impl_.get()] { i->drop = on; });
}

void fault_proxy::set_black_hole(bool on)
{
    impl_->on_thread([&, i = impl_.get()] {
        i->black_hole = on;
        if (on) i->each_session([i](impl::session& s) { i->enter_black_hole(s); });
    });
}

void fault_proxy::set_reset(bool on)
{
    impl_->on_thread([&, i = impl_.get()] {
        i->reset = on;
        if (on) i->each_session([i](impl::session& s) { i->rst(s); });
    });
}

void fault_proxy::set_refuse(bool on)
{
    impl_->on_thread([&, i = impl_.get()] {
        if (on == i->refuse) return;
        i->refuse = on;
        if (on) {
            error_code ec;
            i->acceptor.close(ec);
        } else {
            i->acceptor = tcp::acceptor(i->io);
            i->listen();
        }
    });
}

void fault_proxy::set_upstream(std::uint16_t port)
{
    impl_->on_thread([&, i = impl_.get()] { i->upstream_port = port; });
}

void fault_proxy::reset_all()
{
    impl_->on_thread([i = impl_.get()] { i->each_session([i](impl::session& s) { i->rst(s); }); });
}

void fault_proxy::heal()
{
    set_refuse(false);
    impl_->on_thread([i = impl_.get()] {
        i->latency = i->jitter = std::chrono::milliseconds(0);
        i->bandwidth = 0;
        i->drop = i->black_hole = i->reset = false;
        i->next_up = i->next_down = impl::tamper{};
        i->corruption = 0;
    });
}

void fault_proxy::cut_reply(std::size_t keep, std::size_t skip)
{
    impl_->on_thread([&, i = impl_.get()] { i->next_down = {impl::tamper::kind::cut, skip, keep, {}}; });
}

void fault_proxy::cut_request(std::size_t keep, std::size_t skip)
{
    impl_->on_thread([&, i = impl_.get()] { i->next_up = {impl::tamper::kind::cut, skip, keep, {}}; });
}

void fault_proxy::edit_reply(edit f, std::size_t skip)
{
    impl_->on_thread([&, i = impl_.get()] { i->next_down = {impl::tamper::kind::edit, skip, 0, std::move(f)}; });
}

void fault_proxy::duplicate_reply(std::size_t skip)
{
    impl_->on_thread([&, i = impl_.get()] { i->next_down = {impl::tamper::kind::duplicate, skip, 0, {}}; });
}

void fault_proxy::set_corruption(double p, std::uint64_t seed)
{
    impl_->on_thread([&, i = impl_.get()] {
        i->corruption = p;
        i->corrupt_rng.seed(seed);
    });
}

fault_proxy::counts fault_proxy::stats() const
{
    counts c;
    impl_->on_thread([&, i = impl_.get()] {
        c.connections = i->connections;
        c.bytes_up = i->bytes_up;
        c.bytes_down = i->bytes_down;
        c.dropped = i->dropped;
        c.resets = i->resets;
        c.black_holed = i->black_holed;
        c.tampered = i->tampered;
        i->each_session([&](impl::session&) { ++c.open; });
    });
    return c;
}

} // namespace sluice_test
