// hiredis' asynchronous API on an Asio stream_descriptor (its RESP formatter and reader for
// short exchanges of our own are in resp.hpp): with resp.cpp, the only files that see
// hiredis.
#pragma once

#include "resp.hpp"

#include <sluice/redis/reply.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct redisAsyncContext;
struct redisReply;

namespace sluice::redis::detail {

/// What hiredis answered for one command, valid during events::on_reply only.
class raw_reply {
public:
    explicit raw_reply(const redisReply* r) noexcept : r_(r) {}

    /// hiredis gave no reply: the context is being freed with the command still pending.
    bool none() const noexcept { return r_ == nullptr; }
    /// An error reply (NOAUTH, NOSCRIPT, WRONGTYPE...).
    bool is_error() const noexcept;
    /// An owning copy; only when !none().
    reply to_reply() const;

private:
    const redisReply* r_;
};

/// One hiredis async context at a time, its reads and writes as descriptor waits on the
/// executor. Call everything on that executor.
class hiredis_adapter {
public:
    /// What the link reports to its owner.
    class events {
    public:
        /// The reply to the oldest command sent, in order; inside a hiredis callback, so it
        /// must not call back into the adapter nor run user code.
        virtual void on_reply(raw_reply r) = 0;
        /// The context is going away (freed by close() or by hiredis itself); inside a
        /// hiredis callback, after the null replies of the commands still pending.
        virtual void on_cleanup() = 0;
        /// hiredis freed the context by itself (EOF, refused, socket error); from the
        /// adapter's own handler, so anything may be done here.
        virtual void on_link_lost() = 0;

    protected:
        ~events() = default;
    };

    hiredis_adapter(const boost::asio::any_io_executor& ex, events& ev);
    /// Frees a context still open without reporting its replies.
    ~hiredis_adapter();
    hiredis_adapter(const hiredis_adapter&) = delete;
    hiredis_adapter& operator=(const hiredis_adapter&) = delete;

    /// Starts connecting to a numeric address. `owner` is held weakly by every wait: a
    /// wait of an owner that is gone does nothing. False if no context could be made.
    bool connect(const std::string& address, std::uint16_t port, std::weak_ptr<void> owner);

    /// A context exists (connecting or connected).
    bool is_open() const noexcept { return ac_ != nullptr; }

    /// Queues one command; its reply comes through events::on_reply. False if hiredis
    /// refused it (nothing queued).
    bool send(const std::vector<std::string>& argv);

    /// Frees the context from our side, never inside a hiredis callback: every pending
    /// command is answered with a null reply before this returns.
    void close();

private:
    static void on_reply_cb(redisAsyncContext* ac, void* r, void* privdata);
    static void want(void* p, bool read, bool on);
    static void on_add_read(void* p);
    static void on_del_read(void* p);
    static void on_add_write(void* p);
    static void on_del_write(void* p);
    static void on_cleanup_cb(void* p);

    void arm(bool read);
    void on_ready(bool read);

    // The executor the descriptor of each context is made on.
    boost::asio::any_io_executor ex_;
    // A duplicate of hiredis' descriptor, owned here, and shared with the waits in flight
    // on it: when hiredis closes its own, ours is cancelled and closes once the last wait
    // has completed, never with one in flight. Asio 1.81's io_uring backend reuses the
    // memory of an I/O object closed or released with an operation in flight before the
    // kernel has answered it (later Asio waits), so that the answer lands in another
    // object.
    std::shared_ptr<boost::asio::posix::stream_descriptor> socket_;
    events* events_;   // null while the destructor frees the context
    std::weak_ptr<void> owner_;
    redisAsyncContext* ac_ = nullptr;
    std::uint64_t gen_ = 0;   // waits armed for an older context do nothing
    bool reading_ = false, writing_ = false;
    bool read_armed_ = false, write_armed_ = false;
};

} // namespace sluice::redis::detail
