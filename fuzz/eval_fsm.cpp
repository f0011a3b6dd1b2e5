// fuzz-covers: lib/redis/eval_fsm.hpp
// EVALSHA with SCRIPT LOAD on NOSCRIPT (eval_fsm) fed any replies and link errors: at
// most one reload, so at most two EVALSHA (no loop whatever the server says); the answer
// is the link's error_code as it was, or the reply with backend_error exactly when it is
// an error reply (backend_unavailable for BUSY and LOADING), the failed load's error reply in place of the NOSCRIPT that follows it
// (and of nothing else).
#include "fuzz.hpp"

#include "redis/eval_fsm.hpp"

#include <sluice/error.hpp>

namespace detail = sluice::redis::detail;
using fuzz::reply;
using boost::system::error_code;

namespace {

error_code any_error(fuzz::input& in)
{
    switch (in.byte() % 4) {
    case 0: return {};
    case 1: return sluice::error::backend_unavailable;
    case 2: return sluice::error::closed;
    default: return sluice::error::timed_out;
    }
}

bool noscript(const reply& r) { return r.is_error() && r.str.starts_with("NOSCRIPT"); }

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    detail::eval_fsm f;
    bool reloaded = false;
    reply load_error;   // the load's error reply, if it failed with one
    for (int evalsha = 1;; ++evalsha) {
        FUZZ_CHECK(evalsha <= 2);
        error_code ec = any_error(in);
        reply r = fuzz::any_reply(in);
        const error_code ec0 = ec;
        const reply r0 = r;
        if (f.on_evalsha(ec, r) == detail::eval_fsm::next::reload) {
            FUZZ_CHECK(!ec0 && noscript(r0) && !reloaded);
            reloaded = true;
            error_code lec = any_error(in);
            reply lr = fuzz::any_reply(in);
            if (!lec && lr.is_error()) load_error = lr;
            f.on_load(lec, lr);
            continue;
        }
        FUZZ_CHECK(!(!ec0 && noscript(r0) && !reloaded));   // the first NOSCRIPT reloads
        if (ec0) {
            FUZZ_CHECK(ec == ec0);
            FUZZ_CHECK(fuzz::same(r, r0));
        } else {
            // The load's error replaces the NOSCRIPT that follows it, nothing else: another
            // client may have loaded the script meanwhile, and a reply that ran it (and
            // maybe consumed permits) is the answer.
            const reply& want = load_error.is_error() && noscript(r0) ? load_error : r0;
            FUZZ_CHECK(fuzz::same(r, want));
            // BUSY and LOADING (the server ran nothing and cannot now) are
            // backend_unavailable, for the failure policy; other error replies backend_error.
            const bool away = want.is_error() && (want.str.starts_with("BUSY ") || want.str.starts_with("LOADING "));
            FUZZ_CHECK((ec == sluice::error::backend_unavailable) == away);
            FUZZ_CHECK((ec == sluice::error::backend_error) == (want.is_error() && !away));
            FUZZ_CHECK(!ec || ec == sluice::error::backend_error || ec == sluice::error::backend_unavailable);
        }
        break;
    }
    return 0;
}
