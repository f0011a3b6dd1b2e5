// The commands of one pipeline waiting for their replies, in the order they were sent:
// sans-io (no socket, no timer; the caller says what came back), tested on its own.
#pragma once

#include <cassert>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <utility>

namespace sluice::redis::detail {

/// Entries of type T, oldest first, each with the deadline of its reply. The link's first
/// command is its handshake: if that is refused or never answered, no other reply of the
/// link counts, even those that came in the same read (a NOAUTH server answers them all).
template <class T>
class reply_queue {
public:
    using time_point = std::chrono::steady_clock::time_point;

    /// What the reply means for the entry it answers.
    enum class outcome {
        reply,        ///< the server's reply is the answer
        link_error,   ///< no reply: the link went with the command pending
        refused,      ///< a reply, but on a link whose handshake failed
    };

    struct answer {
        T entry;
        outcome how;
    };

    /// A command sent on the current link.
    void push(T entry, time_point deadline)
    {
        entries_.push_back({std::move(entry), deadline, next_seq_++});
    }

    /// The entry pushed last is the handshake of a new link.
    void mark_handshake()
    {
        assert(!entries_.empty());
        handshake_ = entries_.back().seq;
    }

    /// A new link: whether its handshake fails is not known yet.
    void new_link() noexcept
    {
        handshake_.reset();
        refused_ = false;
    }

    /// The link is gone: its handshake's reply will not come.
    void link_gone() noexcept { handshake_.reset(); }

    /// The reply to the oldest entry: `replied` false when there was none (the link is being
    /// freed), `error_reply` when the server refused the command (for the handshake, also a
    /// reply that rejects the link: a ROLE that is not master). Known here, not when the
    /// entry's handler runs: replies in the same read after a failed handshake are refused.
    answer pop(bool replied, bool error_reply)
    {
        assert(!entries_.empty());
        auto e = std::move(entries_.front());
        entries_.pop_front();
        if (handshake_ && e.seq == *handshake_) {
            handshake_.reset();
            refused_ = !replied || error_reply;
        }
        outcome how = !replied ? outcome::link_error : refused_ ? outcome::refused : outcome::reply;
        return {std::move(e.value), how};
    }

    bool empty() const noexcept { return entries_.empty(); }
    /// The oldest entry is the current link's handshake, its reply not in yet.
    bool front_is_handshake() const noexcept
    {
        return !entries_.empty() && handshake_ && entries_.front().seq == *handshake_;
    }
    std::size_t size() const noexcept { return entries_.size(); }

    /// The oldest entry, whose reply is due first: all commands have the same timeout, so
    /// its deadline is also the first to pass.
    T& front() noexcept { return entries_.front().value; }
    time_point front_deadline() const noexcept { return entries_.front().deadline; }

    /// Drops every entry without an answer (the execution context is going away).
    void clear() noexcept { entries_.clear(); }

private:
    struct item {
        T value;
        time_point deadline;
        std::uint64_t seq;
    };
    std::deque<item> entries_;
    std::uint64_t next_seq_ = 0;
    std::optional<std::uint64_t> handshake_;
    bool refused_ = false;
};

} // namespace sluice::redis::detail
