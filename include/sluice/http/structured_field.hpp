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
    /// The RFC 8941 types of a bare item.
    enum class kind : unsigned char {
        integer,        ///< in `number`
        decimal,        ///< in `number`, in thousandths
        string,         ///< in `text`
        token,          ///< in `text`
        byte_sequence,  ///< in `text`, decoded
        boolean,        ///< in `boolean`
    };
    /// Which member holds the value.
    kind type = kind::boolean;
    /// integer: the value (|v| <= 999,999,999,999,999); decimal: the value in thousandths,
    /// so that every RFC 8941 decimal is held exactly.
    std::int64_t number = 0;
    /// string and token: the text; byte_sequence: the decoded bytes.
    std::string text;
    /// boolean: the value.
    bool boolean = true;

    /// Equal when every member is, unused ones included.
    friend bool operator==(const bare_item&, const bare_item&) = default;
};

/// A parameter of an item or inner list: `;key=value`.
struct parameter {
    /// A lower-case key.
    std::string key;
    /// The value (Boolean true when the parameter has no `=value`).
    bare_item value;

    /// Equal when key and value are.
    friend bool operator==(const parameter&, const parameter&) = default;
};

/// The parameters of an item or inner list, in order (a parsed list holds each key once).
using parameters = std::vector<parameter>;

/// An item: a bare item with its parameters.
struct item {
    /// The bare item.
    bare_item value;
    /// Its parameters.
    parameters params;

    /// Equal when value and parameters are.
    friend bool operator==(const item&, const item&) = default;
};

/// A member of a List: an item, or an inner list with its own parameters.
struct member {
    /// Whether this member is an inner list (`items`, `params`) rather than an item (`value`).
    bool inner_list = false;
    /// The item, when !inner_list.
    item value;
    /// The inner list's items, when inner_list.
    std::vector<item> items;
    /// The inner list's parameters, when inner_list.
    parameters params;

    /// Equal when every member is, unused ones included.
    friend bool operator==(const member&, const member&) = default;
};

/// A List, the top-level type of RateLimit and RateLimit-Policy.
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
