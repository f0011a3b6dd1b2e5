// An owning, parsed Redis reply (RESP2).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice::redis {

/// A reply as Redis sent it. An error reply is a value (type == kind::error), not an
/// error_code: the command reached the server and was refused.
struct reply {
    enum class kind { nil, integer, string, status, error, array };
    kind type = kind::nil;
    std::int64_t integer = 0;
    std::string str;               // string, status, error
    std::vector<reply> elements;   // array

    bool is_error() const noexcept { return type == kind::error; }
};

} // namespace sluice::redis
