#include "resp.hpp"

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

void* (*default_create_array)(const redisReadTask*, int) = nullptr;

void* bounded_create_array(const redisReadTask* task, int elements)
{
    return elements > max_elements ? nullptr : default_create_array(task, elements);
}

} // namespace

redisReplyObjectFunctions* bounded_reply_functions()
{
    static redisReplyObjectFunctions fns = [] {
        redisReader* r = redisReaderCreate();
        if (!r) throw std::bad_alloc();
        redisReplyObjectFunctions f = *r->fn;
        redisReaderFree(r);
        default_create_array = f.createArray;
        f.createArray = &bounded_create_array;
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
