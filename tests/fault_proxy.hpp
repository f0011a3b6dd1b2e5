// A TCP proxy that injects network faults between a client and a server on 127.0.0.1: the
// network the Redis fault tests (suite `faults`) put between sluice and redis-server,
// since the test machines have no tc netem.
//
//   sluice_test::fault_proxy proxy(server.port());   // listening on 127.0.0.1:ephemeral
//   auto cfg = proxy.config();                        // a connection_config through it
//   proxy.set_latency(20ms, 10ms);                    // each chunk 20-30 ms late, in order
//   proxy.set_black_hole(true);                       // half-open: nothing answers, nothing closes
//   proxy.reset_all();                                // RST on every open connection
//   proxy.cut_reply(10);                              // the next reply: 10 bytes, then FIN
//   proxy.edit_reply([](std::string& b) { ... });     // the next reply's bytes changed
//   proxy.heal();                                     // every fault off
//   proxy.stats().connections ...                     // what went through it
//
// It runs its own io_context on its own thread; every control may be changed while
// connections are open and takes effect before the call returns (for data already read
// and queued: latency and bandwidth apply to what is read after the change).
#pragma once

#include <sluice/redis/connection_config.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace sluice_test {

class fault_proxy {
public:
    /// What went through the proxy since it started.
    struct counts {
        std::uint64_t connections = 0;   ///< accepted (in every mode but refuse)
        std::uint64_t open = 0;          ///< sessions open now
        std::uint64_t bytes_up = 0;      ///< client -> server, delivered
        std::uint64_t bytes_down = 0;    ///< server -> client, delivered
        std::uint64_t dropped = 0;       ///< bytes read and discarded (drop, black hole)
        std::uint64_t resets = 0;        ///< connections closed with an RST
        std::uint64_t black_holed = 0;   ///< connections that went into the black hole
        std::uint64_t tampered = 0;      ///< chunks cut, edited, corrupted or duplicated
    };

    /// What the next chunk read in one direction is made into (see cut_reply, edit_reply...).
    using edit = std::function<void(std::string&)>;

    /// Listens on 127.0.0.1 (a port of the kernel's choosing) and forwards every
    /// connection to 127.0.0.1:upstream_port.
    explicit fault_proxy(std::uint16_t upstream_port);
    ~fault_proxy();
    fault_proxy(const fault_proxy&) = delete;
    fault_proxy& operator=(const fault_proxy&) = delete;

    std::uint16_t port() const noexcept;
    /// A connection_config to the proxy (host, port; the rest default).
    sluice::redis::connection_config config() const;

    /// Every chunk read is delivered `fixed` plus a uniform [0, jitter] later, never before
    /// the chunk read before it in the same direction (a stream stays in order).
    void set_latency(std::chrono::milliseconds fixed, std::chrono::milliseconds jitter = {});
    /// At most this many bytes a second each way (0: unlimited).
    void set_bandwidth(std::uint64_t bytes_per_second);
    /// Drop: connections stay open, every byte read either way is discarded. A connection
    /// that lost bytes keeps losing them after drop is off (a TCP stream is delivered
    /// whole, however late, or not at all: bytes after a gap would be misread, by any
    /// pipelined RESP client); new connections forward again.
    void set_drop(bool on);
    /// Black hole: every open connection and every new one (accepted) stops forwarding for
    /// good; nothing is answered, nothing is closed: a half-open peer. Off: new connections
    /// forward again, those already in the hole stay there until the client closes them.
    void set_black_hole(bool on);
    /// Reset: every open connection and every new one is closed with an RST.
    void set_reset(bool on);
    /// Refuse: the listener closes (connects are refused); off: it listens again on the
    /// same port.
    void set_refuse(bool on);
    /// New connections go to 127.0.0.1:port from now on (a failover: reset_all() moves the
    /// open ones).
    void set_upstream(std::uint16_t port);
    /// One RST on every open connection now.
    void reset_all();
    /// Partial loss: the next chunk the server sends (after `skip` more) is delivered up to
    /// `keep` bytes (all but its last byte when `keep` is at least its size), then the
    /// connection is closed (FIN) both ways: a reply cut mid-way.
    void cut_reply(std::size_t keep, std::size_t skip = 0);
    /// Partial loss the other way: the next chunk the client sends (after `skip` more)
    /// reaches the server up to `keep` bytes, then the connection closes: a request
    /// half-delivered.
    void cut_request(std::size_t keep, std::size_t skip = 0);
    /// Corruption: the next chunk the server sends (after `skip` more) is passed to `f`,
    /// which may change, add or remove bytes, and delivered as it leaves `f`.
    void edit_reply(edit f, std::size_t skip = 0);
    /// Duplication: the next chunk the server sends (after `skip` more) is delivered twice.
    void duplicate_reply(std::size_t skip = 0);
    /// Random corruption: each chunk the server sends has, with probability `p`, one byte
    /// at a random place XORed with a random non-zero value (seeded: the same run flips
    /// the same bytes). 0: off.
    void set_corruption(double p, std::uint64_t seed = 1);

    /// Every fault off (latency, bandwidth, drop, black hole, reset, refuse, the armed
    /// cuts, edits and duplications, corruption).
    void heal();

    counts stats() const;

private:
    struct impl;
    std::shared_ptr<impl> impl_;
};

} // namespace sluice_test
