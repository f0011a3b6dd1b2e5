// Which URLs of the crawled hosts are fetched, and where their redirects lead. Sans-io: URLs
// are keys (authority and target) the crawler makes; it does the fetching.
//
// Each URL is fetched once, at most --max-pages in all and --max-pages-per-host of one host:
// a site can make pages without end (a page whose links change on every fetch), so the links
// to a host's pages past its bound are counted, not followed. Only the URLs fetched are
// recorded: a host's take at most its bound, however many links its pages hold.
//
// A redirect is an edge from the URL fetched to the URL it names. A URL is fetched once, so
// it has one edge at most: the URLs a chain of redirects passes end in a page, or come back
// to one of their own, a loop (a page that redirects to itself is the shortest), in which no
// page is ever reached. The URLs of a loop, and those whose redirects lead into it, are
// pages lost. The chains are kept as union-find trees rooted at their ends: a loop is found
// when the edge that closes it is added (the URL it leads to ends at the URL redirecting),
// at a near-constant cost per redirect however the chains join.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace crawl {

class frontier_book {
public:
    /// 0: no bound.
    frontier_book(std::uint64_t max_pages, std::uint64_t max_pages_per_host)
        : max_pages_(max_pages), max_per_host_(max_pages_per_host)
    {
    }

    /// Whether the URL `key` was recorded (to be fetched, or fetched).
    bool seen(const std::string& key) const
    {
        auto it = index_.find(key);
        return it != index_.end() && nodes_[it->second].seen;
    }

    /// Records the URL `key`, to be fetched: seen() says so from now on.
    void record(const std::string& key) { nodes_[node(key)].seen = true; }

    enum class admit {
        fetch,             // within the bounds: fetch it
        over_max_pages,    // past --max-pages: not fetched, as asked
        over_host_bound,   // past the host's bound: not fetched, counted (each time)
    };

    /// A place for a new page of `host` (one not seen()).
    admit place(const std::string& host)
    {
        if (max_pages_ > 0 && admitted_ >= max_pages_) return admit::over_max_pages;
        auto& c = hosts_[host];
        if (max_per_host_ > 0 && c.pages >= max_per_host_) {
            ++c.over;
            ++over_;
            return admit::over_host_bound;
        }
        ++c.pages;
        ++admitted_;
        return admit::fetch;
    }

    /// Links to pages of `host` found past its bound (all hosts': over_bound()).
    std::uint64_t over_bound(const std::string& host) const
    {
        auto it = hosts_.find(host);
        return it == hosts_.end() ? 0 : it->second.over;
    }
    std::uint64_t over_bound() const noexcept { return over_; }
    /// Pages that took a place.
    std::uint64_t admitted() const noexcept { return admitted_; }

    struct redirect_result {
        enum class kind {
            follow,      // to a URL that may still lead to a page: fetch it if it is new
            loop,        // closes a loop: `cycle` names it
            into_loop,   // to a URL whose redirects end in a loop found before
        } what = kind::follow;
        std::vector<std::string> cycle;   // loop: its URLs, from the one redirected to round to `from`
        std::uint64_t lost = 0;           // URLs found now to end in a loop: `from` and all that led to it
    };

    /// The URL `from`, fetched, redirected to `to`.
    redirect_result redirect(const std::string& from, const std::string& to)
    {
        redirect_result r;
        const auto f = node(from);
        const auto t = node(to);
        if (nodes_[f].next != none) return r;   // fetched twice: the first answer counts
        const auto end = root(t);
        if (nodes_[end].looped) {
            r.what = redirect_result::kind::into_loop;
        } else if (end == f) {
            r.what = redirect_result::kind::loop;
            for (auto i = t; i != f; i = nodes_[i].next) r.cycle.push_back(*keys_[i]);
            r.cycle.push_back(from);
            nodes_[f].looped = true;
        }
        nodes_[f].next = t;
        if (r.what == redirect_result::kind::loop) {
            r.lost = nodes_[f].size;   // f stays the root: the loop's URLs and all leading in
        } else {
            nodes_[f].parent = end;
            nodes_[end].size += nodes_[f].size;
            if (r.what == redirect_result::kind::into_loop) r.lost = nodes_[f].size;
        }
        looped_ += r.lost;
        return r;
    }

    /// URLs whose redirects end in a loop.
    std::uint64_t looped() const noexcept { return looped_; }

private:
    static constexpr std::uint32_t none = UINT32_MAX;

    struct node_state {
        std::uint32_t parent;        // towards the end of the chain (itself at the end)
        std::uint32_t next = none;   // the URL it redirected to
        std::uint64_t size = 1;      // at an end: the URLs whose chains end here
        bool seen = false;
        bool looped = false;         // at an end: the chain comes back to it
    };

    std::uint32_t node(const std::string& key)
    {
        auto [it, added] = index_.try_emplace(key, static_cast<std::uint32_t>(nodes_.size()));
        if (added) {
            nodes_.push_back(node_state{it->second});
            keys_.push_back(&it->first);   // a node's key stays where it is (unordered_map)
        }
        return it->second;
    }

    // The end of i's chain, halving the path on the way.
    std::uint32_t root(std::uint32_t i)
    {
        while (nodes_[i].parent != i) {
            nodes_[i].parent = nodes_[nodes_[i].parent].parent;
            i = nodes_[i].parent;
        }
        return i;
    }

    struct host_count {
        std::uint64_t pages = 0, over = 0;
    };

    std::uint64_t max_pages_, max_per_host_;
    std::unordered_map<std::string, std::uint32_t> index_;
    std::vector<node_state> nodes_;
    std::vector<const std::string*> keys_;
    std::unordered_map<std::string, host_count> hosts_;
    std::uint64_t admitted_ = 0, over_ = 0, looped_ = 0;
};

} // namespace crawl
