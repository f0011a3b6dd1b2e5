// An owning, parsed Redis reply (RESP2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::redis {

/// A reply as Redis sent it. An error reply is a value (type == kind::error), not an
/// error_code: the command reached the server and was refused.
struct reply {
    /// The RESP2 reply types.
    enum class kind {
        nil,      ///< a null bulk string or array (or a reply of another type)
        integer,  ///< in `integer`
        string,   ///< a bulk string, in `str`
        status,   ///< a simple string such as OK, in `str`
        error,    ///< an error reply, its message in `str`
        array,    ///< in `elements`
    };
    /// Which member holds the value.
    kind type = kind::nil;
    /// integer: the value.
    std::int64_t integer = 0;
    /// string, status, error: the text.
    std::string str;
    /// array: the elements, in order.
    std::vector<reply> elements;

    /// Whether the server answered with an error reply.
    bool is_error() const noexcept { return type == kind::error; }
};

} // namespace sluice::redis
