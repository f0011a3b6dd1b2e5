// Waiting requests: intrusive nodes that live inside the asynchronous operation, a FIFO
// list of them and a min-heap by deadline. Waiting allocates nothing but the operation.
#pragma once

#include <boost/system/error_code.hpp>

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sluice::detail {

struct waiter {
    waiter* prev = nullptr;
    waiter* next = nullptr;
    std::uint64_t n = 0;
    std::int64_t ready = 0;      // reserving policies: the committed ready time
    std::int64_t shift = 0;      // refunds of cancelled predecessors not yet passed on
    std::uint64_t order = 0;     // policies shared with other holders: its reservation's number
    std::int64_t deadline = 0;   // when waiting longer breaks max_wait
    std::int64_t since = 0;      // when it queued (for the counts of waits)
    std::size_t heap_index = 0;
    bool queued = false;
    boost::system::error_code result;

    // Hands `result` to the completion handler (through its executor) and frees the node.
    // `here`: called on the engine's executor outside any initiating function (a timer
    // wake-up), where a handler whose executor is running may be run at once.
    void (*complete)(waiter*, bool here) = nullptr;
    // Frees the node without calling the handler (the limiter is torn down).
    void (*destroy)(waiter*) = nullptr;
};

/// Doubly-linked FIFO of waiters: O(1) push, pop and unlink.
class waiter_list {
public:
    bool empty() const noexcept { return head_ == nullptr; }
    std::size_t size() const noexcept { return size_; }
    waiter* front() const noexcept { return head_; }
    waiter* back() const noexcept { return tail_; }

    void push_back(waiter* w) noexcept
    {
        w->prev = tail_;
        w->next = nullptr;
        (tail_ ? tail_->next : head_) = w;
        tail_ = w;
        w->queued = true;
        ++size_;
    }

    void erase(waiter* w) noexcept
    {
        (w->prev ? w->prev->next : head_) = w->next;
        (w->next ? w->next->prev : tail_) = w->prev;
        w->prev = w->next = nullptr;
        w->queued = false;
        --size_;
    }

    // Frees every waiter without calling its handler (the limiter is torn down).
    void destroy_all() noexcept
    {
        while (waiter* w = head_) {
            erase(w);
            w->destroy(w);
        }
    }

    template <class F>
    void for_each(F&& f) const
    {
        for (waiter* w = head_; w; w = w->next)
            f(w);
    }

private:
    waiter* head_ = nullptr;
    waiter* tail_ = nullptr;
    std::size_t size_ = 0;
};

/// Binary min-heap of waiters by deadline; each waiter knows its index, so removal of any
/// waiter is O(log n).
class deadline_heap {
public:
    bool empty() const noexcept { return heap_.empty(); }
    waiter* top() const noexcept { return heap_.front(); }

    void push(waiter* w)
    {
        w->heap_index = heap_.size();
        heap_.push_back(w);
        up(w->heap_index);
    }

    void erase(waiter* w) noexcept
    {
        std::size_t i = w->heap_index;
        std::size_t last = heap_.size() - 1;
        if (i != last) {
            swap(i, last);
            heap_.pop_back();
            down(i);
            up(i);
        } else {
            heap_.pop_back();
        }
    }

private:
    void swap(std::size_t a, std::size_t b) noexcept
    {
        std::swap(heap_[a], heap_[b]);
        heap_[a]->heap_index = a;
        heap_[b]->heap_index = b;
    }

    void up(std::size_t i) noexcept
    {
        while (i > 0) {
            std::size_t p = (i - 1) / 2;
            if (heap_[p]->deadline <= heap_[i]->deadline) break;
            swap(i, p);
            i = p;
        }
    }

    void down(std::size_t i) noexcept
    {
        for (;;) {
            std::size_t l = 2 * i + 1, r = l + 1, m = i;
            if (l < heap_.size() && heap_[l]->deadline < heap_[m]->deadline) m = l;
            if (r < heap_.size() && heap_[r]->deadline < heap_[m]->deadline) m = r;
            if (m == i) return;
            swap(i, m);
            i = m;
        }
    }

    std::vector<waiter*> heap_;
};

/// Waiters taken out of the queue under the lock, completed after it is released.
class completion_list {
public:
    void push(waiter* w) noexcept
    {
        w->next = nullptr;
        (tail_ ? tail_->next : head_) = w;
        tail_ = w;
    }

    template <class F>
    void for_each(F&& f) const
    {
        for (waiter* w = head_; w; w = w->next)
            f(w);
    }

    // Completes every waiter; call without holding any lock. `here`: see waiter::complete.
    // A handler run here may throw: the rest are posted first, then the exception goes on
    // to the executor's run(), as it would from a posted handler, and nobody is left out.
    void complete_all(bool here = false)
    {
        waiter* w = head_;
        head_ = tail_ = nullptr;
        while (w) {
            waiter* next = w->next;
            try {
                w->complete(w, here);
            } catch (...) {
                for (w = next; w; w = next) {
                    next = w->next;
                    w->complete(w, false);
                }
                throw;
            }
            w = next;
        }
    }

private:
    waiter* head_ = nullptr;
    waiter* tail_ = nullptr;
};

} // namespace sluice::detail
