// A Redis Sentinel deployment for tests, on 127.0.0.1: one master, one replica
// (--replicaof) and three Sentinels (redis_server with --sentinel) on free ports, with
// short failure detection. Every process is stopped by its pid, also when a test fails;
// every wait is bounded.
//
//   sluice_test::sentinel_group g;            // ready: replica synced, Sentinels know all
//   auto cfg = g.config();                    // a connection_config that asks the Sentinels
//   g.master().kill();                        // SIGKILL: the Sentinels fail over
//   g.master_port_by_sentinels();             // what the Sentinels name now (0 if none)
#pragma once

#include "redis_support.hpp"

#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/sentinel_config.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace sluice_test {

/// The value of `field` in a flat [field, value, ...] reply (SENTINEL MASTER); "" if none.
inline std::string field_of(const sluice::redis::reply& r, const std::string& field)
{
    for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2)
        if (r.elements[i].str == field) return r.elements[i + 1].str;
    return {};
}

/// Timing of the Sentinels' failure detection and failover.
struct sentinel_timing {
    /// `sentinel down-after-milliseconds`: a master silent this long is subjectively down.
    int down_after_ms = 500;
    /// `sentinel failover-timeout`: also the pause before another election when one
    /// failed (twice this), so kept short.
    int failover_timeout_ms = 2000;
};

/// A master, a replica of it and three Sentinels monitoring it as `name` (quorum 2).
class sentinel_group {
public:
    explicit sentinel_group(std::string name = "mymaster", sentinel_timing t = {})
        : name_(std::move(name))
    {
        master_ = std::make_unique<redis_server>();
        replica_ = std::make_unique<redis_server>(std::vector<std::string>{
            "--replicaof", "127.0.0.1", std::to_string(master_->port())});
        bool synced = wait_until(
            [&] {
                return replica_->command({"INFO", "replication"}).str.find("master_link_status:up")
                    != std::string::npos;
            },
            std::chrono::milliseconds(10000), std::chrono::milliseconds(20));
        if (!synced) throw std::runtime_error("the replica did not sync with the master");

        const std::string monitor = "sentinel monitor " + name_ + " 127.0.0.1 "
            + std::to_string(master_->port()) + " 2\nsentinel down-after-milliseconds " + name_
            + " " + std::to_string(t.down_after_ms) + "\nsentinel failover-timeout " + name_ + " "
            + std::to_string(t.failover_timeout_ms) + "\nsentinel parallel-syncs " + name_ + " 1\n";
        // `redis-server <dir>/redis.conf --sentinel`: Sentinel rewrites its file, so each
        // has its own.
        for (int i = 0; i < 3; ++i)
            sentinels_.push_back(std::make_unique<redis_server>(std::vector<std::string>{"--sentinel"}, monitor));

        // Ready once every Sentinel knows the replica and the two other Sentinels (they
        // find each other through hello messages on the master, every 2 s): without them
        // there is no quorum and no failover.
        bool ready = wait_until(
            [&] {
                for (auto& s : sentinels_) {
                    auto r = s->command({"SENTINEL", "MASTER", name_});
                    if (field_of(r, "num-other-sentinels") != "2" || field_of(r, "num-slaves") != "1")
                        return false;
                }
                return true;
            },
            std::chrono::milliseconds(20000), std::chrono::milliseconds(50));
        if (!ready) throw std::runtime_error("the Sentinels did not discover each other in 20 s");
    }

    const std::string& name() const noexcept { return name_; }
    /// The first master (a replica after a failover, or dead).
    redis_server& master() { return *master_; }
    /// The first replica (the master after a failover).
    redis_server& replica() { return *replica_; }
    redis_server& sentinel(std::size_t i) { return *sentinels_.at(i); }

    /// The three Sentinels, in order.
    std::vector<sluice::redis::sentinel_address> addresses() const
    {
        std::vector<sluice::redis::sentinel_address> out;
        for (auto& s : sentinels_) out.push_back({"127.0.0.1", s->port()});
        return out;
    }

    sluice::redis::sentinel_config sentinel_config() const
    {
        sluice::redis::sentinel_config c;
        c.sentinels = addresses();
        c.master_name = name_;
        return c;
    }

    /// A connection_config that finds the master through the Sentinels (its host and port
    /// point nowhere useful, to show they are not used).
    sluice::redis::connection_config config() const
    {
        sluice::redis::connection_config c;
        c.host = "127.0.0.1";
        c.port = 1;
        c.sentinel = sentinel_config();
        return c;
    }

    /// The master's port as Sentinel `i` names it now; 0 if it names none.
    std::uint16_t master_port_by_sentinels(std::size_t i = 0) const
    {
        auto r = sync_command(sentinels_.at(i)->port(), {"SENTINEL", "get-master-addr-by-name", name_},
                              std::chrono::milliseconds(500));
        if (r.elements.size() != 2) return 0;
        return static_cast<std::uint16_t>(std::stoi(r.elements[1].str));
    }

private:
    std::string name_;
    std::unique_ptr<redis_server> master_;
    std::unique_ptr<redis_server> replica_;
    std::vector<std::unique_ptr<redis_server>> sentinels_;
};

} // namespace sluice_test
