// What the shared-memory tests share: segment names no other test run uses, removed when
// the test ends.
#pragma once

#include <sluice/shm/segment.hpp>

#include <string>

#include <unistd.h>

namespace sluice_test {

/// A segment name of this process and tag; removed (if it exists) when made and when gone.
class shm_name {
public:
    explicit shm_name(const std::string& tag) : name_("/sluice-test-" + std::to_string(::getpid()) + "-" + tag)
    {
        sluice::shm::remove(name_);
    }
    ~shm_name() { sluice::shm::remove(name_); }
    shm_name(const shm_name&) = delete;
    shm_name& operator=(const shm_name&) = delete;

    const std::string& str() const noexcept { return name_; }
    operator const std::string&() const noexcept { return name_; }
    /// The file the segment is under.
    std::string path() const { return "/dev/shm" + name_; }

private:
    std::string name_;
};

} // namespace sluice_test
