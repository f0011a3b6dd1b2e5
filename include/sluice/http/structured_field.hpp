// RFC 8941 structured-field Lists: the syntax of RateLimit and RateLimit-Policy. Parsing
// follows the algorithms of RFC 8941 section 4.2 exactly (so a repeated parameter keeps
// its first position and its last value); serialisation follows section 4.1 and gives
// the canonical form. RFC 9651's Date and Display String are not accepted.
#pragma once

#include <boost/system/result.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::http::sf {

/// A bare item.
struct bare_item {
    enum class kind : unsigned char { integer, decimal, string, token, byte_sequence, boolean };
    kind type = kind::boolean;
    /// integer: the value (|v| <= 999,999,999,999,999); decimal: the value in thousandths,
    /// so that every RFC 8941 decimal is held exactly.
    std::int64_t number = 0;
    /// string and token: the text; byte_sequence: the decoded bytes.
    std::string text;
    bool boolean = true;

    friend bool operator==(const bare_item&, const bare_item&) = default;
};

struct parameter {
    std::string key;
    bare_item value;

    friend bool operator==(const parameter&, const parameter&) = default;
};

using parameters = std::vector<parameter>;

struct item {
    bare_item value;
    parameters params;

    friend bool operator==(const item&, const item&) = default;
};

/// A member of a List: an item, or an inner list with its own parameters.
struct member {
    bool inner_list = false;
    item value;              // when !inner_list
    std::vector<item> items; // when inner_list
    parameters params;       // of the inner list

    friend bool operator==(const member&, const member&) = default;
};

using list = std::vector<member>;

/// Parses a List (all field lines of the field joined with ","). An empty or all-space
/// text is an empty list. Fails with http::error::invalid_structured_field.
boost::system::result<list> parse_list(std::string_view text);

/// Serialises a List in canonical form. Fails with http::error::unserializable when a
/// value cannot be represented (see the limits of each type in RFC 8941 section 3.3).
boost::system::result<std::string> serialize_list(const list& l);

/// The value of parameter `key`, or nullptr.
const bare_item* find(const parameters& params, std::string_view key) noexcept;

} // namespace sluice::http::sf
