// basic_connection's core: a pipeline as a client_impl, async_eval on it, and the
// shutdown of every connection with its execution context. The parts live apart:
//   hiredis_adapter  hiredis' async context on an Asio stream_descriptor
//   pipeline         commands in order, timeouts, reconnection, name resolution
//   script_reload    EVALSHA, and SCRIPT LOAD on NOSCRIPT
//   pending_op       the user's handler and its per-operation cancellation
#include "client.hpp"
#include "pending_op.hpp"
#include "pipeline.hpp"
#include "script_reload.hpp"

#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/context.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/query.hpp>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

namespace sluice::redis::detail {

namespace asio = boost::asio;

class connection_impl final : public pipeline, public client_impl {
public:
    using pipeline::pipeline;

    const asio::any_io_executor& executor() const noexcept override { return pipeline::executor(); }
    void exec(std::vector<std::string> argv, std::shared_ptr<pending_op> op) override
    {
        pipeline::exec(std::move(argv), std::move(op));
    }
    void eval(const script& s, std::vector<std::string> keys, std::vector<std::string> args,
              std::shared_ptr<pending_op> op) override
    {
        run_eval(shared_from_this(), s, std::move(keys), std::move(args), std::move(op));
    }
    void close() override { pipeline::close(); }
    bool connected() const noexcept override { return pipeline::connected(); }
    link_stats stats() const noexcept override { return pipeline::stats(); }
};

namespace {

// Knows the live connections of one execution context, to shut them down with it.
class connection_registry : public asio::execution_context::service {
public:
    inline static asio::execution_context::id id;

    explicit connection_registry(asio::execution_context& ctx) : service(ctx) {}

    void add(const std::shared_ptr<connection_impl>& c)
    {
        std::lock_guard lock(mutex_);
        std::erase_if(live_, [](const auto& w) { return w.expired(); });
        live_.push_back(c);
    }

private:
    void shutdown() override
    {
        std::vector<std::shared_ptr<connection_impl>> alive;
        {
            std::lock_guard lock(mutex_);
            for (auto& w : live_)
                if (auto c = w.lock()) alive.push_back(std::move(c));
            live_.clear();
        }
        for (auto& c : alive) c->shutdown();
    }

    std::mutex mutex_;
    std::vector<std::weak_ptr<connection_impl>> live_;
};

} // namespace

std::shared_ptr<client_impl> make_connection(const asio::any_io_executor& ex, connection_config cfg)
{
    return make_connection(ex, std::move(cfg), nullptr);
}

std::shared_ptr<client_impl> make_connection(const asio::any_io_executor& ex, connection_config cfg,
                                             std::shared_ptr<link_counters> counters)
{
    auto c = std::make_shared<connection_impl>(ex, std::move(cfg), std::move(counters));
    asio::use_service<connection_registry>(asio::query(ex, asio::execution::context)).add(c);
    asio::dispatch(ex, [c] { c->start(); });
    return c;
}

} // namespace sluice::redis::detail
