// Which of a limiter's requests for one key go to Redis together. Sans-io: the caller
// holds the lock and sends what this tells it to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// At most one call per key in flight: a request for a key with no call in flight goes at
/// once, alone; those that come while one is in flight wait for it, and go together as the
/// next call when it returns (oldest first, at most max_batch a call; the rest the call
/// after). Every call pays the script's fixed part once for its requests, and a request
/// waits at most the round trips of the batches queued before it, never a timer.
/// `Entry` has an `id` (std::uint64_t), unique among the waiting ones.
template <class Entry>
class key_batches {
public:
    explicit key_batches(std::size_t max_batch) noexcept : max_batch_(max_batch < 1 ? 1 : max_batch) {}

    /// A request for `key`: true when the caller sends it now (the key has a call in
    /// flight from then on), and `e` is left to it; false when `e` was taken to wait.
    bool submit(const std::string& key, Entry& e)
    {
        auto [it, first] = keys_.try_emplace(key);
        if (first)
            return true;
        it->second.push_back(std::move(e));
        return false;
    }

    /// The call for `key` returned: the next call's requests (the key stays in flight), or
    /// none (it is not in flight any more).
    std::vector<Entry> returned(const std::string& key)
    {
        std::vector<Entry> next;
        auto it = keys_.find(key);
        if (it == keys_.end())
            return next;
        auto& q = it->second;
        if (q.empty()) {
            keys_.erase(it);
            return next;
        }
        const std::size_t m = q.size() < max_batch_ ? q.size() : max_batch_;
        next.reserve(m);
        for (std::size_t i = 0; i < m; ++i) {
            next.push_back(std::move(q.front()));
            q.pop_front();
        }
        return next;
    }

    /// A waiting request gives up: it, unless it was sent already.
    std::optional<Entry> cancel(const std::string& key, std::uint64_t id)
    {
        auto it = keys_.find(key);
        if (it == keys_.end())
            return std::nullopt;
        auto& q = it->second;
        for (auto e = q.begin(); e != q.end(); ++e) {
            if (e->id == id) {
                std::optional<Entry> out(std::move(*e));
                q.erase(e);
                return out;
            }
        }
        return std::nullopt;
    }

    /// Keys with a call in flight.
    std::size_t in_flight() const noexcept { return keys_.size(); }
    /// Requests waiting for `key`'s call to return.
    std::size_t waiting(const std::string& key) const noexcept
    {
        auto it = keys_.find(key);
        return it == keys_.end() ? 0 : it->second.size();
    }

private:
    std::size_t max_batch_;
    std::unordered_map<std::string, std::deque<Entry>> keys_;
};

} // namespace sluice::redis::detail
