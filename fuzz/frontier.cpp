// fuzz-covers: examples/crawler/frontier.hpp
// The crawler's frontier as a crawled site drives it: links to any of a few URLs, and
// redirects between them in any order, so that chains join and loops close in every way.
// Checked against a plain model (each URL's first redirect, walked from every URL at each
// step): a redirect closes a loop exactly when the URL it leads to comes back to the
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

#include <array>
#include <map>
#include <set>
#include <string>
#include <vector>

using crawl::frontier_book;
using kind = frontier_book::redirect_result::kind;

namespace {

// URL number b: one of 4 hosts, one of 16 targets.
std::uint8_t url_of(std::uint8_t b) { return b & 63; }
std::string key(std::uint8_t u) { return "h" + std::to_string(u >> 4) + "/" + std::to_string(u & 15); }

struct model {
    std::array<int, 64> next;   // each URL's first redirect, -1 none
    std::uint64_t named = 0;    // the URLs named so far, a bit each

    model() { next.fill(-1); }

    // Whether u's chain of redirects ends in a loop.
    bool looped(int u) const
    {
        std::uint64_t passed = 0;
        for (; u >= 0; u = next[static_cast<std::size_t>(u)]) {
            if (passed >> u & 1) return true;
            passed |= std::uint64_t{1} << u;
        }
        return false;
    }

    std::uint64_t looped_count() const
    {
        std::uint64_t n = 0;
        for (int u = 0; u < 64; ++u) n += (named >> u & 1) && looped(u);
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
    std::set<std::string> recorded;
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
        const std::uint8_t f = url_of(in.byte()), t = url_of(in.byte());
        const std::string from = key(f), to = key(t);
        m.named |= std::uint64_t{1} << f | std::uint64_t{1} << t;
        const std::uint64_t before = m.looped_count();
        const bool had = m.next[f] >= 0;
        const bool into = !had && m.looped(t);
        if (!had) m.next[f] = t;
        const auto r = book.redirect(from, to);
        const std::uint64_t after = m.looped_count();
        FUZZ_CHECK(r.lost == after - before);
        FUZZ_CHECK(book.looped() == after);
        if (had) {
            FUZZ_CHECK(r.what == kind::follow && r.lost == 0);
        } else if (into) {
            FUZZ_CHECK(r.what == kind::into_loop);
        } else if (m.looped(f)) {
            FUZZ_CHECK(r.what == kind::loop);
            std::vector<std::string> cycle;
            for (int at = t; cycle.size() <= 64; at = m.next[static_cast<std::size_t>(at)]) {
                cycle.push_back(key(static_cast<std::uint8_t>(at)));
                if (at == f) break;
            }
            FUZZ_CHECK(r.cycle == cycle);
        } else {
            FUZZ_CHECK(r.what == kind::follow && r.lost == 0 && r.cycle.empty());
        }
        FUZZ_CHECK(!book.seen(to) || recorded.count(to) > 0);
    }
    return 0;
}
