// Error codes of sluice, in their own boost::system category named "sluice".
#pragma once

#include <sluice/detail/base/config.hpp>
#include <sluice/detail/base/error_category.hpp>

#include <boost/system/error_code.hpp>

namespace sluice {

/// Errors reported by sluice, named for what was wrong. Completion handlers receive them
/// as boost::system::error_code; constructors and setters throw them as
/// boost::system::system_error. docs/guide.md ("Errors") has them in one table, with
/// what returns each.
enum class error {
    /// A rate is zero, negative, NaN, infinite, or faster than one permit per nanosecond.
    invalid_rate = 1,

    /// A limit is zero or larger than the limiter can hold: a burst, a window's limit, a
    /// concurrency limit, a number of slots.
    invalid_limit,

    /// A duration is out of range: a window, a slack or a slot length that is not
    /// positive (a slack may be 0), or a span that overflows 292 years.
    invalid_duration,

    /// A request asked for zero permits.
    invalid_count,

    /// A request asked for more permits than the limiter can ever admit at once (more
    /// than its burst or limit): it would never be admitted.
    exceeds_limit,

    /// The request could not be admitted within its max_wait: predicted at once (nothing
    /// was consumed), or its deadline passed while it waited.
    timed_out,

    /// The limiter's waiting queue is full; nothing was consumed.
    queue_full,

    /// The limiter was closed; pending and new requests complete with this error.
    closed,

    /// A text could not be parsed (a rate such as "100/s").
    parse_error,

    /// An option is out of its range (a field of keyed_options, shared_options, the
    /// adaptive options, shm::segment_options' size or mode), or a setting that cannot change while in use was changed (the
    /// window of a tracked key).
    invalid_option,

    /// A shared backend (Redis) could not be reached, or did not answer in time.
    backend_unavailable,

    /// The shared backend answered with an error reply (a wrong-type value at the key, a
    /// script error, an out-of-memory refusal).
    backend_error,

    /// A reply from the shared backend did not have the expected shape (garbage, a wrong
    /// type, a value out of range).
    protocol_error,

    /// A shared-memory segment's name is not of the form "/name" (one leading slash, no
    /// other, no NUL, 1 to 255 characters after it, not "/." or "/..").
    shm_invalid_name,

    /// A shared-memory segment exists under that name with another configuration (rate,
    /// burst, slack, size): fixed when it was created.
    shm_config_mismatch,

    /// A file under that name is not a segment of this layout: another version or build
    /// of sluice, another kind of limiter, or not a sluice segment at all. Never misread.
    shm_incompatible,

    /// The segment exists and this process may not open it for reading and writing (its
    /// permissions: 0600 by default, so only its owner).
    shm_permission,

    /// The operating system refused to create or map the segment (no /dev/shm, out of
    /// memory or file descriptors); the exception's message says which call failed.
    shm_unavailable,

    /// A shared-memory keyed table (shm::keyed_gcra) has no room for a new key: its shard
    /// holds its share of max_keys and none of them is idle. Nothing was admitted; the
    /// decision's retry_after says when the first of them can be idle at the earliest.
    shm_table_full,

    /// A key longer than a shared-memory keyed table stores (shm::keyed_gcra::max_key_size
    /// bytes). Nothing was admitted or stored.
    shm_key_too_long,

    /// A string key on a shared-memory keyed table of integer keys
    /// (shm::table_options::integer_keys): the table stores no key bytes. Nothing was
    /// admitted or stored.
    shm_string_key,

    /// A shared-memory segment under that name belongs to another user, or its mode lets
    /// in more than the segment_options asked: another user made it (first, under a name
    /// this process meant to use), and could read or change its state. Refused before
    /// anything in it is read; it is neither used nor removed. The exception's message
    /// names its owner and mode.
    shm_foreign,

    /// The file of a shared-memory segment was truncated under this process's mapping (by
    /// another process of the same user, or root): its state is gone. The limiter answers
    /// this error to every decision from then on, instead of a decision on the zeros that
    /// replaced the mapping; attach again (a new limiter) to go on.
    shm_truncated,

    /// A lock in a shared-memory segment (a keyed table's shard or count) was not free
    /// within segment_options::lock_timeout: its holder is stopped, or stuck. Nothing was
    /// admitted; the same request may be retried.
    shm_lock_timeout,

    /// A shared-memory segment holds what this process never writes there (a lock of
    /// another kind, a key size out of range, a probe that never ends): written by another
    /// process. Nothing was admitted on it.
    shm_corrupt,

    /// A settle with a ticket that admitted nothing (a refusal, or default-built).
    not_admitted,

    /// A settle with a ticket already settled (or moved from): each admission is settled
    /// at most once. Nothing changed.
    already_settled,

    /// A settle with a ticket another limiter (or another key's state) admitted. Nothing
    /// changed.
    foreign_admission,

    /// A settle with a ticket admitted before the limiter's configuration changed (a new
    /// rate, burst or limit), or before its key was evicted: what it admitted can no longer
    /// be given back or charged exactly. Nothing changed.
    stale_admission,
};

/// The category of sluice::error; its name() is "sluice".
const boost::system::error_category& error_category() noexcept;

/// error_category(), found by argument-dependent lookup from a sluice::error.
inline const boost::system::error_category& category_of(error) noexcept { return error_category(); }

/// `make_error_code(e)`: `e` as an error_code of error_category(); found by
/// argument-dependent lookup, so that `ec == error::closed` compiles.
using sluice::detail::make_error_code;

} // namespace sluice
