// A Redis Sentinel deployment for tests, on 127.0.0.1: one master, one replica
// (--replicaof) and three Sentinels (redis-server <conf> --sentinel) on free ports, with
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
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice_test {

/// The value of `field` in a flat [field, value, ...] reply (SENTINEL MASTER); "" if none.
inline std::string field_of(const sluice::redis::reply& r, const std::string& field)
{
    for (std::size_t i = 0; i + 1 < r.elements.size(); i += 2)
        if (r.elements[i].str == field) return r.elements[i + 1].str;
    return {};
}

/// One `redis-server <dir>/sentinel.conf --sentinel` child process. Sentinel rewrites its
/// configuration file, so each has a directory of its own.
class sentinel_process {
public:
    /// `monitor`: the lines after `port`, `bind`, `dir` and `logfile`.
    explicit sentinel_process(const std::string& monitor)
    {
        char tmpl[] = "/tmp/sluice-sentinel-XXXXXX";
        if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
        for (int attempt = 0;; ++attempt) {
            port_ = pick_port();
            write_conf(monitor);
            if (try_start()) break;
            if (attempt == 5) {
                std::error_code ec;
                std::filesystem::remove_all(dir_, ec);
                throw std::runtime_error("redis-server --sentinel did not start");
            }
        }
    }

    sentinel_process(const sentinel_process&) = delete;
    sentinel_process& operator=(const sentinel_process&) = delete;

    ~sentinel_process()
    {
        stop();
        std::error_code ec;
        std::filesystem::remove_all(dir_, ec);
    }

    std::uint16_t port() const noexcept { return port_; }

    /// SIGTERM, then SIGKILL after 5 s; reaps the child.
    void stop()
    {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGTERM);
        bool gone = wait_until([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; },
                               std::chrono::milliseconds(5000), std::chrono::milliseconds(5));
        if (!gone) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        pid_ = -1;
    }

    sluice::redis::reply command(const std::vector<std::string>& argv) const
    {
        return sync_command(port_, argv);
    }

    std::string log() const
    {
        std::string out;
        if (FILE* f = std::fopen((dir_ + "/log").c_str(), "r")) {
            char buf[4096];
            std::size_t n;
            while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
            std::fclose(f);
        }
        return out;
    }

private:
    void write_conf(const std::string& monitor)
    {
        std::string text = "port " + std::to_string(port_) + "\nbind 127.0.0.1\ndir " + dir_
            + "\nlogfile " + dir_ + "/log\ndaemonize no\n" + monitor;
        FILE* f = std::fopen((dir_ + "/sentinel.conf").c_str(), "w");
        if (!f) throw std::runtime_error("cannot write sentinel.conf");
        std::fwrite(text.data(), 1, text.size(), f);
        std::fclose(f);
    }

    bool try_start()
    {
        std::string conf = dir_ + "/sentinel.conf";
        std::vector<std::string> args{"redis-server", conf, "--sentinel"};
        pid_ = start_redis_process(std::move(args), port_);
        return pid_ > 0;
    }

    std::string dir_;
    std::uint16_t port_ = 0;
    pid_t pid_ = -1;
};

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
        for (int i = 0; i < 3; ++i) sentinels_.push_back(std::make_unique<sentinel_process>(monitor));

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
    sentinel_process& sentinel(std::size_t i) { return *sentinels_.at(i); }

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
    std::vector<std::unique_ptr<sentinel_process>> sentinels_;
};

} // namespace sluice_test
