// Lingering close (nginx's lingering_close): after an answer that ends the connection while
// the client may still be sending (a body the server refused and did not read, a request
// still arriving, requests pipelined behind the last), closing at once would leave bytes
// unread, and the kernel answers unread bytes with a reset: the client's send fails before
// it reads the answer, and a reset can overtake the answer's last segments or have them
// dropped, so that the client never sees why it was refused. So the server shuts down its
// sending side after the answer (the client reads the answer, then the end of the
// stream), reads and drops what still comes, and closes when the client closes or a bound
// is reached: linger_time after the answer, or linger_bytes drained. Sans-io: it takes
// `now` and what was drained, and says how long to wait for more.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace server_check {

class lingering_close {
public:
    using clock = std::chrono::steady_clock;

    /// The bounds: a client gets this long after the answer, and this many bytes, to stop
    /// sending and read it (nginx: lingering_time 30 s, no bound on bytes). Four times the
    /// largest body a request may have; whatever it sends past them is met by a reset.
    static constexpr std::chrono::milliseconds linger_time{5000};
    static constexpr std::uint64_t linger_bytes = 4 * 1024 * 1024;

    /// Whether a connection the server closes after its answer needs to linger: the
    /// request was not read to its end (`request_read`: its header and body), or more
    /// bytes came behind it (`buffered` in the read buffer, `pending` in the socket).
    static constexpr bool needed(bool request_read, std::size_t buffered, std::size_t pending) noexcept
    {
        return !request_read || buffered > 0 || pending > 0;
    }

    /// Lingering from `now`, the answer sent and the sending side shut down.
    explicit lingering_close(clock::time_point now) noexcept : end_(now + linger_time) {}

    /// How long to wait, from `now`, for the next bytes; zero or less: stop and close.
    clock::duration wait(clock::time_point now) const noexcept
    {
        if (drained_ >= linger_bytes) return clock::duration::zero();
        return end_ - now;
    }

    /// The most to drain in one go: what is left of linger_bytes.
    std::uint64_t room() const noexcept { return linger_bytes - drained_; }

    /// Counts `n` more bytes drained (at most room()).
    void drained(std::uint64_t n) noexcept { drained_ += n < room() ? n : room(); }

    std::uint64_t total() const noexcept { return drained_; }

private:
    clock::time_point end_;
    std::uint64_t drained_ = 0;
};

} // namespace server_check
