// A Lua script and its SHA1, so that EVALSHA can be sent without a round trip.
#pragma once

#include <memory>
#include <string>

namespace sluice::redis {

/// An immutable Lua script. Copies are cheap (they share the text), so operations keep
/// their own copy and the caller's object may go away while they run.
class script {
public:
    /// Holds `lua` and computes its SHA1 once.
    explicit script(std::string lua);

    /// The Lua text.
    const std::string& source() const noexcept { return data_->source; }

    /// Lower-case hex SHA1 of source(), as Redis names scripts.
    const std::string& sha1() const noexcept { return data_->sha1; }

private:
    struct data {
        std::string source;
        std::string sha1;
    };
    std::shared_ptr<const data> data_;
};

} // namespace sluice::redis
