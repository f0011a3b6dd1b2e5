// State of a Redis sliding window on top of shared_backend: the sliding log script and its
// fixed arguments.
#pragma once

#include <sluice/error.hpp>
#include <sluice/policy/sliding_log.hpp>
#include <sluice/redis/detail/store/key_batches.hpp>
#include <sluice/redis/detail/store/shared_backend.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/verdict.hpp>
#include <sluice/redis/shared_options.hpp>
#include <sluice/redis/reply.hpp>
#include <sluice/redis/script.hpp>
#include <sluice/redis/scripts.hpp>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// `Fallback`: the local keyed limiter that decides while Redis is away (a keyed sliding
/// window, given by redis::sliding_window: the store does not include a limiter).
template <class Client, class Clock, class Fallback>
class window_backend
    : public shared_backend<Client, Clock, Fallback>,
      public std::enable_shared_from_this<window_backend<Client, Clock, Fallback>> {
    using base_type = shared_backend<Client, Clock, Fallback>;

public:
    using typename base_type::executor_type;
    using typename base_type::fallback_type;

    static constexpr bool can_lease = false;
    static constexpr script_kind replies = script_kind::sliding_log;
    // The most requests one script call decides: a batch of 64 keeps a call under a few
    // hundred microseconds of the server's time.
    static constexpr std::size_t max_batch = 64;

    window_backend(Client& client, std::uint64_t limit, std::chrono::nanoseconds window, shared_options opts)
        : base_type(client, std::move(opts), policy::sliding_log::max_limit,
                    [&](const executor_type& ex, const shared_options& o) {
                        std::int64_t us = to_us(window);
                        const std::uint64_t l = policy::sliding_log::check_limit(limit);
                        return fallback_type(ex, std::max<std::uint64_t>(1, l / o.expected_nodes),
                                             std::chrono::microseconds{us}, o.fallback);
                    }),
          script_(std::string(lua::sliding_log)),
          configure_(std::string(lua::sliding_log_configure)),
          leave_(std::string(lua::sliding_log_leave)),
          limit_(limit),
          window_us_(to_us(window)),
          limit_arg_(std::to_string(limit)),
          window_arg_(std::to_string(window_us_))
    {
    }

    const script& script_for(const eval_request& r) const noexcept
    {
        return r.how == eval_request::mode::configure ? configure_ : script_;
    }

    // A request's script call. A try (with its ticket, for a waiter) goes at once when
    // no call for its key is in flight; otherwise it waits for that call's reply and goes
    // with the others that waited, as one batch (see lua::sliding_log and key_batches): the
    // script's fixed part is paid once a call, which is what bounds the decisions one Redis
    // makes a second. A request cancelled while it waits completes with operation_aborted,
    // having sent nothing; once sent, it completes with its reply (its batch is not
    // cancelled for it).
    template <class Handler>
    void async_decide(const std::string& key, const eval_request& r, bool cancellable, Handler&& h)
    {
        if (r.how != eval_request::mode::try_now) {
            this->eval(script_for(r), keys(key), args(r), cancellable, std::forward<Handler>(h));
            return;
        }
        // `key` may live in the operation that `h` is: copied before `h` moves.
        std::string k = key;
        auto slot = boost::asio::get_associated_cancellation_slot(h);
        boost::asio::any_io_executor ex = boost::asio::get_associated_executor(h, this->client().get_executor());
        batched b{0, std::to_string(r.n), r.ticket ? *r.ticket : std::string(), std::move(ex),
                  eval_handler(std::forward<Handler>(h))};
        {
            std::lock_guard lock(this->mutex_);
            b.id = ++batch_ids_;
            if (!batches_.submit(k, b)) {
                if (cancellable && slot.is_connected())
                    slot.template emplace<cancel_batched>(this->weak_from_this(), k, b.id);
                return;
            }
        }
        std::vector<batched> one;
        one.push_back(std::move(b));
        send_batch(k, std::move(one));
    }

    // The keys of every script call: the log, the configuration, the waiters' queue (one
    // hash slot).
    static std::vector<std::string> keys(const std::string& key)
    {
        return {key, key + ":cfg", key + ":q"};
    }

    // The script's arguments: this limiter's limit and window (the key's configuration in
    // Redis, when it has one, replaces them), then the request; the window never
    // reserves, every request is a try, a waiting one with its ticket.
    std::vector<std::string> args(const eval_request& r) const
    {
        if (r.how == eval_request::mode::configure)
            return {limit_arg_, window_arg_, std::to_string(r.new_count), std::to_string(r.new_span_us)};
        if (r.ticket)
            return {limit_arg_, window_arg_, std::to_string(r.n), std::string(), *r.ticket};
        return {limit_arg_, window_arg_, std::to_string(r.n)};
    }

    // A waiter's ticket, "deadline_us:n:id": the deadline on the server's clock as this
    // process estimates it (its clock offset), plus a second, only for dropping the
    // tickets of waiters that died; the id is unique across processes.
    std::string make_ticket(std::uint64_t n, std::int64_t max_wait_ns)
    {
        std::int64_t dl = system_now_us() + this->clock_offset_us() + max_wait_ns / 1000 + 1'000'000;
        char buf[96];
        std::snprintf(buf, sizeof buf, "%lld:%llu:%016llx%llx", static_cast<long long>(std::max<std::int64_t>(0, dl)),
                      static_cast<unsigned long long>(n), static_cast<unsigned long long>(id_),
                      static_cast<unsigned long long>(tickets_.fetch_add(1, std::memory_order_relaxed)));
        return buf;
    }

    // A waiter gives up its place (fire and forget).
    void leave_queue(const std::string& key, const std::string& ticket)
    {
        base_type::send(this->shared_from_this(), leave_, {key + ":q"}, {ticket});
    }

    // set_limit / set_window: the request, or the error of a bad value (bad_span for a
    // window out of range).
    static constexpr error bad_span = error::invalid_duration;
    static std::pair<eval_request, boost::system::error_code> configure_request(std::int64_t window_ns, std::uint64_t limit)
    {
        return detail::configure_request(window_ns, limit, policy::sliding_log::max_limit, lua::max_span_us, bad_span);
    }

    std::uint64_t limit() const noexcept { return limit_; }
    std::chrono::microseconds window() const noexcept { return std::chrono::microseconds{window_us_}; }

private:
    using eval_handler = boost::asio::any_completion_handler<void(boost::system::error_code, reply)>;

    // A request in a batch: its arguments and the operation its reply completes.
    struct batched {
        std::uint64_t id;
        std::string n;
        std::string ticket;
        boost::asio::any_io_executor ex;   // the operation's (its completions run there)
        eval_handler handler;

        // Move-only: any_completion_handler's converting constructor would otherwise take a
        // copy for a handler of its own and wrap it.
        batched(std::uint64_t i, std::string count, std::string t, boost::asio::any_io_executor e, eval_handler h)
            : id(i), n(std::move(count)), ticket(std::move(t)), ex(std::move(e)), handler(std::move(h))
        {
        }
        batched(batched&&) noexcept = default;
        // Asio 1.81's move assignment of any_completion_handler recurses without end (it
        // passes the named rvalue to its converting constructor): swapped instead.
        batched& operator=(batched&& o) noexcept
        {
            id = o.id;
            n = std::move(o.n);
            ticket = std::move(o.ticket);
            ex = std::move(o.ex);
            handler.swap(o.handler);
            return *this;
        }
        batched(const batched&) = delete;
        batched& operator=(const batched&) = delete;
    };

    // Installed in the slot of a request that waits for its key's call in flight.
    struct cancel_batched {
        std::weak_ptr<window_backend> core;
        std::string key;
        std::uint64_t id;

        void operator()(boost::asio::cancellation_type)
        {
            auto c = core.lock();
            if (!c) return;
            std::optional<batched> b;
            {
                std::lock_guard lock(c->mutex_);
                b = c->batches_.cancel(key, id);
            }
            // Posted: never inside the emit of the signal.
            if (b) {
                boost::asio::post(b->ex, [h = std::move(b->handler)]() mutable {
                    std::move(h)(boost::asio::error::operation_aborted, reply{});
                });
            }
        }
    };

    // One call for the requests of `b` (all of one key); its reply, split, completes each.
    void send_batch(const std::string& key, std::vector<batched> b)
    {
        if (this->closed()) {
            // Closed while they waited: nothing sent, as for a request made after close();
            // the next ones in turn, until none waits.
            for (auto& x : b) boost::asio::dispatch(x.ex, completion(x, make_error_code(error::closed), reply{}));
            send_next(key);
            return;
        }
        std::vector<std::string> a{limit_arg_, window_arg_, std::move(b[0].n)};
        a.reserve(5 + 2 * b.size());
        if (b.size() > 1 || !b[0].ticket.empty()) {
            a.emplace_back();
            a.push_back(std::move(b[0].ticket));
        }
        for (std::size_t i = 1; i < b.size(); ++i) {
            a.push_back(std::move(b[i].n));
            a.push_back(std::move(b[i].ticket));
        }
        this->eval(script_, keys(key), std::move(a), false,
                   [self = this->shared_from_this(), key, b = std::move(b)](boost::system::error_code ec, reply r) mutable {
                       // Answered first: the requests its operations make at once (on this
                       // executor) join the next call, which goes even if one of them throws.
                       struct then_next {
                           window_backend& c;
                           const std::string& key;
                           ~then_next() { c.send_next(key); }
                       } next{*self, key};
                       answer(b, ec, std::move(r));
                   });
    }

    // The call for `key` returned: the requests that waited for it go.
    void send_next(const std::string& key)
    {
        std::vector<batched> next;
        {
            std::lock_guard lock(this->mutex_);
            next = batches_.returned(key);
        }
        if (!next.empty()) send_batch(key, std::move(next));
    }

    // Each request's six integers of the batch's reply. A failure goes to each with its
    // reply; a reply of another shape, to none: each gets a nil reply, not an answer.
    // Completed in order where they run now (dispatch); should one throw, the others are
    // posted, never lost.
    static void answer(std::vector<batched>& b, boost::system::error_code ec, reply r)
    {
        std::vector<reply> parts(b.size());
        if (b.size() == 1) {
            parts[0] = std::move(r);
        } else if (ec) {
            for (auto& p : parts) p = r;
        } else if (r.type == reply::kind::array && r.elements.size() == 6 * b.size()) {
            for (std::size_t i = 0; i < b.size(); ++i) {
                parts[i].type = reply::kind::array;
                auto first = r.elements.begin() + static_cast<std::ptrdiff_t>(6 * i);
                parts[i].elements.assign(std::make_move_iterator(first), std::make_move_iterator(first + 6));
            }
        }
        std::size_t i = 0;
        try {
            for (; i < b.size(); ++i)
                boost::asio::dispatch(b[i].ex, completion(b[i], ec, std::move(parts[i])));
        } catch (...) {
            for (++i; i < b.size(); ++i)
                boost::asio::post(b[i].ex, completion(b[i], ec, std::move(parts[i])));
            throw;
        }
    }

    static auto completion(batched& b, boost::system::error_code ec, reply r)
    {
        return [h = std::move(b.handler), ec, r = std::move(r)]() mutable { std::move(h)(ec, std::move(r)); };
    }

    // The server counts in whole microseconds: the window is rounded up (never more
    // permits than asked).
    static std::int64_t to_us(std::chrono::nanoseconds window)
    {
        std::int64_t ns = window.count();
        if (ns <= 0)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        std::int64_t us = ceil_us(ns);
        if (us > lua::max_span_us)
            throw boost::system::system_error(make_error_code(error::invalid_duration));
        return us;
    }

    script script_;
    script configure_;
    script leave_;
    std::uint64_t id_ = std::random_device{}() * (std::uint64_t{1} << 32) ^ std::random_device{}();
    std::atomic<std::uint64_t> tickets_{0};
    key_batches<batched> batches_{max_batch};   // guarded by mutex_
    std::uint64_t batch_ids_ = 0;               // guarded by mutex_
    std::uint64_t limit_;
    std::int64_t window_us_;
    std::string limit_arg_;
    std::string window_arg_;
};

} // namespace sluice::redis::detail
