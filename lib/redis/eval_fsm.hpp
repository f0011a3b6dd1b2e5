// EVALSHA with SCRIPT LOAD on NOSCRIPT, as a decision on each reply: sans-io, tested on
// its own; script_reload.cpp sends what it decides.
#pragma once

#include <sluice/error.hpp>
#include <sluice/redis/reply.hpp>

#include <boost/system/error_code.hpp>

#include <utility>

namespace sluice::redis::detail {

/// One async_eval. The server may not have the script (new, restarted, SCRIPT FLUSH): the
/// first NOSCRIPT loads it and runs EVALSHA again, pipelined behind the load; a second
/// NOSCRIPT is the answer (the load failed, and its error says why).
class eval_fsm {
public:
    /// What to do after a reply to EVALSHA.
    enum class next {
        reload,   ///< send SCRIPT LOAD, then EVALSHA again
        done,     ///< complete with (ec, r), as adjusted
    };

    /// The reply to EVALSHA (or its error_code). On `done`, `ec` and `r` are the answer: an
    /// error reply becomes error::backend_error, with the failed load's reply if there was
    /// one; BUSY and LOADING become error::backend_unavailable.
    next on_evalsha(boost::system::error_code& ec, reply& r)
    {
        const bool noscript = !ec && r.is_error() && r.str.starts_with("NOSCRIPT");
        if (noscript && !reloaded_) {
            reloaded_ = true;
            return next::reload;
        }
        // Only in place of the NOSCRIPT: another client may have loaded the script
        // meanwhile, and a reply that ran it (and maybe consumed permits) is the answer.
        if (noscript && load_error_.is_error()) r = std::move(load_error_);
        // BUSY (another script runs past busy-reply-threshold) and LOADING (a restart
        // loading its data): the server ran nothing and cannot answer now, as if it were
        // unreachable, so the limiter's failure policy decides instead of an error.
        if (!ec && r.is_error() && (r.str.starts_with("BUSY ") || r.str.starts_with("LOADING ")))
            ec = error::backend_unavailable;
        if (!ec && r.is_error()) ec = error::backend_error;
        return next::done;
    }

    /// The reply to SCRIPT LOAD: an error (the script does not compile) is kept, to answer
    /// with instead of the NOSCRIPT that follows it (and of nothing else).
    void on_load(const boost::system::error_code& ec, reply r)
    {
        if (!ec && r.is_error()) load_error_ = std::move(r);
    }

private:
    bool reloaded_ = false;
    reply load_error_;
};

} // namespace sluice::redis::detail
