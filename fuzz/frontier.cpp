// fuzz-covers: examples/crawler/frontier.hpp
// The crawler's frontier as a crawled site drives it: links to any of a few URLs, and
// redirects between them in any order, so that chains join and loops close in every way.
// Checked against a plain model (a map of each URL's first redirect, walked from every URL
// each step): a redirect closes a loop exactly when the URL it leads to comes back to the
// one redirecting, and then names that loop in order; it leads into a loop exactly when
// its chain ends in one found before; the URLs lost are those whose chains now end in a
// loop that did not before; a URL is seen once recorded, never before; and no host gets
// more pages than its bound, nor all of them more than --max-pages.
//
// Input: --max-pages (0..31) and the bound per host (0..7), then steps: a byte whose low
// bit chooses a link (host, target) or a redirect (from, to), URLs one byte each (4 hosts
// of 16 targets).
#include "fuzz.hpp"

#include "../examples/crawler/frontier.hpp"

#include <map>
#include <set>
#include <string>
#include <vector>

using crawl::frontier_book;
using kind = frontier_book::redirect_result::kind;

namespace {

std::string key(std::uint8_t b) { return "h" + std::to_string(b >> 4 & 3) + "/" + std::to_string(b & 15); }

struct model {
    std::map<std::string, std::string> next;

    // Whether x's chain of redirects ends in a loop.
    bool looped(const std::string& x) const
    {
        std::set<std::string> passed;
        for (std::string at = x;;) {
            if (!passed.insert(at).second) return true;
            auto it = next.find(at);
            if (it == next.end()) return false;
            at = it->second;
        }
    }

    std::uint64_t looped_count(const std::set<std::string>& urls) const
    {
        std::uint64_t n = 0;
        for (auto& u : urls) n += looped(u);
        return n;
    }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    const std::uint64_t max_pages = in.byte() & 31;
    const std::uint64_t per_host = in.byte() & 7;
    frontier_book book(max_pages, per_host);
    model m;
    std::set<std::string> urls, recorded;
    std::map<std::string, std::uint64_t> pages, over;
    std::uint64_t admitted = 0, over_all = 0;

    for (int step = 0; step < 256 && !in.empty(); ++step) {
        const std::uint8_t op = in.byte();
        if ((op & 1) == 0) {   // a link
            const std::string host = "h" + std::to_string(op >> 1 & 3);
            const std::string k = key(static_cast<std::uint8_t>((op >> 1 & 3) << 4 | (op >> 3 & 15)));
            FUZZ_CHECK(book.seen(k) == recorded.count(k) > 0);
            if (book.seen(k)) continue;
            const auto a = book.place(host);
            if (max_pages > 0 && admitted >= max_pages) {
                FUZZ_CHECK(a == frontier_book::admit::over_max_pages);
            } else if (per_host > 0 && pages[host] >= per_host) {
                FUZZ_CHECK(a == frontier_book::admit::over_host_bound);
                ++over[host];
                ++over_all;
            } else {
                FUZZ_CHECK(a == frontier_book::admit::fetch);
                ++pages[host];
                ++admitted;
                book.record(k);
                recorded.insert(k);
            }
            FUZZ_CHECK(book.over_bound(host) == over[host]);
            FUZZ_CHECK(book.over_bound() == over_all);
            FUZZ_CHECK(book.admitted() == admitted);
            continue;
        }
        const std::string from = key(in.byte()), to = key(in.byte());
        urls.insert(from);
        urls.insert(to);
        const std::uint64_t before = m.looped_count(urls);
        const bool had = m.next.count(from) > 0;
        const bool into = !had && m.looped(to);
        if (!had) m.next[from] = to;
        const auto r = book.redirect(from, to);
        const std::uint64_t after = m.looped_count(urls);
        FUZZ_CHECK(r.lost == after - before);
        FUZZ_CHECK(book.looped() == after);
        if (had) {
            FUZZ_CHECK(r.what == kind::follow && r.lost == 0);
        } else if (into) {
            FUZZ_CHECK(r.what == kind::into_loop);
        } else if (m.looped(from)) {
            FUZZ_CHECK(r.what == kind::loop);
            std::vector<std::string> cycle;
            for (std::string at = to; cycle.size() <= urls.size(); at = m.next.at(at)) {
                cycle.push_back(at);
                if (at == from) break;
            }
            FUZZ_CHECK(r.cycle == cycle);
        } else {
            FUZZ_CHECK(r.what == kind::follow && r.lost == 0 && r.cycle.empty());
        }
        FUZZ_CHECK(!book.seen(to) || recorded.count(to) > 0);
    }
    return 0;
}
