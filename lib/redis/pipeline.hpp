// One Redis link kept up: commands sent in order and matched with their replies, the
// command timeout (which resets the link), the connect timeout, reconnection with backoff,
// host names resolved (or, with Sentinel, the master discovered) at each attempt and the
// commands held meanwhile.
#pragma once

#include "backoff.hpp"
#include "hiredis_adapter.hpp"
#include "link_counters.hpp"
#include "pending_op.hpp"
#include "reply_queue.hpp"

#include <sluice/error.hpp>
#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/detail/store/sentinel_impl.hpp>
#include <sluice/redis/sentinel_config.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sluice::redis::detail {

/// Everything but start(), connected() and executor() is called on the executor.
class pipeline : public std::enable_shared_from_this<pipeline>, private hiredis_adapter::events {
public:
    /// `counters`: shared with other pipelines (a cluster's nodes), or null for its own.
    pipeline(const boost::asio::any_io_executor& ex, connection_config cfg,
             std::shared_ptr<link_counters> counters = nullptr);
    // Reached only when nothing runs any more (the io_context is being destroyed): the
    // handlers are dropped, not posted.
    ~pipeline();
    pipeline(const pipeline&) = delete;
    pipeline& operator=(const pipeline&) = delete;

    /// Starts connecting; call once, on the executor.
    void start();

    /// A user's command: refused at once when closed, not sendable (empty, or a push
    /// command whose replies would break the order) or without a link.
    void exec(std::vector<std::string> argv, std::shared_ptr<pending_op> op);

    /// Why a command could not be sent now (closed, or no link and no name resolving).
    std::optional<error> refusal() const noexcept;

    /// An internal command: `f(error_code, reply)` runs on the executor, posted. It should
    /// hold the pipeline weakly: it sits in the pipeline's own queue.
    template <class F>
    void submit_internal(std::vector<std::string> argv, F&& f)
    {
        submit(std::move(argv), pending_op::start(exec_handler(std::forward<F>(f)), ex_));
    }

    /// Pending and later operations complete with error::closed; no reconnection.
    void close();

    /// The io_context is going away: drop what is queued without running it, as Asio does
    /// with its own operations. Queued handlers may own the connection (a coroutine frame
    /// holding it): dropping them here is what breaks such cycles.
    void shutdown();

    /// From any thread.
    bool connected() const noexcept { return connected_.load(std::memory_order_relaxed); }
    /// From any thread.
    link_stats stats() const noexcept { return counters_->snapshot(); }
    const boost::asio::any_io_executor& executor() const noexcept { return ex_; }

private:
    enum class state { backoff, connecting, connected, closed };

    // While the host name resolves (or the master is discovered) there is no link to queue
    // on: commands wait here (at most connect_timeout), in order, and are sent or failed
    // once it is known.
    struct held_command {
        std::vector<std::string> argv;
        std::shared_ptr<pending_op> op;
    };

    // Sends `argv` (or holds it while the host name resolves or the master is discovered);
    // its reply completes `op`. An op done meanwhile (cancelled while held) is not sent.
    void submit(std::vector<std::string> argv, std::shared_ptr<pending_op> op);
    void release_held();
    void arm_cmd_timer();
    void on_cmd_timer();
    void connect();
    void discover();
    void cancel_discovery();
    void connect_to(const std::string& address, std::uint16_t port);
    void on_handshake(std::uint64_t gen, boost::system::error_code ec, const reply& r, bool last);
    void arm_connect_timeout();
    void free_link(error e);
    void reset_link();
    void schedule_reconnect();
    void link_down() noexcept;
    void on_switch_announced(const master_switch& m);

    // hiredis_adapter::events
    void on_reply(raw_reply r) override;
    void on_cleanup() override;
    void on_link_lost() override;

    boost::asio::any_io_executor ex_;
    connection_config cfg_;
    boost::asio::ip::tcp::resolver resolver_;
    std::shared_ptr<sentinel_impl> sentinel_;   // Sentinels configured: the master is asked of them
    std::shared_ptr<link_counters> counters_;
    std::shared_ptr<boost::asio::cancellation_signal> discovery_;   // of the discovery in progress
    std::shared_ptr<sentinel_watch> watch_;   // Sentinels configured: their +switch-master
    std::optional<sentinel_address> master_;  // Sentinels configured: the master linked to
    boost::asio::steady_timer cmd_timer_;
    boost::asio::steady_timer link_timer_;   // connect timeout, then reconnection backoff
    detail::backoff backoff_;
    reply_queue<std::shared_ptr<pending_op>> queue_;
    std::vector<held_command> held_;

    std::uint64_t gen_ = 0;   // link generation: handlers of an older attempt do nothing
    std::uint64_t backoff_seq_ = 0;
    state state_ = state::backoff;
    std::atomic<bool> connected_{false};
    bool cmd_timer_armed_ = false;
    bool destroying_ = false;
    bool resolving_ = false;   // the host name or the master is being found: commands are held
    error link_error_ = error::backend_unavailable;
    // Last: destroyed first, while everything its callbacks could touch still exists.
    hiredis_adapter link_;
};

} // namespace sluice::redis::detail
