// Test fixtures that run their own redis-server processes on 127.0.0.1 (free ports,
// retried on clash) and stop them by pid, also when a test fails. Every wait is bounded.
//
//   sluice_test::redis_server srv;          // started, answers PING
//   auto cfg = srv.config();                // a connection_config for it
//   srv.command({"SET", "k", "v"});         // a synchronous command (hiredis, blocking)
//   srv.restart(); srv.kill(); srv.pause(); srv.resume();
//   sluice_test::redis_server s({"--sentinel"}, "sentinel monitor ...\n");   // a Sentinel
//
//   sluice_test::redis_cluster cl;          // 3 masters, cluster_state:ok
//
// Servers are started from the calling thread with PR_SET_PDEATHSIG, so they also die if
// the test process crashes; start and restart them from the main thread.
#pragma once

#include <sluice/limiter_stats.hpp>
#include <sluice/redis/connection_config.hpp>
#include <sluice/redis/reply.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <hiredis/hiredis.h>

#include <doctest/doctest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rng.hpp"

namespace sluice_test {

/// Runs `io` for `d` (its handlers, then waiting until d has passed). Not
/// io_context::run_for nor run_one_for: with Boost 1.81's io_uring backend they submit a
/// kernel timeout that names a variable on their stack, and the completion of its removal
/// can come back later carrying a stale pointer (the removal's submission does not set its
/// user data), which Asio then takes for an I/O object: a write into a dead stack frame
/// once the ring has wrapped (docs/guide.md, io_uring). A timer and run() submit nothing
/// of the kind.
inline void run_slice(boost::asio::io_context& io, std::chrono::nanoseconds d)
{
    boost::asio::steady_timer end(io, d);
    end.async_wait([&io](const boost::system::error_code&) { io.stop(); });
    io.restart();
    io.run();
    io.restart();
}

/// A Redis limiter's decisions so far: requests admitted or timed out, tries admitted or
/// refused (errors are not decisions).
inline std::uint64_t decisions(const sluice::limiter_stats& s)
{
    return s.admitted + s.timed_out + s.try_admitted + s.try_refused;
}

/// Bounded polling: true as soon as pred() holds, false after `limit`.
template <class Pred>
bool wait_until(Pred pred, std::chrono::milliseconds limit,
                std::chrono::milliseconds step = std::chrono::milliseconds(20))
{
    auto end = std::chrono::steady_clock::now() + limit;
    for (;;) {
        if (pred()) return true;
        if (std::chrono::steady_clock::now() >= end) return false;
        std::this_thread::sleep_for(step);
    }
}

/// True if a TCP listener could bind 127.0.0.1:port right now.
inline bool port_free(std::uint16_t port)
{
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    return ok;
}

/// A port in [20000, 45000) that is free, and whose cluster bus port (+10000) is too.
inline std::uint16_t pick_port()
{
    static sluice_test::rng rng = sluice_test::rng::per_process();
    for (int i = 0; i < 200; ++i) {
        auto p = static_cast<std::uint16_t>(rng.in(20000, 44999));
        if (port_free(p) && port_free(static_cast<std::uint16_t>(p + 10000))) return p;
    }
    throw std::runtime_error("no free port on 127.0.0.1");
}

/// One synchronous command over a short-lived blocking hiredis connection (setup and
/// assertions only). A nil reply if the server cannot be reached.
inline sluice::redis::reply sync_command(std::uint16_t port, const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout = std::chrono::milliseconds(2000))
{
    sluice::redis::reply out;
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return out;
    if (c->err) {
        redisFree(c);
        return out;
    }
    redisSetTimeout(c, tv);
    std::vector<const char*> ptrs;
    std::vector<std::size_t> lens;
    for (const auto& a : argv) {
        ptrs.push_back(a.data());
        lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(
        redisCommandArgv(c, static_cast<int>(argv.size()), ptrs.data(), lens.data()));
    if (r) {
        struct conv {
            static sluice::redis::reply f(const redisReply* r)
            {
                sluice::redis::reply o;
                using k = sluice::redis::reply::kind;
                switch (r->type) {
                case REDIS_REPLY_STRING: o.type = k::string; o.str.assign(r->str, r->len); break;
                case REDIS_REPLY_STATUS: o.type = k::status; o.str.assign(r->str, r->len); break;
                case REDIS_REPLY_ERROR: o.type = k::error; o.str.assign(r->str, r->len); break;
                case REDIS_REPLY_INTEGER: o.type = k::integer; o.integer = r->integer; break;
                case REDIS_REPLY_ARRAY:
                    o.type = k::array;
                    for (std::size_t i = 0; i < r->elements; ++i) o.elements.push_back(f(r->element[i]));
                    break;
                default: break;
                }
                return o;
            }
        };
        out = conv::f(r);
        freeReplyObject(r);
    }
    redisFree(c);
    return out;
}

/// A redis-server child process on 127.0.0.1.
/// Starts `args` (redis-server and its arguments) with its output to /dev/null and waits
/// up to 10 s for an answer to PING on `port` (any answer: NOAUTH with --requirepass too).
/// The pid once it answers; -1, with the process gone, when it died (its port taken
/// meanwhile?) or never answered. The child dies with this process.
inline pid_t start_redis_process(std::vector<std::string> args, std::uint16_t port)
{
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        // Only async-signal-safe calls between fork and exec.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        // None of the test's descriptors: a server holding a copy of a socket keeps it
        // open when the test closes it (no FIN, no RST reaches the peer). hiredis opens
        // its sockets without FD_CLOEXEC.
        if (::close_range(3, ~0u, 0) != 0)
            for (int fd = 3; fd < 4096; ++fd) ::close(fd);
        int devnull = ::open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            ::dup2(devnull, 0);
            ::dup2(devnull, 1);
            ::dup2(devnull, 2);
        }
        ::execvp(argv[0], argv.data());
        ::_exit(127);
    }
    bool died = false;
    bool up = wait_until(
        [&] {
            if (::waitpid(pid, nullptr, WNOHANG) == pid) return died = true;
            auto r = sync_command(port, {"PING"}, std::chrono::milliseconds(200));
            return r.type != sluice::redis::reply::kind::nil;
        },
        std::chrono::milliseconds(10000));
    if (up && !died) return pid;
    if (!died) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
    }
    return -1;
}

class redis_server {
public:
    /// `conf`, when not empty: the text of a configuration file given first, written anew
    /// at every start (Sentinel needs one, and rewrites it); `extra_args` come last.
    explicit redis_server(std::vector<std::string> extra_args = {}, std::string conf = {})
        : extra_(std::move(extra_args)), conf_(std::move(conf))
    {
        char tmpl[] = "/tmp/sluice-redis-XXXXXX";
        if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
        for (int attempt = 0;; ++attempt) {
            port_ = pick_port();
            if (try_start()) break;
            if (attempt == 5) {
                auto text = log();
                cleanup_dir();
                if (text.size() > 2000) text = text.substr(text.size() - 2000);
                throw std::runtime_error("redis-server did not start; its log:\n" + text);
            }
        }
    }

    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    ~redis_server()
    {
        stop();
        cleanup_dir();
    }

    std::uint16_t port() const noexcept { return port_; }
    pid_t pid() const noexcept { return pid_; }
    bool running() const noexcept { return pid_ > 0; }

    sluice::redis::connection_config config() const
    {
        sluice::redis::connection_config c;
        c.host = "127.0.0.1";
        c.port = port_;
        return c;
    }

    sluice::redis::reply command(const std::vector<std::string>& argv) const
    {
        return sync_command(port_, argv);
    }

    /// SIGTERM, then SIGKILL after 5 s; reaps the child.
    void stop()
    {
        if (pid_ <= 0) return;
        resume();
        ::kill(pid_, SIGTERM);
        if (!reap(std::chrono::milliseconds(5000))) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        pid_ = -1;
    }

    /// Dies at once (SIGKILL), as a crash would; not restarted.
    void kill()
    {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        pid_ = -1;
    }

    /// Stops and starts again on the same port (an empty data set, an empty script cache).
    void restart()
    {
        stop();
        if (!try_start()) throw std::runtime_error("redis-server did not restart");
    }

    /// Start again after kill() or stop(), on the same port.
    void start()
    {
        if (pid_ > 0) return;
        if (!try_start()) throw std::runtime_error("redis-server did not start again");
    }

    /// SIGSTOP / SIGCONT: a server that accepts nothing and answers nothing meanwhile.
    void pause()
    {
        if (pid_ > 0 && !paused_) {
            ::kill(pid_, SIGSTOP);
            paused_ = true;
        }
    }
    void resume()
    {
        if (pid_ > 0 && paused_) {
            ::kill(pid_, SIGCONT);
            paused_ = false;
        }
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
    bool try_start()
    {
        std::vector<std::string> args{"redis-server"};
        if (!conf_.empty()) {
            const std::string file = dir_ + "/redis.conf";
            FILE* f = std::fopen(file.c_str(), "w");
            if (!f) throw std::runtime_error("cannot write " + file);
            std::fwrite(conf_.data(), 1, conf_.size(), f);
            std::fclose(f);
            args.push_back(file);
        }
        args.insert(args.end(), {"--port", std::to_string(port_), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--daemonize", "no", "--dir", dir_,
                                 "--logfile", dir_ + "/log"});
        args.insert(args.end(), extra_.begin(), extra_.end());
        pid_ = start_redis_process(std::move(args), port_);
        paused_ = false;
        return pid_ > 0;
    }

    bool reap(std::chrono::milliseconds limit)
    {
        return wait_until([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, limit,
                          std::chrono::milliseconds(5));
    }

    void cleanup_dir()
    {
        std::error_code ec;
        if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
    }

    std::vector<std::string> extra_;
    std::string conf_;
    std::string dir_;
    std::uint16_t port_ = 0;
    pid_t pid_ = -1;
    bool paused_ = false;
};

/// Three redis-server masters joined into one Redis Cluster (16384 slots spread evenly),
/// each with its own config epoch (1, 2, 3, as redis-cli --cluster create gives them),
/// ready once every node reports cluster_state:ok and knows all three epochs.
class redis_cluster {
public:
    redis_cluster()
    {
        for (int i = 0; i < 3; ++i)
            nodes_.emplace_back(std::make_unique<redis_server>(std::vector<std::string>{
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "5000"}));
        // Slots by hand (ADDSLOTSRANGE is Redis 7), then MEET: no redis-cli needed.
        const int ranges[3][2] = {{0, 5460}, {5461, 10922}, {10923, 16383}};
        for (int i = 0; i < 3; ++i) {
            std::vector<std::string> cmd{"CLUSTER", "ADDSLOTSRANGE", std::to_string(ranges[i][0]),
                                         std::to_string(ranges[i][1])};
            auto r = nodes_[i]->command(cmd);
            if (r.type != sluice::redis::reply::kind::status)
                throw std::runtime_error("CLUSTER ADDSLOTSRANGE failed: " + r.str);
        }
        // Distinct epochs before the nodes meet. Left at 0, the nodes settle their epoch
        // collisions by gossip for seconds after cluster_state:ok; a node bumping its epoch
        // then, while a test moves a slot, won back the slot it had just given away (its
        // stale claim outranked the importer's), and the two nodes sent each other's
        // MOVED for good (seen in CI: MOVED back to node 0 after the hop limit).
        for (int i = 0; i < 3; ++i) {
            auto r = nodes_[i]->command({"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
            if (r.type != sluice::redis::reply::kind::status)
                throw std::runtime_error("CLUSTER SET-CONFIG-EPOCH failed: " + r.str);
        }
        for (int i = 1; i < 3; ++i)
            nodes_[i]->command({"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[0]->port())});
        bool ok = wait_until(
            [&] {
                for (auto& n : nodes_) {
                    auto r = n->command({"CLUSTER", "INFO"});
                    if (r.str.find("cluster_state:ok") == std::string::npos) return false;
                    if (r.str.find("cluster_known_nodes:3") == std::string::npos) return false;
                    if (r.str.find("cluster_current_epoch:3") == std::string::npos) return false;
                }
                return true;
            },
            std::chrono::milliseconds(30000), std::chrono::milliseconds(50));
        if (!ok) throw std::runtime_error("the cluster did not reach cluster_state:ok in 30 s");
    }

    redis_server& node(std::size_t i) { return *nodes_.at(i); }
    std::size_t size() const noexcept { return nodes_.size(); }

    /// A seed configuration (the first node).
    sluice::redis::connection_config config() const { return nodes_.front()->config(); }

    /// The node id (CLUSTER MYID) of node i.
    std::string node_id(std::size_t i) const { return nodes_.at(i)->command({"CLUSTER", "MYID"}).str; }

    /// Which node serves `slot` according to node 0's view; -1 if none.
    int owner_of(int slot) const
    {
        auto r = nodes_.front()->command({"CLUSTER", "SLOTS"});
        for (const auto& range : r.elements) {
            if (range.elements.size() < 3) continue;
            if (slot >= range.elements[0].integer && slot <= range.elements[1].integer) {
                auto port = range.elements[2].elements.at(1).integer;
                for (std::size_t i = 0; i < nodes_.size(); ++i)
                    if (nodes_[i]->port() == port) return static_cast<int>(i);
            }
        }
        return -1;
    }

private:
    std::vector<std::unique_ptr<redis_server>> nodes_;
};

} // namespace sluice_test
