// Scenario bandwidth (a sluice addition): --connections C loopback TCP connections share
// one cap of --rate bytes per second (e.g. 50MB/s) for --seconds D. Each sending side is a
// sluice::throttled_stream whose writes pass one token bucket shared by all (burst 64 KiB);
// the receiving sides read as fast as they can and count. One io_context thread runs both.
//
// Prints: cap_bytes_per_s, achieved_bytes_per_s (bytes received within the D seconds / D),
// share_min and share_max (a connection's bytes over the equal share), cpu_us_per_mb
// (the process's CPU time, senders and receivers, per 10^6 bytes).
#include "bench_common.hpp"

#include <sluice/throttled_stream.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <vector>

namespace sluice_bench {

std::int64_t bandwidth_connections = 100;   // --connections C

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using shaped = sluice::throttled_stream<tcp::socket>;

asio::awaitable<void> send_loop(shaped& s, const std::vector<char>& data, const bool& stop)
{
    while (!stop) {
        auto [ec, n] = co_await s.async_write_some(asio::buffer(data), asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
    }
}

asio::awaitable<void> receive_loop(tcp::socket& s, std::uint64_t& counted, const bool& counting)
{
    std::vector<char> buf(64 * 1024);
    for (;;) {
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        if (counting) counted += n;
    }
}

} // namespace

int run_bandwidth(const options& o)
{
    const auto c = static_cast<std::size_t>(bandwidth_connections);
    if (bandwidth_connections < 1 || bandwidth_connections > 10'000)
        throw std::invalid_argument("--connections wants 1 to 10000");
    if (!(o.rate >= 1000) || !(o.seconds > 0))
        throw std::invalid_argument("--rate wants at least 1000 bytes per second (e.g. 50MB/s), --seconds > 0");

    asio::io_context io(1);
    constexpr std::uint64_t burst = 64 * 1024;
    sluice::token_bucket<> cap(io, sluice::rate::per_second(o.rate), burst);

    tcp::acceptor acc(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
    std::vector<std::unique_ptr<shaped>> senders;
    std::vector<tcp::socket> receivers;
    receivers.reserve(c);
    for (std::size_t i = 0; i < c; ++i) {
        tcp::socket a(io);
        a.connect(acc.local_endpoint());
        receivers.emplace_back(io);
        acc.accept(receivers.back());
        senders.push_back(std::make_unique<shaped>(std::move(a)));
        senders.back()->write_limits() = {&cap};
    }

    const std::vector<char> data(64 * 1024, 'x');
    std::vector<std::uint64_t> counted(c, 0);
    bool stop = false, counting = true;
    for (std::size_t i = 0; i < c; ++i) {
        asio::co_spawn(io, send_loop(*senders[i], data, stop), asio::detached);
        asio::co_spawn(io, receive_loop(receivers[i], counted[i], counting), asio::detached);
    }

    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    asio::steady_timer end(io, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(o.seconds)));
    end.async_wait([&](boost::system::error_code) {
        counting = false;
        stop = true;
        cap.close();   // wakes every sender waiting for permits (error::closed)
        for (auto& s : senders) s->next_layer().close();
        for (auto& r : receivers) r.close();
    });
    io.run();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;

    std::uint64_t total = 0;
    for (auto n : counted) total += n;
    const double equal = static_cast<double>(total) / static_cast<double>(c);
    const auto [lo, hi] = std::minmax_element(counted.begin(), counted.end());
    json_line()
        .add("scenario", "bandwidth")
        .add("connections", static_cast<long long>(c))
        .add("seconds", o.seconds)
        .add("cap_bytes_per_s", o.rate)
        .add("achieved_bytes_per_s", static_cast<double>(total) / o.seconds)
        .add("rate_error", (static_cast<double>(total) / o.seconds - o.rate) / o.rate)
        .add("share_min", equal > 0 ? static_cast<double>(*lo) / equal : 0.0)
        .add("share_max", equal > 0 ? static_cast<double>(*hi) / equal : 0.0)
        .add("cpu_us_per_mb", total > 0 ? cpu * 1e6 / (static_cast<double>(total) / 1e6) : 0.0)
        .add("wall_s", wall)
        .add("burst_bytes", static_cast<unsigned long long>(burst))
        .emit();
    return 0;
}

} // namespace sluice_bench
