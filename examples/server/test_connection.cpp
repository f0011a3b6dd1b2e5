// What a connection of the server holds and how it ends, without a socket: the read
// budget every connection's read buffer takes its bytes from (read_budget.hpp), with a
// real beast::flat_buffer where the budget must agree with it, and the lingering close
// after a refusal (lingering_close.hpp), on time points given by hand.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "lingering_close.hpp"
#include "read_budget.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

using server_check::first_read;
using server_check::grown_capacity;
using server_check::lingering_close;
using server_check::next_read;
using server_check::read_budget;
using server_check::read_buffer_size;

TEST_CASE("read_budget: a budget out of its bounds is refused at construction")
{
    for (std::uint64_t bad : {std::uint64_t{0}, std::uint64_t{1}, server_check::min_read_budget - 1,
                              server_check::max_read_budget + 1}) {
        CAPTURE(bad);
        try {
            read_budget b(bad);
            FAIL("accepted");
        } catch (const boost::system::system_error& e) {
            CHECK(e.code() == sluice::error::invalid_option);
        }
    }
    read_budget low(server_check::min_read_budget);
    CHECK(low.limit() == 65536);
    read_budget high(server_check::max_read_budget);
    CHECK(high.limit() == std::uint64_t{1} << 40);
    CHECK(high.in_use() == 0);
}

TEST_CASE("read_budget: leases take, grow and give back, never past the budget")
{
    read_budget b(65536);   // three quarters, 49152, for growth; all of it for first reads
    {
        read_budget::lease x(b), y(b), z(b);
        CHECK(x.grow_to(first_read));
        CHECK(b.in_use() == 512);
        CHECK(x.grow_to(16384));   // growth: 16384 in all
        CHECK(y.grow_to(16384));   // a first read may be a whole buffer at once
        CHECK(z.grow_to(16384));
        CHECK(b.in_use() == 49152);   // the growth share, all taken
        CHECK(x.grow_to(16384));      // what it holds already: nothing to take
        read_budget::lease w(b);
        CHECK_FALSE(z.grow_to(16385));   // growth past the share: refused, z unchanged
        CHECK(z.held() == 16384);
        CHECK(w.grow_to(first_read));    // a first read: from the quarter kept for them
        CHECK_FALSE(w.grow_to(1024));    // and no growth from there
        CHECK(w.held() == 512);
        // First reads fill the budget, to its last byte, and not one past it.
        std::vector<std::unique_ptr<read_budget::lease>> firsts;
        for (;;) {
            auto l = std::make_unique<read_budget::lease>(b);
            if (!l->grow_to(first_read)) break;
            firsts.push_back(std::move(l));
        }
        CHECK(firsts.size() == (65536 - 49152 - 512) / 512);
        CHECK(b.in_use() == 65536);
        CHECK(b.peak() == 65536);
        // Giving back makes room: a buffer shrinks, a connection goes.
        x.shrink_to(8192);
        CHECK(b.in_use() == 65536 - 8192);
        CHECK_FALSE(w.grow_to(1024));   // still over the growth share
        firsts.resize(firsts.size() - 16);
        y.shrink_to(0);   // its buffer freed (an idle connection)
        CHECK(b.in_use() == 65536 - 8192 - 16 * 512 - 16384);
        CHECK(w.grow_to(1024));
        CHECK(y.grow_to(first_read));   // y holds nothing: a first read again
        x.shrink_to(16384);             // shrinking to more is no change
        CHECK(x.held() == 8192);
    }
    // Every lease gone, by its destructor: all given back.
    CHECK(b.in_use() == 0);
    CHECK(b.peak() == 65536);
}

TEST_CASE("read_budget: nothing leaks, however a connection ends")
{
    read_budget b(65536);
    // Ended by an exception while holding some.
    try {
        read_budget::lease l(b);
        REQUIRE(l.grow_to(4096));
        throw std::runtime_error("connection failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(b.in_use() == 0);
    // A refused growth takes nothing: the lease holds what it held.
    read_budget::lease big(b), small(b);
    REQUIRE(big.grow_to(49152 - 512));
    REQUIRE(small.grow_to(512));
    CHECK_FALSE(small.grow_to(2048));
    CHECK(small.held() == 512);
    CHECK(b.in_use() == 49152);
    big.shrink_to(0);
    small.shrink_to(0);
    CHECK(b.in_use() == 0);
}

TEST_CASE("read_budget: grown_capacity is what Beast's flat_buffer grows to")
{
    // Every shape of a 16 KiB buffer near its doubling points: its capacity, the bytes it
    // holds (some consumed from the front, so that prepare() moves them), and the room asked.
    const std::size_t max = read_buffer_size;
    const std::size_t points[] = {0, 1, 511, 512, 513, 1024, 1536, 4095, 4096, 8191, 8192, 12000, 16383, 16384};
    std::size_t checked = 0;
    for (std::size_t cap : points)
        for (std::size_t size : points) {
            if (size > cap) continue;
            for (std::size_t room : points) {
                if (room == 0 || room > max - size) continue;
                for (std::size_t consumed : {std::size_t{0}, std::size_t{7}}) {
                    if (size + consumed > cap) continue;
                    boost::beast::flat_buffer buf(max);
                    buf.reserve(cap);
                    REQUIRE(buf.capacity() == cap);
                    buf.commit(boost::asio::buffer_copy(buf.prepare(size + consumed),
                                                        boost::asio::buffer(std::string(size + consumed, 'x'))));
                    buf.consume(consumed);
                    REQUIRE(buf.size() == size);
                    buf.prepare(room);
                    CAPTURE(cap);
                    CAPTURE(size);
                    CAPTURE(room);
                    CHECK(buf.capacity() == grown_capacity(size, cap, room, max));
                    ++checked;
                }
            }
        }
    CHECK(checked > 500);
}

namespace {

// A connection's read buffer as main.cpp's read_within fills it: next_read says how much
// to read, prepare() that many, then `arrived` of them come (at most that many).
struct reading {
    boost::beast::flat_buffer buf{read_buffer_size};
    read_budget::lease held;
    std::size_t want = first_read;

    explicit reading(read_budget& b) : held(b) {}

    // Reads `arrived` bytes (never taken by the parser: a header that does not end);
    // false, nothing read, if next_read refuses.
    bool read(std::size_t arrived)
    {
        const auto room = next_read(held, buf.size(), buf.capacity(), want, buf.max_size());
        if (!room) return false;
        auto space = buf.prepare(*room);
        REQUIRE(buf.capacity() == held.held());
        const auto n = std::min(arrived, *room);
        buf.commit(boost::asio::buffer_copy(space, boost::asio::buffer(std::string(n, 'h'))));
        if (n == *room) want = std::min(2 * *room, buf.max_size());
        return true;
    }
};

} // namespace

TEST_CASE("read_budget: a buffer grows only where the budget has room, step by step")
{
    read_budget b(65536);
    // A header that does not end, arriving faster than it is read: 512, then doubling.
    reading slow(b);
    CHECK(slow.read(100000));
    CHECK(slow.buf.capacity() == 512);
    CHECK(slow.read(100000));   // full: 1024 more asked, the buffer to 1536
    CHECK(slow.buf.capacity() == 1536);
    CHECK(slow.buf.size() == 1536);
    CHECK(b.in_use() == 1536);
    // Others take the growth share, but for what this one holds and 1024 more.
    read_budget::lease hog(b);
    REQUIRE(hog.grow_to(49152 - 1536 - 1024));
    // Next: 2048 more asked (the buffer to 3584): no room. The buffer is full: refused,
    // and nothing taken.
    CHECK_FALSE(slow.read(100000));
    CHECK(b.in_use() == 49152 - 1024);
    // A buffer with free room reads into it when the budget cannot grow it: slower, not
    // refused.
    reading fast(b);
    CHECK(fast.read(300));   // its first read, 512
    REQUIRE(hog.grow_to(49152 - 1536 - 512));   // the growth share full now
    fast.want = 4096;             // as if it had filled its reads
    CHECK(fast.read(100));       // no growth: the 212 bytes free
    CHECK(fast.buf.capacity() == 512);
    CHECK(fast.buf.size() == 400);
    CHECK(fast.read(1000));      // the last 112
    CHECK(fast.buf.size() == 512);
    CHECK_FALSE(fast.read(1000));   // full, and no room: refused
    // Room again (the hog's connection went): the slow one grows as it would have.
    hog.shrink_to(0);
    CHECK(slow.read(100000));
    CHECK(slow.buf.capacity() == 3584);
    CHECK(b.in_use() == 3584 + 512);
    CHECK(b.peak() <= b.limit());
}

TEST_CASE("read_budget: threads growing and shrinking leases never take past it, and give all back")
{
    read_budget b(65536);
    std::atomic<bool> over{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
        threads.emplace_back([&b, &over, t] {
            std::mt19937 rng(static_cast<unsigned>(t));
            std::vector<std::unique_ptr<read_budget::lease>> mine;
            for (int i = 0; i < 20000; ++i) {
                if (mine.size() < 16 && rng() % 2 == 0) mine.push_back(std::make_unique<read_budget::lease>(b));
                if (mine.empty()) continue;
                auto& l = *mine[rng() % mine.size()];
                switch (rng() % 6) {
                case 0: l.grow_to(first_read); break;
                case 1:
                case 2: l.grow_to(std::min<std::uint64_t>(read_buffer_size, 2 * l.held() + 512)); break;
                case 3: l.shrink_to(l.held() / 2); break;
                case 4: l.shrink_to(0); break;
                default: mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(rng() % mine.size()));
                }
                if (b.in_use() > b.limit()) over = true;
            }
        });
    for (auto& t : threads) t.join();
    CHECK_FALSE(over.load());
    CHECK(b.peak() <= b.limit());
    CHECK(b.peak() > 49152);   // it was under pressure
    CHECK(b.in_use() == 0);
}

TEST_CASE("lingering_close: only when the client may still be sending")
{
    CHECK_FALSE(lingering_close::needed(true, 0, 0));   // all read, nothing behind it
    CHECK(lingering_close::needed(false, 0, 0));        // a body (or header) not read
    CHECK(lingering_close::needed(true, 12, 0));        // a request behind it, read
    CHECK(lingering_close::needed(true, 0, 1));         // bytes waiting in the socket
}

TEST_CASE("lingering_close: bounded by time and bytes, step by step")
{
    using namespace std::chrono_literals;
    const lingering_close::clock::time_point t0{std::chrono::seconds(1000)};
    lingering_close l(t0);
    CHECK(l.wait(t0) == lingering_close::linger_time);
    CHECK(l.room() == lingering_close::linger_bytes);
    l.drained(1024 * 1024);
    CHECK(l.wait(t0 + 2s) == 3s);   // bytes do not extend the time
    CHECK(l.room() == 3 * 1024 * 1024);
    CHECK(l.wait(t0 + 5s) <= lingering_close::clock::duration::zero());
    CHECK(l.wait(t0 + 7s) <= lingering_close::clock::duration::zero());

    lingering_close flood(t0);
    flood.drained(lingering_close::linger_bytes - 1);
    CHECK(flood.wait(t0 + 1s) == 4s);
    CHECK(flood.room() == 1);
    flood.drained(4096);   // never counted past the bound
    CHECK(flood.total() == lingering_close::linger_bytes);
    CHECK(flood.room() == 0);
    CHECK(flood.wait(t0 + 1s) == lingering_close::clock::duration::zero());
}
