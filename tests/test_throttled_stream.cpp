// sluice::throttled_stream over real loopback TCP sockets, its limiters on a manual clock:
// bytes move only as the clock grants them, shared limiters share fairly, cancellation
// and closed limiters end operations cleanly, and Asio's composed operations work on it.
#include "async_support.hpp"

#include <sluice/throttled_stream.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>

#include <doctest/doctest.h>

#include <array>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

using namespace std::chrono_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clk = sluice::basic_manual_clock<struct throttled_stream_tag>;
using bucket = sluice::token_bucket<clk>;
using stream = sluice::throttled_stream<tcp::socket, bucket>;
using sluice_test::drain;

namespace {

// A connected pair of loopback sockets.
std::pair<tcp::socket, tcp::socket> socket_pair(asio::io_context& io)
{
    tcp::acceptor acc(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    tcp::socket a(io), b(io);
    a.connect(acc.local_endpoint());
    acc.accept(b);
    return {std::move(a), std::move(b)};
}

// Loopback delivery is synchronous in the kernel, but the reactor may need another turn
// to see it: poll until nothing is left to run, a few times over.
void settle(asio::io_context& io)
{
    for (int i = 0; i < 5; ++i)
        drain(io);
}

void tick(asio::io_context& io, std::chrono::nanoseconds d)
{
    clk::advance(d);
    settle(io);
}

struct transfer_result {
    int calls = 0;
    boost::system::error_code ec;
    std::size_t n = 0;
};

auto record(std::shared_ptr<transfer_result> r)
{
    return [r](boost::system::error_code ec, std::size_t n) {
        CHECK(r->calls == 0);
        ++r->calls;
        r->ec = ec;
        r->n = n;
    };
}

// Reads whatever arrives on `s` into `got`, for ever (until an error).
void sink(tcp::socket& s, std::shared_ptr<std::string> got)
{
    auto buf = std::make_shared<std::array<char, 4096>>();
    s.async_read_some(asio::buffer(*buf), [&s, got, buf](boost::system::error_code ec, std::size_t n) {
        got->append(buf->data(), n);
        if (!ec) sink(s, got);
    });
}

} // namespace

TEST_SUITE_BEGIN("async");

TEST_CASE("throttled_stream: a write moves no byte before its permits; chunks follow the burst")
{
    asio::io_context io;
    clk::set(clk::duration{0});
    auto [a, b] = socket_pair(io);
    bucket limit(io, sluice::rate::per_second(1000), 100);   // 1000 B/s, 100 B at once
    stream s(std::move(a));
    s.write_limits() = {&limit};
    auto got = std::make_shared<std::string>();
    sink(b, got);

    std::string data(1000, 'x');
    std::iota(data.begin(), data.end(), 0);
    auto r = std::make_shared<transfer_result>();
    asio::async_write(s, asio::buffer(data), record(r));
    settle(io);
    CHECK(got->size() == 100);   // the burst: one chunk, capped at the burst
    CHECK(s.bytes_written() == 100);
    tick(io, 99ms);
    CHECK(got->size() == 100);   // not one byte early
    tick(io, 1ms);
    CHECK(got->size() == 200);
    for (int i = 0; i < 70; ++i)
        tick(io, 10ms);   // in steps, as a timer would fire: a jump finds the bucket capped
    CHECK(got->size() == 900);
    CHECK(r->calls == 0);
    tick(io, 100ms);
    REQUIRE(r->calls == 1);
    CHECK_FALSE(r->ec);
    CHECK(r->n == 1000);
    CHECK(*got == data);   // in order, nothing lost or doubled
}

TEST_CASE("throttled_stream: a read takes its permits after its bytes, and completes only then")
{
    asio::io_context io;
    clk::set(clk::duration{0});
    auto [a, b] = socket_pair(io);
    bucket limit(io, sluice::rate::per_second(1000), 100);
    stream s(std::move(b));
    s.read_limits() = {&limit};
    const std::string data(450, 'y');
    asio::write(a, asio::buffer(data));

    std::string in(450, '\0');
    auto r = std::make_shared<transfer_result>();
    asio::async_read(s, asio::buffer(in), record(r));
    settle(io);
    // 100 read and granted at once (the burst), the next 100 read and waiting 100 ms.
    CHECK(s.bytes_read() == 200);
    tick(io, 100ms);
    CHECK(s.bytes_read() == 300);
    tick(io, 200ms);
    CHECK(s.bytes_read() == 450);   // the last 50 read, their permits due at 350 ms
    CHECK(r->calls == 0);
    tick(io, 49ms);
    CHECK(r->calls == 0);
    tick(io, 1ms);
    REQUIRE(r->calls == 1);
    CHECK(r->n == 450);
    CHECK(in == data);
}

TEST_CASE("throttled_stream: streams sharing a limiter share it evenly; every byte passes every limiter")
{
    asio::io_context io;
    clk::set(clk::duration{0});
    bucket global(io, sluice::rate::per_second(3000), 100);
    bucket slow(io, sluice::rate::per_second(500), 100);   // stream 0's own, tighter
    std::vector<std::unique_ptr<stream>> writers;
    std::vector<tcp::socket> readers;
    std::vector<std::shared_ptr<std::string>> got;
    const std::string data(100'000, 'z');
    for (int i = 0; i < 3; ++i) {
        auto [a, b] = socket_pair(io);
        writers.push_back(std::make_unique<stream>(std::move(a)));
        writers.back()->write_limits() = {&global};
        readers.push_back(std::move(b));
        got.push_back(std::make_shared<std::string>());
    }
    writers[0]->write_limits() = {&slow, &global};
    for (int i = 0; i < 3; ++i) {
        sink(readers[static_cast<std::size_t>(i)], got[static_cast<std::size_t>(i)]);
        asio::async_write(*writers[static_cast<std::size_t>(i)], asio::buffer(data), [](auto, auto) {});
    }
    settle(io);
    for (int step = 0; step < 1000; ++step)
        tick(io, 10ms);   // 10 s
    // Stream 0 at its own 500 B/s; the other two split what the global 3000 B/s leaves.
    const double s0 = static_cast<double>(got[0]->size()), s1 = static_cast<double>(got[1]->size()),
                 s2 = static_cast<double>(got[2]->size());
    MESSAGE("bytes in 10 s: " << s0 << " " << s1 << " " << s2);
    CHECK(s0 + s1 + s2 <= 100 + 3000 * 10);   // never above the global limit (+ burst)
    CHECK(s0 + s1 + s2 >= 3000 * 10 - 300);
    CHECK(s0 <= 100 + 500 * 10);
    CHECK(s0 >= 500 * 10 - 100);
    CHECK(std::abs(s1 - s2) <= 200);
}

TEST_CASE("throttled_stream: cancellation while waiting for permits; a closed limiter; empty buffers")
{
    asio::io_context io;
    clk::set(clk::duration{0});
    auto [a, b] = socket_pair(io);
    bucket limit(io, sluice::rate::per_second(100), 10);
    stream w(std::move(a));
    w.write_limits() = {&limit};
    stream rd(std::move(b));
    rd.read_limits() = {&limit};

    // The burst goes at once; the next write waits 100 ms, and is cancelled: nothing sent.
    const std::string data(10, 'q');
    auto first = std::make_shared<transfer_result>();
    w.async_write_some(asio::buffer(data), record(first));
    settle(io);
    CHECK(first->n == 10);
    asio::cancellation_signal sig;
    auto second = std::make_shared<transfer_result>();
    w.async_write_some(asio::buffer(data), asio::bind_cancellation_slot(sig.slot(), record(second)));
    settle(io);
    CHECK(second->calls == 0);
    sig.emit(asio::cancellation_type::terminal);
    settle(io);
    CHECK(second->ec == asio::error::operation_aborted);
    CHECK(second->n == 0);
    CHECK(w.bytes_written() == 10);

    // A read cancelled while waiting for permits reports the bytes it has (they are in
    // the buffer), with operation_aborted.
    std::array<char, 10> in{};
    auto r1 = std::make_shared<transfer_result>();
    rd.async_read_some(asio::buffer(in), asio::bind_cancellation_slot(sig.slot(), record(r1)));
    settle(io);
    CHECK(rd.bytes_read() == 10);
    CHECK(r1->calls == 0);   // the burst went to the write; this waits
    sig.emit(asio::cancellation_type::partial);
    settle(io);
    CHECK(r1->ec == asio::error::operation_aborted);
    CHECK(r1->n == 10);

    // Empty buffers complete with 0 and take nothing.
    auto e = std::make_shared<transfer_result>();
    w.async_write_some(asio::const_buffer(), record(e));
    settle(io);
    CHECK(e->calls == 1);
    CHECK(e->n == 0);

    // A closed limiter fails the write with error::closed, nothing sent.
    limit.close();
    auto c = std::make_shared<transfer_result>();
    w.async_write_some(asio::buffer(data), record(c));
    settle(io);
    CHECK(c->ec == sluice::error::closed);
    CHECK(c->n == 0);
    CHECK(w.bytes_written() == 10);
}

TEST_CASE("throttled_stream: a sequence of small buffers is moved in chunks across them; coroutines")
{
    asio::io_context io;
    clk::set(clk::duration{0});
    auto [a, b] = socket_pair(io);
    bucket limit(io, sluice::rate::per_second(1000), 100);
    stream s(std::move(a));
    s.write_limits() = {&limit};
    s.set_chunk(64);
    CHECK_THROWS_AS(s.set_chunk(0), boost::system::system_error);
    auto got = std::make_shared<std::string>();
    sink(b, got);

    const std::string p1(30, '1'), p2(30, '2'), p3(100, '3');
    const std::array<asio::const_buffer, 3> seq{asio::buffer(p1), asio::buffer(p2), asio::buffer(p3)};
    std::size_t written = 0;
    bool done = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            written = co_await s.async_write_some(seq, asio::use_awaitable);   // 64: 30 + 30 + 4
            written += co_await asio::async_write(s, asio::buffer(p3.data() + 4, 96), asio::use_awaitable);
            done = true;
        },
        asio::detached);
    settle(io);
    CHECK(got->size() == 64);
    CHECK(*got == p1 + p2 + "3333");
    for (int i = 0; i < 20 && !done; ++i)
        tick(io, 10ms);
    CHECK(done);
    CHECK(written == 160);
    CHECK(*got == p1 + p2 + p3);
}

TEST_CASE("throttled_stream: Beast reads an HTTP response through a beast::tcp_stream, shaped")
{
    namespace http = boost::beast::http;
    asio::io_context io;
    clk::set(clk::duration{0});
    auto [a, b] = socket_pair(io);
    bucket limit(io, sluice::rate::per_second(10'000), 1000);
    sluice::throttled_stream<boost::beast::tcp_stream, bucket> s(std::move(b));
    s.read_limits() = {&limit};
    http::response<http::string_body> out{http::status::ok, 11};
    out.body() = std::string(4000, 'b');
    out.prepare_payload();
    http::write(a, out);

    boost::beast::flat_buffer buf;
    http::response<http::string_body> in;
    auto r = std::make_shared<transfer_result>();
    http::async_read(s, buf, in, record(r));
    settle(io);
    CHECK(r->calls == 0);   // 4 KB and more at 10 KB/s, burst 1 KB: not at once
    for (int i = 0; i < 50 && r->calls == 0; ++i)
        tick(io, 10ms);
    REQUIRE(r->calls == 1);
    CHECK_FALSE(r->ec);
    CHECK(in.body() == out.body());
    CHECK(clk::now().time_since_epoch() >= 300ms);   // >= (bytes - burst) / rate
}

TEST_SUITE_END();
