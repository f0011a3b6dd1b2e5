// Lifetime rules, because this is where such adapters crash:
// - hiredis may free its context inside redisAsyncHandleRead/Write (EOF, refused
//   connection, socket error). Its `cleanup` event tells us: we release the descriptor
//   from Asio (hiredis closes the fd itself) and forget the context; after each
//   HandleRead/Write we look whether the context is still there.
// - Our hiredis callbacks never call back into hiredis and never run user code: the owner's
//   on_reply moves the reply out and posts. Everything that frees the context (timeouts,
//   close, a failed handshake) therefore runs from the owner's handlers, never inside a
//   hiredis callback.
// - Every wait holds a weak_ptr to the owner and the generation of the context it was
//   armed for; a wait of an older context, or of an owner that is gone, does nothing.
//   Weak, because io_uring keeps the operations of a released descriptor until its
//   service is destroyed: a strong reference would destroy the owner (and its timers)
//   after their services.
#include "hiredis_adapter.hpp"

#include <boost/asio/error.hpp>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <cassert>
#include <csignal>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

namespace sluice::redis::detail {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// hiredis writes with write(2), not send(MSG_NOSIGNAL): a peer that went away would kill
// the process with SIGPIPE. Ignored once, and only if nobody installed a handler.
void ignore_sigpipe()
{
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction old {};
        if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) {
            struct sigaction ign {};
            ign.sa_handler = SIG_IGN;
            sigemptyset(&ign.sa_mask);
            ::sigaction(SIGPIPE, &ign, nullptr);
        }
    });
}

hiredis_adapter& self_of(void* p) { return *static_cast<hiredis_adapter*>(p); }

} // namespace

bool raw_reply::is_error() const noexcept { return r_ && r_->type == REDIS_REPLY_ERROR; }

reply raw_reply::to_reply() const { return convert_reply(r_); }

hiredis_adapter::hiredis_adapter(const asio::any_io_executor& ex, events& ev)
    : ex_(ex), events_(&ev)
{
}

hiredis_adapter::~hiredis_adapter()
{
    if (!ac_) return;
    events_ = nullptr;
    redisAsyncFree(ac_);
}

bool hiredis_adapter::connect(const std::string& address, std::uint16_t port,
                              std::weak_ptr<void> owner)
{
    assert(!ac_);
    ignore_sigpipe();
    redisAsyncContext* ac = redisAsyncConnect(address.c_str(), port);
    if (!ac) return false;
    if (ac->err) {
        redisAsyncFree(ac);
        return false;
    }
    // hiredis opens the socket without close-on-exec: a child the program starts would
    // keep a copy, so that a link we close or reset stayed open on the server's side.
    ::fcntl(ac->c.fd, F_SETFD, ::fcntl(ac->c.fd, F_GETFD) | FD_CLOEXEC);
    const int fd = ::fcntl(ac->c.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
        redisAsyncFree(ac);
        return false;
    }
    auto socket = std::make_shared<asio::posix::stream_descriptor>(ex_);
    error_code ec;
    socket->assign(fd, ec);
    if (ec) {
        ::close(fd);
        redisAsyncFree(ac);
        return false;
    }
    socket_ = std::move(socket);
    ac->c.reader->fn = bounded_reply_functions();
    ac->c.reader->privdata = ac;   // for the reply functions: the callbacks pending (resp.cpp)
    ac_ = ac;
    owner_ = std::move(owner);
    ++gen_;
    ac->data = this;
    ac->ev.data = this;
    ac->ev.addRead = &on_add_read;
    ac->ev.delRead = &on_del_read;
    ac->ev.addWrite = &on_add_write;
    ac->ev.delWrite = &on_del_write;
    ac->ev.cleanup = &on_cleanup_cb;
    return true;
}

bool hiredis_adapter::send(const std::vector<std::string>& argv)
{
    if (!ac_ || argv.empty()) return false;
    argv_view v(argv);
    return redisAsyncCommandArgv(ac_, &on_reply_cb, nullptr, v.argc(), v.argv(), v.lens())
           == REDIS_OK;
}

void hiredis_adapter::close()
{
    if (!ac_) return;
    redisAsyncFree(ac_);   // calls on_cleanup_cb, which forgets ac_
    assert(!ac_);
}

// hiredis calls back in request order, also with a null reply for every pending command
// when it frees the context.
void hiredis_adapter::on_reply_cb(redisAsyncContext* ac, void* r, void*)
{
    auto& s = self_of(ac->data);
    if (s.events_) s.events_->on_reply(raw_reply(static_cast<const redisReply*>(r)));
}

// hiredis wants (on) or no longer wants to read (or write).
void hiredis_adapter::want(void* p, bool read, bool on)
{
    auto& s = self_of(p);
    (read ? s.reading_ : s.writing_) = on;
    if (on) s.arm(read);
}

void hiredis_adapter::on_add_read(void* p) { want(p, true, true); }
void hiredis_adapter::on_del_read(void* p) { want(p, true, false); }
void hiredis_adapter::on_add_write(void* p) { want(p, false, true); }
void hiredis_adapter::on_del_write(void* p) { want(p, false, false); }

// Last event before hiredis closes its fd: our waits are cancelled (their handlers see a
// new generation and do nothing) and our duplicate closes when the last of them completes.
void hiredis_adapter::on_cleanup_cb(void* p)
{
    auto& s = self_of(p);
    s.reading_ = s.writing_ = false;
    s.read_armed_ = s.write_armed_ = false;
    if (s.socket_) {
        error_code ignored;
        s.socket_->cancel(ignored);
        s.socket_.reset();
    }
    s.ac_ = nullptr;
    ++s.gen_;
    if (s.events_) s.events_->on_cleanup();
}

void hiredis_adapter::arm(bool read)
{
    bool& armed = read ? read_armed_ : write_armed_;
    if (armed || !ac_) return;
    armed = true;
    socket_->async_wait(read ? asio::posix::stream_descriptor::wait_read
                             : asio::posix::stream_descriptor::wait_write,
                        [owner = owner_, socket = socket_, this, gen = gen_, read](error_code ec) {
                            // The owner holds this adapter: alive as long as `keep` is.
                            auto keep = owner.lock();
                            if (!keep || gen != gen_) return;
                            (read ? read_armed_ : write_armed_) = false;
                            if (ec == asio::error::operation_aborted) return;
                            on_ready(read);
                        });
}

void hiredis_adapter::on_ready(bool read)
{
    if (!ac_ || !(read ? reading_ : writing_)) return;
    if (read)
        redisAsyncHandleRead(ac_);
    else
        redisAsyncHandleWrite(ac_);
    if (!ac_) {
        if (events_) events_->on_link_lost();
        return;
    }
    if (reading_) arm(true);
    if (writing_) arm(false);
}

} // namespace sluice::redis::detail
