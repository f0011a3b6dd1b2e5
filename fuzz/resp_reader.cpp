// fuzz-covers: lib/redis/resp.cpp
// RESP bytes as they come off a socket (Sentinel discovery reads them with reply_reader,
// hiredis' reader): any bytes give replies, "more bytes needed" or a protocol error,
// whatever the chunking (all at once and a byte at a time agree); every reply goes
// through each decoder that may see it (verdict, Sentinel address and role, the NOSCRIPT
// decision) without a crash. Round trip: the input cut at NUL bytes, as a command,
// formatted and read back, is the same strings.
#include "fuzz.hpp"

#include "redis/eval_fsm.hpp"
#include "redis/resp.hpp"

#include <sluice/redis/detail/store/sentinel_fsm.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

#include <optional>
#include <vector>

namespace detail = sluice::redis::detail;
using fuzz::reply;

namespace {

// Replies until the reader wants more bytes; false on a protocol error.
bool drain(detail::reply_reader& rd, std::vector<reply>& out)
{
    std::optional<reply> r;
    for (;;) {
        if (!rd.next(r)) return false;
        if (!r) return true;
        out.push_back(std::move(*r));
    }
}

int depth(const reply& r)
{
    int d = 0;
    for (const auto& e : r.elements) d = std::max(d, depth(e));
    return d + (r.type == reply::kind::array ? 1 : 0);
}

void decode(const reply& r)
{
    FUZZ_CHECK(depth(r) <= 9);   // hiredis' reader nests at most 7 levels
    if (auto v = detail::parse_verdict(r)) {
        FUZZ_CHECK(v->wait_us >= 0 && v->remaining >= 0 && v->reset_us >= 0);
        auto d = detail::to_decision(*v);
        FUZZ_CHECK(d.retry_after.count() >= 0);
    }
    if (auto a = detail::sentinel_fsm::parse_master_address(r)) FUZZ_CHECK(!a->host.empty() && a->port > 0);
    (void)detail::sentinel_fsm::is_master_role(r);
    detail::eval_fsm f;
    boost::system::error_code ec;
    reply copy = r;
    if (f.on_evalsha(ec, copy) == detail::eval_fsm::next::done) FUZZ_CHECK(!ec == !r.is_error());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    const char* bytes = reinterpret_cast<const char*>(data);

    detail::reply_reader whole;
    std::vector<reply> a;
    bool a_ok = whole.feed(bytes, size) && drain(whole, a);

    detail::reply_reader piecewise;
    std::vector<reply> b;
    bool b_ok = true;
    for (std::size_t i = 0; i < size && b_ok; ++i) b_ok = piecewise.feed(bytes + i, 1) && drain(piecewise, b);

    FUZZ_CHECK(a_ok == b_ok);
    if (a_ok) {
        FUZZ_CHECK(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) FUZZ_CHECK(fuzz::same(a[i], b[i]));
    }
    for (const auto& r : a) decode(r);

    std::vector<std::string> argv;
    std::string_view rest(bytes, size);
    while (!rest.empty() && argv.size() < 64) {
        auto nul = rest.find('\0');
        argv.emplace_back(rest.substr(0, nul));
        rest = nul == std::string_view::npos ? std::string_view{} : rest.substr(nul + 1);
    }
    if (argv.empty()) return 0;
    const std::string wire = detail::format_commands({argv});
    detail::reply_reader back;
    std::vector<reply> got;
    FUZZ_CHECK(back.feed(wire.data(), wire.size()) && drain(back, got));
    FUZZ_CHECK(got.size() == 1 && got[0].type == reply::kind::array && got[0].elements.size() == argv.size());
    for (std::size_t i = 0; i < argv.size(); ++i) {
        FUZZ_CHECK(got[0].elements[i].type == reply::kind::string);
        FUZZ_CHECK(got[0].elements[i].str == argv[i]);
    }
    return 0;
}
