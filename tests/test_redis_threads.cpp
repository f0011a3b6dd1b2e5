// The connection and the cluster on a strand of an io_context run by two threads,
// operations initiated from foreign threads, and operations cancelled from their handlers'
// strands on another io_context while replies arrive; a token bucket on such a client,
// its waiters cancelled while they wait in its engine (also run under ThreadSanitizer:
// suite 'concurrency').
#include "redis_support.hpp"
#include "rng.hpp"

#include "redis/pending_op.hpp"

#include <sluice/redis/cluster.hpp>
#include <sluice/redis/connection.hpp>
#include <sluice/redis/sliding_window.hpp>
#include <sluice/redis/token_bucket.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <thread>

namespace asio = boost::asio;
using boost::system::error_code;
using sluice::redis::reply;
using namespace std::chrono_literals;

namespace {

using strand_type = asio::strand<asio::io_context::executor_type>;

// An io_context run by `n` threads until stop(): its work guard keeps them in run().
class pool {
public:
    explicit pool(int n)
    {
        for (int i = 0; i < n; ++i) threads_.emplace_back([this] { io.run(); });
    }
    ~pool() { stop(); }
    void stop()
    {
        guard_.reset();
        for (auto& t : threads_)
            if (t.joinable()) t.join();
    }

    asio::io_context io;

private:
    asio::executor_work_guard<asio::io_context::executor_type> guard_ = asio::make_work_guard(io);
    std::vector<std::thread> threads_;
};

// Runs f on `s` after `hops` more turns of it: a cancellation that lands anywhere between
// the initiation and the reply.
void after_hops(const strand_type& s, int hops, std::function<void()> f)
{
    if (hops == 0) return asio::post(s, std::move(f));
    asio::post(s, [s, hops, f = std::move(f)]() mutable { after_hops(s, hops - 1, std::move(f)); });
}

// What the lanes saw, checked on the test's thread once they are done.
struct tally {
    std::atomic<int> replied{0}, aborted{0}, wrong{0}, off_strand{0}, extra{0}, finished{0}, admitted{0};
};

// Every operation's handler ran once, on its lane's strand, with a reply or
// operation_aborted; both happened (the cancellations did race the replies).
template <class Lanes>
void check_lanes(const tally& t, int operations, const Lanes& all)
{
    CHECK(t.off_strand == 0);
    CHECK(t.extra == 0);
    CHECK(t.wrong == 0);
    CHECK(t.replied + t.aborted == operations);
    CHECK(t.replied > 0);
    CHECK(t.aborted > 0);
    for (auto& ln : all)
        for (auto& n : ln->calls) CHECK(n.load() == 1);
}

// One caller: a strand of the handlers' io_context with its own cancellation signal, and
// one operation at a time on it, each cancelled (or not) a random number of turns after it
// started. Each operation's handler must run exactly once, on this strand, with its own
// reply or with operation_aborted. The signal is emitted and reused only on the strand.
template <class Client>
struct lane : std::enable_shared_from_this<lane<Client>> {
    lane(strand_type s, Client& c, const sluice::redis::script& sc, int id, int ops, tally& t)
        : strand(std::move(s)), client(c), scr(sc), id(id), calls(static_cast<std::size_t>(ops)),
          rng(static_cast<unsigned>(id) * 7919u + 1), t(t)
    {
    }

    void start_next()
    {
        const int i = next++;
        if (i == static_cast<int>(calls.size())) {
            ++t.finished;
            return;
        }
        std::string payload = "lane" + std::to_string(id) + "-" + std::to_string(i);
        auto h = asio::bind_cancellation_slot(
            sig.slot(), asio::bind_executor(strand, [self = this->shared_from_this(), i, payload](
                                                        error_code ec, reply r) {
                self->done(i, payload, ec, r);
            }));
        // The key is the payload: on a cluster the lanes' operations go to every master.
        if (i % 2)
            client.async_exec({"ECHO", payload}, std::move(h));
        else
            client.async_eval(scr, {payload}, {payload}, std::move(h));
        auto cancel = [self = this->shared_from_this()] {
            self->sig.emit(self->rng() % 2 ? asio::cancellation_type::terminal
                                           : asio::cancellation_type::partial);
        };
        const auto pick = rng() % 10;
        if (pick < 4) {
            // Before the command is even sent, or while it is.
            after_hops(strand, static_cast<int>(pick), std::move(cancel));
        } else if (pick < 8) {
            // Around the time the reply comes (a loopback round trip is tens of us).
            auto timer = std::make_shared<asio::steady_timer>(strand, std::chrono::microseconds(rng() % 300));
            timer->async_wait([timer, cancel](error_code) { cancel(); });
        }
        // else: never cancelled
    }

    void done(int i, const std::string& payload, error_code ec, const reply& r)
    {
        if (!strand.running_in_this_thread()) ++t.off_strand;
        if (calls[static_cast<std::size_t>(i)].fetch_add(1) != 0) ++t.extra;
        if (ec == asio::error::operation_aborted)
            ++t.aborted;
        else if (!ec && r.str == payload)
            ++t.replied;
        else
            ++t.wrong;
        start_next();
    }

    strand_type strand;
    Client& client;
    sluice::redis::script scr;
    int id;
    std::deque<std::atomic<int>> calls;
    asio::cancellation_signal sig;
    sluice_test::rng rng;
    int next = 0;
    tally& t;
};

// A Client on a strand of an io_context run by two threads, and `lanes` lanes on strands of
// another, also run by two threads.
template <class Client>
void run_lanes(const sluice::redis::connection_config& cfg, int lanes, int per_lane,
               std::chrono::milliseconds limit)
{
    pool client_side(2), user_side(2);
    sluice::redis::script scr("return ARGV[1]");
    tally t;
    std::vector<std::shared_ptr<lane<Client>>> all;
    {
        Client c(asio::make_strand(client_side.io), cfg);
        for (int l = 0; l < lanes; ++l) {
            all.push_back(std::make_shared<lane<Client>>(asio::make_strand(user_side.io), c, scr, l,
                                                         per_lane, t));
            asio::post(all.back()->strand, [ln = all.back()] { ln->start_next(); });
        }
        REQUIRE(sluice_test::wait_until([&] { return t.finished == lanes; }, limit));
    }
    client_side.stop();
    user_side.stop();
    check_lanes(t, lanes * per_lane, all);
    MESSAGE("replied " << t.replied.load() << ", aborted " << t.aborted.load());
}

// One caller of a token bucket: a strand of the handlers' io_context, one async_acquire at a
// time, each cancelled (or not) a random time after it started: while its reservation is
// on its way, or while it waits for its slot in the limiter's engine. Each handler must
// run exactly once, on this strand, granted or with operation_aborted.
template <class Bucket, bool Tries = false>
struct acquire_lane : std::enable_shared_from_this<acquire_lane<Bucket, Tries>> {
    acquire_lane(strand_type s, Bucket& b, int id, int ops, tally& t)
        : strand(std::move(s)), bucket(b), id(id), calls(static_cast<std::size_t>(ops)),
          rng(static_cast<unsigned>(id) * 104729u + 3), t(t)
    {
    }

    void start_next()
    {
        const int i = next++;
        if (i == static_cast<int>(calls.size())) {
            ++t.finished;
            return;
        }
        if constexpr (Tries)
            bucket.async_try_acquire("lane" + std::to_string(id % 4), 1,
                                     asio::bind_cancellation_slot(
                                         sig.slot(), asio::bind_executor(strand, [self = this->shared_from_this(), i](
                                                                                     error_code ec, sluice::decision d) {
                                             if (!ec && d.admitted) ++self->t.admitted;
                                             self->done(i, ec);
                                         })));
        else
            bucket.async_acquire("lane" + std::to_string(id % 4), 1, 1s,
                                 asio::bind_cancellation_slot(
                                     sig.slot(), asio::bind_executor(strand, [self = this->shared_from_this(), i](error_code ec) {
                                         self->done(i, ec);
                                     })));
        auto cancel = [self = this->shared_from_this()] {
            self->sig.emit(self->rng() % 2 ? asio::cancellation_type::terminal : asio::cancellation_type::total);
        };
        const auto pick = rng() % 10;
        if (pick < 3) {
            after_hops(strand, static_cast<int>(pick), std::move(cancel));
        } else if (pick < 7) {
            // While it waits for its slot (slots are 500 us apart, two lanes a key).
            auto timer = std::make_shared<asio::steady_timer>(strand, std::chrono::microseconds(rng() % 2000));
            timer->async_wait([timer, cancel](error_code) { cancel(); });
        }
    }

    void done(int i, error_code ec)
    {
        if (!strand.running_in_this_thread()) ++t.off_strand;
        if (calls[static_cast<std::size_t>(i)].fetch_add(1) != 0) ++t.extra;
        if (ec == asio::error::operation_aborted)
            ++t.aborted;
        else if (!ec)
            ++t.replied;
        else
            ++t.wrong;
        start_next();
    }

    strand_type strand;
    Bucket& bucket;
    int id;
    std::deque<std::atomic<int>> calls;
    asio::cancellation_signal sig;
    std::minstd_rand rng;
    int next = 0;
    tally& t;
};

using lane_client = sluice::redis::basic_connection<strand_type>;

// `lanes` lanes of `per_lane` operations each on the limiter make(client) builds: the client
// on a strand of two threads, the lanes on strands of two others (check_lanes); the
// limiter's stats once all are done.
template <class Limiter, bool Tries, class Make>
sluice::limiter_stats run_lanes(int lanes, int per_lane, tally& t, Make make)
{
    sluice_test::redis_server srv;
    pool client_side(2), user_side(2);
    std::vector<std::shared_ptr<acquire_lane<Limiter, Tries>>> all;
    sluice::limiter_stats s;
    {
        lane_client c(asio::make_strand(client_side.io), srv.config());
        REQUIRE(sluice_test::wait_until([&] { return c.connected(); }, 10000ms));
        auto limiter = make(c);
        for (int l = 0; l < lanes; ++l) {
            all.push_back(std::make_shared<acquire_lane<Limiter, Tries>>(asio::make_strand(user_side.io), *limiter, l,
                                                                          per_lane, t));
            asio::post(all.back()->strand, [ln = all.back()] { ln->start_next(); });
        }
        REQUIRE(sluice_test::wait_until([&] { return t.finished == lanes; }, 150000ms));
        s = limiter->stats();
        limiter->close();
    }
    client_side.stop();
    user_side.stop();
    check_lanes(t, lanes * per_lane, all);
    return s;
}

} // namespace

TEST_SUITE_BEGIN("redis");

TEST_CASE("pending_op: a cancellation racing the completion completes once, on the handler's strand" * doctest::timeout(120))
{
    // No server: the I/O executor completes each operation after a random number of turns,
    // the handler's strand (another io_context) cancels it after another.
    using sluice::redis::detail::pending_op;
    pool io_side(2), user_side(2);
    auto io_strand = asio::make_strand(io_side.io);
    constexpr int lanes = 4, per_lane = 3000;
    tally t;

    struct state {
        state(strand_type s, unsigned seed) : strand(std::move(s)), rng(seed) {}
        strand_type strand;
        asio::cancellation_signal sig;
        sluice_test::rng rng;
        int next = 0;
    };
    std::vector<std::unique_ptr<state>> st;
    std::function<void(state*)> start = [&](state* s) {
        if (s->next++ == per_lane) {
            ++t.finished;
            return;
        }
        auto count = std::make_shared<std::atomic<int>>(0);
        auto h = asio::bind_cancellation_slot(
            s->sig.slot(), asio::bind_executor(s->strand, [&, s, count](error_code ec, reply) {
                if (!s->strand.running_in_this_thread()) ++t.off_strand;
                if (count->fetch_add(1) != 0) ++t.extra;
                ++(ec == asio::error::operation_aborted ? t.aborted : t.replied);
                start(s);
            }));
        // Initiated here, on the handler's strand, as async_exec does.
        auto op = pending_op::start(sluice::redis::detail::exec_handler(std::move(h)), io_strand);
        // The reply, on the I/O executor, and the cancellation, on the handler's strand.
        after_hops(io_strand, static_cast<int>(s->rng() % 4), [op] { op->complete({}, reply{}); });
        after_hops(s->strand, static_cast<int>(s->rng() % 4),
                   [s] { s->sig.emit(asio::cancellation_type::terminal); });
    };
    for (int l = 0; l < lanes; ++l) {
        st.push_back(std::make_unique<state>(asio::make_strand(user_side.io), static_cast<unsigned>(l) + 1));
        asio::post(st.back()->strand, [&, s = st.back().get()] { start(s); });
    }
    REQUIRE(sluice_test::wait_until([&] { return t.finished == lanes; }, 100000ms));
    io_side.stop();
    user_side.stop();
    CHECK(t.off_strand == 0);
    CHECK(t.extra == 0);
    CHECK(t.replied + t.aborted == lanes * per_lane);
    CHECK(t.replied > 0);
    CHECK(t.aborted > 0);
}

TEST_CASE("connection: cancelled from the handlers' strands on another io_context while replies arrive" * doctest::timeout(180))
{
    sluice_test::redis_server srv;
    run_lanes<sluice::redis::connection>(srv.config(), 4, 500, 120000ms);
}

TEST_CASE("cluster: cancelled from the handlers' strands on another io_context while replies arrive" * doctest::timeout(240))
{
    sluice_test::redis_cluster cl;
    run_lanes<sluice::redis::cluster>(cl.config(), 3, 200, 150000ms);
}

TEST_CASE("token bucket: waiters cancelled from their strands while they wait in the engine, client on a strand of two threads" * doctest::timeout(180))
{
    using bucket_type = sluice::redis::token_bucket<lane_client>;
    tally t;
    auto s = run_lanes<bucket_type, false>(8, 100, t, [](lane_client& c) {
        return std::make_unique<bucket_type>(c, sluice::rate::per_second(2000), 1);
    });
    // The limiter counted each request once, as its handler saw it.
    CHECK(s.admitted == static_cast<std::uint64_t>(t.replied.load()));
    CHECK(s.cancelled == static_cast<std::uint64_t>(t.aborted.load()));
    CHECK(s.waiting == 0);
    CHECK(s.waited > 0);
    MESSAGE("granted " << t.replied.load() << ", cancelled " << t.aborted.load() << ", of which waited " << s.waited);
}

TEST_CASE("sliding window: tries batched per key, cancelled from their strands while they wait for the key's call, client on a strand of two threads" * doctest::timeout(180))
{
    using window_type = sluice::redis::sliding_window<lane_client>;
    tally t;
    auto s = run_lanes<window_type, true>(16, 300, t, [](lane_client& c) { return std::make_unique<window_type>(c, 1000, 50ms); });
    CHECK(t.admitted > 0);
    CHECK(s.try_admitted == static_cast<std::uint64_t>(t.admitted.load()));
    // Four keys, sixteen lanes: requests waited for their key's call and went together.
    CHECK(s.backend.commands < static_cast<std::uint64_t>(t.replied.load()));
    MESSAGE("tries answered " << t.replied.load() << ", cancelled " << t.aborted.load() << ", calls " << s.backend.commands);
}

TEST_CASE("connection: on a strand, io_context run by two threads" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto strand = asio::make_strand(io);
    sluice::redis::basic_connection<asio::strand<asio::io_context::executor_type>> c(strand, srv.config());
    constexpr int workers = 8, per = 500;
    std::atomic<int> ok{0}, finished{0};
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(strand, [&, w]() -> asio::awaitable<void> {
            std::string key = "w" + std::to_string(w);
            for (int i = 0; i < per; ++i) {
                std::vector<std::string> incr{"INCR", key};
                auto [ec, r] = co_await c.async_exec(incr, asio::as_tuple(asio::use_awaitable));
                if (!ec && r.integer == i + 1) ++ok;
            }
            ++finished;
        }, asio::detached);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    auto done = sluice_test::wait_until([&] { return finished == workers; }, 30000ms);
    c.close();
    t1.join();
    t2.join();
    CHECK(done);
    CHECK(ok == workers * per);
}

TEST_CASE("connection: initiated from foreign threads while two threads run the strand" * doctest::timeout(60))
{
    sluice_test::redis_server srv;
    asio::io_context io;
    auto guard = asio::make_work_guard(io);
    sluice::redis::connection c(asio::make_strand(io), srv.config());
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });

    constexpr int callers = 3, per = 200;
    std::atomic<int> ok{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < callers; ++t)
        threads.emplace_back([&, t] {
            for (int i = 0; i < per; ++i) {
                auto f = c.async_exec({"RPUSH", "list" + std::to_string(t), std::to_string(i)},
                                      asio::use_future);
                if (f.wait_for(10s) == std::future_status::ready && f.get().integer == i + 1) ++ok;
            }
        });
    for (auto& th : threads) th.join();
    CHECK(ok == callers * per);
    c.close();
    guard.reset();
    t1.join();
    t2.join();
}

TEST_CASE("cluster: on a strand, io_context run by two threads" * doctest::timeout(120))
{
    sluice_test::redis_cluster cl;
    asio::io_context io;
    auto strand = asio::make_strand(io);
    sluice::redis::basic_cluster<asio::strand<asio::io_context::executor_type>> c(strand, cl.config());
    constexpr int workers = 6, per = 100;
    std::atomic<int> ok{0}, finished{0};
    sluice::redis::script s("return redis.call('INCR', KEYS[1])");
    for (int w = 0; w < workers; ++w)
        asio::co_spawn(strand, [&, w]() -> asio::awaitable<void> {
            std::string key = "worker" + std::to_string(w);
            for (int i = 0; i < per; ++i) {
                std::vector<std::string> keys{key}, args;
                auto [ec, r] = co_await c.async_eval(s, keys, args, asio::as_tuple(asio::use_awaitable));
                if (!ec && r.integer == i + 1) ++ok;
            }
            ++finished;
        }, asio::detached);
    std::thread t1([&] { io.run(); });
    std::thread t2([&] { io.run(); });
    auto done = sluice_test::wait_until([&] { return finished == workers; }, 60000ms);
    c.close();
    t1.join();
    t2.join();
    CHECK(done);
    CHECK(ok == workers * per);
}

TEST_SUITE_END();
