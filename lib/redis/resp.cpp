#include "resp.hpp"

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include <memory>
#include <new>

namespace sluice::redis::detail {

namespace {

// hiredis 0.14's reader allocates an aggregate's declared size before any element arrives:
// "*666666630\r\n" from a broken or hostile server asks for 5 GB. hiredis 1.0 bounds it
// (maxelements); 0.14 has no such field, so every reader sluice creates gets the default
// reply functions with createArray refusing more than max_elements (hiredis then answers
// REDIS_ERR_OOM: a protocol error, the link dropped). sluice's largest reply (CLUSTER
// SLOTS, a Sentinel list) has a few thousand elements at most.
constexpr int max_elements = 1 << 16;

// And a reply nobody asked for: hiredis asserts that a context with no command pending is
// subscribed (abort() in Debian's build) when a reply comes that has no callback: a server
// or a middlebox out of step (a reply sent twice, an array split in two) would end the
// process. A context's reader has the context as its privdata (hiredis_adapter sets it): a
// reply that starts while no callback waits is refused like an oversized array (a protocol
// error, the link dropped), before hiredis looks for its callback. Readers outside a
// context (privdata null: reply_reader) take every reply.
redisReplyObjectFunctions default_functions{};

bool unsolicited(const redisReadTask* task) noexcept
{
    if (task->parent) return false;   // an element of a reply
    const auto* ac = static_cast<const redisAsyncContext*>(task->privdata);
    return ac && !ac->replies.head;
}

void* checked_create_string(const redisReadTask* task, char* str, size_t len)
{
    return unsolicited(task) ? nullptr : default_functions.createString(task, str, len);
}

void* checked_create_array(const redisReadTask* task, int elements)
{
    return elements > max_elements || unsolicited(task) ? nullptr : default_functions.createArray(task, elements);
}

void* checked_create_integer(const redisReadTask* task, long long value)
{
    return unsolicited(task) ? nullptr : default_functions.createInteger(task, value);
}

void* checked_create_nil(const redisReadTask* task)
{
    return unsolicited(task) ? nullptr : default_functions.createNil(task);
}

} // namespace

redisReplyObjectFunctions* bounded_reply_functions()
{
    static redisReplyObjectFunctions fns = [] {
        redisReader* r = redisReaderCreate();
        if (!r) throw std::bad_alloc();
        default_functions = *r->fn;
        redisReaderFree(r);
        redisReplyObjectFunctions f = default_functions;
        f.createString = &checked_create_string;
        f.createArray = &checked_create_array;
        f.createInteger = &checked_create_integer;
        f.createNil = &checked_create_nil;
        return f;
    }();
    return &fns;
}

reply convert_reply(const redisReply* r)
{
    reply out;
    switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        out.type = r->type == REDIS_REPLY_STRING   ? reply::kind::string
                   : r->type == REDIS_REPLY_STATUS ? reply::kind::status
                                                   : reply::kind::error;
        out.str.assign(r->str, r->len);
        break;
    case REDIS_REPLY_INTEGER:
        out.type = reply::kind::integer;
        out.integer = r->integer;
        break;
    case REDIS_REPLY_ARRAY:
        out.type = reply::kind::array;
        out.elements.reserve(r->elements);
        for (std::size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert_reply(r->element[i]));
        break;
    default:
        out.type = reply::kind::nil;
        break;
    }
    return out;
}

std::string format_commands(const std::vector<std::vector<std::string>>& commands)
{
    std::string wire;
    for (const auto& argv : commands) {
        argv_view v(argv);
        char* cmd = nullptr;
        const int n = redisFormatCommandArgv(&cmd, v.argc(), v.argv(), v.lens());
        if (n < 0) throw std::bad_alloc();
        wire.append(cmd, static_cast<std::size_t>(n));
        redisFreeCommand(cmd);
    }
    return wire;
}

reply_reader::reply_reader() : reader_(redisReaderCreateWithFunctions(bounded_reply_functions()))
{
    if (!reader_) throw std::bad_alloc();
}

reply_reader::~reply_reader() { redisReaderFree(reader_); }

bool reply_reader::feed(const char* data, std::size_t n)
{
    return redisReaderFeed(reader_, data, n) == REDIS_OK;
}

bool reply_reader::next(std::optional<reply>& out)
{
    out.reset();
    void* raw = nullptr;
    if (redisReaderGetReply(reader_, &raw) != REDIS_OK) return false;
    if (!raw) return true;
    const std::unique_ptr<redisReply, void (*)(void*)> r(static_cast<redisReply*>(raw),
                                                         &freeReplyObject);
    out = convert_reply(r.get());
    return true;
}

} // namespace sluice::redis::detail
