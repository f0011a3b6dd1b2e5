// The RateLimit-Policy and RateLimit response fields of
// draft-ietf-httpapi-ratelimit-headers-11 (May 2026; the wire format is unchanged since
// -08): RFC 8941 Lists of String items with parameters.
//
//     RateLimit-Policy: "default";q=100;w=1;sluice-burst=10
//     RateLimit: "default";r=7;t=1
//
// Parsing is exact and strict: any deviation from the draft fails the whole field with an
// http::error (the draft says malformed fields MUST be ignored, so a client logs the error
// and carries on without the field). Parameters the draft does not define are kept, in
// order, in `extensions` (the draft allows them as comments; sluice's example server sends
// its token bucket's burst as `sluice-burst`). The draft -07 dictionary form
// (`limit=10, remaining=5, reset=3`) is not accepted.
#pragma once

#include <sluice/http/error.hpp>
#include <sluice/http/structured_field.hpp>

#include <boost/system/result.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http {

/// One quota policy of `RateLimit-Policy`: `"name";q=<quota>;w=<seconds>`.
struct quota_policy {
    /// The policy's name (the String item the parameters belong to).
    std::string name;
    std::uint64_t quota = 0;                    ///< q (required): quota units per window
    std::optional<std::uint64_t> window;        ///< w, in seconds, > 0
    std::optional<std::string> quota_unit;      ///< qu ("requests" when absent)
    std::optional<std::string> partition_key;   ///< pk, the decoded bytes
    sf::parameters extensions;                  ///< every other parameter, in order

    /// Equal when every member is, extensions in the same order.
    friend bool operator==(const quota_policy&, const quota_policy&) = default;
};

/// One service limit of `RateLimit`: `"name";r=<available>;t=<seconds>`.
struct service_limit {
    /// The name of the policy this limit reports on.
    std::string name;
    std::uint64_t remaining = 0;                ///< r (required): quota units available
    std::optional<std::uint64_t> reset;         ///< t, the effective window in seconds
    std::optional<std::string> partition_key;   ///< pk, the decoded bytes
    sf::parameters extensions;                  ///< every other parameter, in order

    /// Equal when every member is, extensions in the same order.
    friend bool operator==(const service_limit&, const service_limit&) = default;
};

/// Parses a `RateLimit-Policy` value (every field line joined with ","). An empty text (the
/// field is absent) is an empty list. Errors: invalid_structured_field, invalid_member,
/// missing_parameter, invalid_parameter.
boost::system::result<std::vector<quota_policy>> parse_ratelimit_policy(std::string_view text);

/// Parses a `RateLimit` value; see parse_ratelimit_policy.
boost::system::result<std::vector<service_limit>> parse_ratelimit(std::string_view text);

/// The canonical field value (RFC 8941 serialisation; parameters in the order q, qu, w, pk,
/// then the extensions). Errors: unserializable (a number beyond 15 digits, a name with a
/// byte outside printable ASCII, a bad extension key), invalid_parameter (w = 0).
boost::system::result<std::string> format_ratelimit_policy(std::span<const quota_policy> policies);

/// The canonical field value (parameters r, t, pk, extensions); see format_ratelimit_policy.
boost::system::result<std::string> format_ratelimit(std::span<const service_limit> limits);

/// A non-negative Integer extension parameter (such as "sluice-burst"), if present and one.
std::optional<std::uint64_t> uint_extension(const sf::parameters& extensions, std::string_view key) noexcept;

} // namespace sluice::http
