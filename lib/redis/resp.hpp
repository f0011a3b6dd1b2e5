// RESP outside a hiredis context, for short exchanges on a socket of our own (Sentinel
// discovery): commands formatted and replies read by hiredis' own formatter and reader,
// which reads a reply from any bytes a server sends (the fuzz target resp_reader). Also
// what the async context (hiredis_adapter) shares with them: the reply functions that
// bound an aggregate, and the conversion of a hiredis reply.
#pragma once

#include <sluice/redis/reply.hpp>

#include <boost/container/small_vector.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

struct redisReader;
struct redisReply;
struct redisReplyObjectFunctions;

namespace sluice::redis::detail {

/// `commands` in RESP, one after the other (to be sent pipelined). Throws std::bad_alloc.
std::string format_commands(const std::vector<std::vector<std::string>>& commands);

/// Replies parsed from RESP bytes as they arrive, for an exchange outside a hiredis context
/// (Sentinel discovery, on a socket of its own).
class reply_reader {
public:
    /// Throws std::bad_alloc.
    reply_reader();
    ~reply_reader();
    reply_reader(const reply_reader&) = delete;
    reply_reader& operator=(const reply_reader&) = delete;

    /// Appends bytes read; false on a protocol error (the reader is then unusable).
    bool feed(const char* data, std::size_t n);

    /// The next complete reply into `out`, or `out` empty when more bytes are needed;
    /// false on a protocol error.
    bool next(std::optional<reply>& out);

private:
    redisReader* reader_;
};

/// hiredis' default reply functions with an aggregate of more than 2^16 elements, or a reply
/// that starts while a context (the reader's privdata) has no callback pending, refused
/// (a protocol error): for every reader sluice creates. Throws std::bad_alloc.
redisReplyObjectFunctions* bounded_reply_functions();

/// An owning copy of a hiredis reply.
reply convert_reply(const redisReply* r);

// An argv as hiredis takes it, pointers and lengths, on the stack for the usual handful of
// arguments (an EVALSHA with its keys and arguments): no allocation per command.
class argv_view {
public:
    explicit argv_view(const std::vector<std::string>& argv)
    {
        ptrs_.reserve(argv.size());
        lens_.reserve(argv.size());
        for (const auto& a : argv) {
            ptrs_.push_back(a.data());
            lens_.push_back(a.size());
        }
    }

    int argc() const noexcept { return static_cast<int>(ptrs_.size()); }
    const char** argv() noexcept { return ptrs_.data(); }
    const std::size_t* lens() const noexcept { return lens_.data(); }

private:
    boost::container::small_vector<const char*, 16> ptrs_;
    boost::container::small_vector<std::size_t, 16> lens_;
};

} // namespace sluice::redis::detail
