// The one composed operation behind every Redis limiter operation: it asks its state
// machine (try_fsm, bucket_acquire_fsm, window_acquire_fsm) what to do and does it with
// the client, the limiter's wait engine (where close() and cancellation reach it), or the
// fallback limiter.
#pragma once

#include <sluice/admission.hpp>
#include <sluice/decision.hpp>
#include <sluice/error.hpp>
#include <sluice/detail/wait/initiate_acquire.hpp>
#include <sluice/redis/detail/store/shared_backend.hpp>
#include <sluice/redis/detail/store/op_step.hpp>
#include <sluice/redis/detail/store/try_fsm.hpp>
#include <sluice/redis/detail/store/verdict.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

template <class Core, class Fsm>
struct redis_op {
    std::shared_ptr<Core> core;
    Fsm fsm;
    round_trip rt{};
    eval_request sent{};   // the call in flight: its reply must be a possible answer to it (answers, consistent)

    // Start, or the post of a result decided in the initiating call.
    template <class Self>
    void operator()(Self& self)
    {
        if (fsm.posted())
            return finish(self);
        if constexpr (Fsm::total_cancellation)
            self.reset_cancellation_state(boost::asio::enable_total_cancellation());
        run(self, fsm.start(*core, Core::now()));
    }

    // The script's reply.
    template <class Self, class Reply>
    void operator()(Self& self, boost::system::error_code e, Reply r)
    {
        rt.received_us = system_now_us();
        std::optional<verdict> v;
        if (!e) v = parse_verdict(r);
        if (v && !(answers(*v, sent) && consistent(*v, sent, Core::replies))) v.reset();
        run(self, fsm.on_reply(*core, e, v ? &*v : nullptr, self.cancelled() != boost::asio::cancellation_type::none, rt,
                               Core::now()));
    }

    // The end of a wait in the engine, or of the wait on the fallback.
    template <class Self>
    void operator()(Self& self, boost::system::error_code e)
    {
        run(self, fsm.on_wake(*core, e, self.cancelled() != boost::asio::cancellation_type::none, Core::now()));
    }

private:
    template <class Self>
    void run(Self& self, const op_step& s)
    {
        switch (s.next) {
        case op_step::kind::eval: {
            rt.sent_us = system_now_us();
            sent = s.request;
            Core& c = *core;
            c.async_decide(fsm.key(), s.request, s.cancellable, std::move(self));
            return;
        }
        case op_step::kind::sleep:
            park(self, s.wait_ns);
            return;
        case op_step::kind::fall_back: {
            // Copied: `self` (holding the key) moves into the operation.
            std::string k = fsm.key();
            std::uint64_t n = fsm.count();
            auto& fallback = core->fallback();
            fallback.async_acquire(k, n, std::chrono::nanoseconds{s.wait_ns}, std::move(self));
            return;
        }
        case op_step::kind::post:
            boost::asio::post(std::move(self));
            return;
        case op_step::kind::complete:
            finish(self);
            return;
        }
    }

    // Waits wait_ns in the limiter's engine: the operation moves into a waiter node, the
    // one every acquire waits in (after which `this` is left behind), and is resumed there
    // as self(error_code) with the engine's result. The node holds no reference to the
    // engine: the operation holds the core, which holds it.
    template <class Self>
    void park(Self& self, std::int64_t wait_ns)
    {
        using engine_type = typename Core::engine_type;
        using node_type = sluice::detail::acquire_op<Self, typename Self::io_executor_type, engine_type,
                                                     sluice::detail::no_grant>;
        engine_type& engine = core->engine();
        const auto io_ex = self.get_io_executor();
        auto slot = boost::asio::get_associated_cancellation_slot(self);
        node_type* node = node_type::create(std::move(self), io_ex);
        sluice::detail::cancel_in(slot, &engine, node);
        engine.start(node, 1, wait_ns);
    }

    template <class Self>
    void finish(Self& self)
    {
        if constexpr (Fsm::with_decision)
            self.complete(fsm.error(), fsm.result());
        else
            self.complete(fsm.error());
    }
};

/// The initiation of one Redis limiter operation: its state machine, built from the
/// request, run by a redis_op on the client's executor.
template <class Core, class Signature, class MakeFsm>
struct initiate_redis_op {
    std::shared_ptr<Core> core;

    using executor_type = typename Core::executor_type;
    executor_type get_executor() const noexcept { return core->get_executor(); }

    template <class Handler, class... Request>
    void operator()(Handler&& handler, const Request&... request) const
    {
        using fsm_type = decltype(MakeFsm{}(*core, request...));
        boost::asio::async_compose<std::decay_t<Handler>, Signature>(
            redis_op<Core, fsm_type>{core, MakeFsm{}(*core, request...)}, handler, core->client().get_executor());
    }
};

/// async_settle of a Redis limiter: the ticket checked in the call (an error is posted),
/// else one script call; its reply is read here.
template <class Core>
struct settle_op {
    std::shared_ptr<Core> core;
    sluice::admission ticket;
    std::uint64_t actual;
    boost::system::error_code ec{};
    bool sent = false;

    template <class Self>
    void operator()(Self& self)
    {
        if (sent)
            return self.complete(ec);
        sent = true;
        ec = core->settle_check(ticket);
        if (ec)
            return boost::asio::post(std::move(self));
        Core& c = *core;
        c.async_settle_call(ticket, actual, std::move(self));
    }

    template <class Self, class Reply>
    void operator()(Self& self, boost::system::error_code e, Reply r)
    {
        if (unreachable(e)) core->on_unavailable();
        else if (e) core->on_error();
        else if (r.type != Reply::kind::array || r.elements.size() != 6) {
            core->on_error();
            e = make_error_code(error::protocol_error);
        }
        auto keep = std::move(core);
        self.complete(e);
    }
};

/// How a Redis limiter answers basic_limiter's verbs: every decision after a script call
/// (try_fsm), an acquire by `AcquireFsm` (reserve ahead, or ask again). There is no
/// synchronous try: the state is elsewhere.
template <class AcquireFsm>
struct script_answers {
    static constexpr bool at_once = false;
    using answer_type = decision;
    using acquire_signature = void(boost::system::error_code);

    struct make_try {
        template <class Core>
        try_fsm operator()(const Core& core, std::uint64_t n, const std::string& key) const
        {
            return try_fsm(core.key_for(key), n);
        }
    };

    struct make_acquire {
        template <class Core>
        AcquireFsm operator()(const Core& core, std::uint64_t n, std::int64_t max_wait, const std::string& key) const
        {
            return AcquireFsm(core.key_for(key), n, max_wait);
        }
    };

    struct make_peek {
        template <class Core>
        try_fsm operator()(const Core& core, std::uint64_t n, const std::string& key) const
        {
            return try_fsm::peek(core.key_for(key), n);
        }
    };

    template <class Core>
    struct settle_initiation_t {
        std::shared_ptr<Core> core;

        using executor_type = typename Core::executor_type;
        executor_type get_executor() const noexcept { return core->get_executor(); }

        template <class Handler>
        void operator()(Handler&& handler, sluice::admission a, std::uint64_t actual) const
        {
            boost::asio::async_compose<std::decay_t<Handler>, void(boost::system::error_code)>(
                settle_op<Core>{core, std::move(a), actual}, handler, core->client().get_executor());
        }
    };

    // Only where the script has a settle and a read-only try (GCRA).
    template <class Core>
    static auto peek_initiation(std::shared_ptr<Core> c) noexcept
        requires(Core::replies == script_kind::gcra)
    {
        return initiate_redis_op<Core, void(boost::system::error_code, decision), make_peek>{std::move(c)};
    }

    template <class Core>
    static auto settle_initiation(std::shared_ptr<Core> c) noexcept
        requires requires(Core& k, sluice::admission& a) { k.settle_check(a); }
    {
        return settle_initiation_t<Core>{std::move(c)};
    }

    template <class Core>
    static auto try_initiation(std::shared_ptr<Core> c) noexcept
    {
        return initiate_redis_op<Core, void(boost::system::error_code, decision), make_try>{std::move(c)};
    }

    template <class Core>
    static auto acquire_initiation(std::shared_ptr<Core> c) noexcept
    {
        return initiate_redis_op<Core, acquire_signature, make_acquire>{std::move(c)};
    }
};

} // namespace sluice::redis::detail
