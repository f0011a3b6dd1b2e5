// Shadow mode: a limit tried in the dark, every decision taken and counted, nobody refused
// or made to wait (nginx's limit_req_dry_run, Envoy ratelimit's shadow mode).
#pragma once

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string_view>

namespace sluice {

/// What a limiter in shadow mode would have done to a request it let through.
enum class shadow_kind {
    /// A try (try_acquire, async_try_acquire) the limit refused.
    try_refused,
    /// An acquire the limit would have refused at once: error::timed_out (its wait would
    /// have exceeded max_wait) or error::exceeds_limit.
    refused,
    /// An acquire that would have waited.
    waited,
};

/// One request let through in the dark, as shadow_options::report receives it.
struct shadow_event {
    /// What would have happened.
    shadow_kind what = shadow_kind::try_refused;
    /// Permits asked for.
    std::uint64_t n = 0;
    /// The key, as text, on a keyed limiter (a string key as given, an integer or an
    /// address written out); empty elsewhere. Valid during the call only.
    std::string_view key;
    /// try_refused: the decision's retry_after; waited: how long the request would have
    /// waited (0 on a concurrency limit, where no wait is predicted); refused: the
    /// predicted wait (nanoseconds::max() when the request can never be admitted).
    std::chrono::nanoseconds wait{0};
    /// refused: the error the request would have completed with (error::timed_out,
    /// error::exceeds_limit); try_refused: error::exceeds_limit when the limit can never
    /// admit n at once; empty otherwise.
    boost::system::error_code error;
};

/// Shadow mode, one field (`shadow`) of every limiter's options: limiter_options (local
/// rate limiters, all_of, concurrency limits), keyed_options::limiter,
/// shm::keyed_wait_options::limiter, redis::shared_options.
///
/// When `enabled`, every request is decided by the limit as usual, against the limit's
/// state, but nobody is refused or made to wait for it:
/// - a try the limit admits is admitted and charged as usual; one it refuses answers
///   admitted (a decision with admitted set, retry_after 0; a concurrency limit's permit
///   that holds no slot) and charges nothing;
/// - an acquire is decided as a try would be, at once: admitted and charged when the limit
///   admits it at once; otherwise it completes at once, admitted, charging nothing, and
///   counts as one the limit would have made wait (predicted wait <= max_wait; a
///   concurrency limit: max_wait > 0) or refused (error::timed_out beyond max_wait;
///   error::exceeds_limit).
/// So the state is charged exactly for what a live limiter would have admitted at once, and
/// each of those requests gets the answer a live limiter in that state would give (with
/// nobody queued: in shadow mode nobody ever is).
///
/// Each one let through in the dark is counted in limiter_stats::shadow, and passed to
/// `report` when set. Errors that are no refusal by the limit stay errors: error::
/// invalid_count (n == 0), error::closed after close(), a shared backend's failures (and
/// what its failure policy decides).
///
/// Bad combinations throw system_error(error::invalid_option) at construction: shadow with
/// limiter_options::strict (strict waits, and nobody waits), and with
/// redis::shared_options::lease_size (a lease charges slots ahead of any request).
struct shadow_options {
    /// Shadow mode on. Off by default.
    bool enabled = false;

    /// Called for each request let through in the dark, on the thread that decided it:
    /// a try's caller; an acquire's completion, just before its handler, on the handler's
    /// executor. No lock of the limiter is held. It must be thread-safe when the limiter
    /// is used from several threads, and must not throw. Empty: count only.
    std::function<void(const shadow_event&)> report;
};

} // namespace sluice
