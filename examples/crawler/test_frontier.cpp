// The crawler's frontier: each URL once, the bounds on pages (in all and per host), and the
// redirect loops, step by step as the crawler meets them.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "frontier.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using crawl::frontier_book;
using kind = frontier_book::redirect_result::kind;
using admit = frontier_book::admit;
using strings = std::vector<std::string>;

TEST_CASE("frontier: each URL once")
{
    frontier_book b(0, 0);
    CHECK_FALSE(b.seen("h/a"));
    b.record("h/a");
    CHECK(b.seen("h/a"));
    CHECK_FALSE(b.seen("h/b"));
    CHECK_FALSE(b.seen("g/a"));
    b.redirect("h/b", "h/c");   // named by a redirect: not seen until recorded
    CHECK_FALSE(b.seen("h/b"));
    CHECK_FALSE(b.seen("h/c"));
    CHECK(b.place("h") == admit::fetch);
    CHECK(b.admitted() == 1);
}

TEST_CASE("frontier: a host's bound; pages past it counted, per host; --max-pages first")
{
    frontier_book b(0, 3);
    for (int i = 0; i < 3; ++i) CHECK(b.place("h") == admit::fetch);
    CHECK(b.place("h") == admit::over_host_bound);
    CHECK(b.place("h") == admit::over_host_bound);
    CHECK(b.place("g") == admit::fetch);   // another host: its own bound
    CHECK(b.over_bound("h") == 2);
    CHECK(b.over_bound("g") == 0);
    CHECK(b.over_bound("nowhere") == 0);
    CHECK(b.over_bound() == 2);
    CHECK(b.admitted() == 4);

    frontier_book m(2, 1);
    CHECK(m.place("h") == admit::fetch);
    CHECK(m.place("h") == admit::over_host_bound);
    CHECK(m.place("g") == admit::fetch);
    CHECK(m.place("f") == admit::over_max_pages);   // not counted as past a host's bound
    CHECK(m.over_bound() == 1);
}

TEST_CASE("frontier: a page that redirects to itself is a loop of one")
{
    frontier_book b(0, 0);
    b.record("h/a");
    auto r = b.redirect("h/a", "h/a");
    CHECK(r.what == kind::loop);
    CHECK(r.cycle == strings{"h/a"});
    CHECK(r.lost == 1);
    CHECK(b.looped() == 1);
}

TEST_CASE("frontier: a loop of three is found by the redirect that closes it")
{
    frontier_book b(0, 0);
    auto r = b.redirect("h/a", "h/b");
    CHECK(r.what == kind::follow);
    CHECK_FALSE(b.seen("h/b"));   // the target is not "seen" by being named
    CHECK(b.redirect("h/b", "h/c").what == kind::follow);
    r = b.redirect("h/c", "h/a");
    CHECK(r.what == kind::loop);
    CHECK(r.cycle == strings{"h/a", "h/b", "h/c"});
    CHECK(r.lost == 3);
    // A URL redirected into it later is lost too, with those that led to it.
    CHECK(b.redirect("h/y", "h/x").what == kind::follow);
    r = b.redirect("h/x", "h/b");
    CHECK(r.what == kind::into_loop);
    CHECK(r.lost == 2);
    CHECK(b.looped() == 5);
}

TEST_CASE("frontier: URLs that led into a loop before it closed are lost with it")
{
    frontier_book b(0, 0);
    b.redirect("h/x", "h/a");   // x -> a, then a -> b -> a
    b.redirect("h/a", "h/b");
    auto r = b.redirect("h/b", "h/a");
    CHECK(r.what == kind::loop);
    CHECK(r.cycle == strings{"h/a", "h/b"});
    CHECK(r.lost == 3);
}

TEST_CASE("frontier: chains that join are no loop; each URL's first redirect counts")
{
    frontier_book b(0, 0);
    // Two URLs linked from pages redirect to each other's neighbour: a -> c, b -> c, c -> d.
    CHECK(b.redirect("h/a", "h/c").what == kind::follow);
    CHECK(b.redirect("h/b", "h/c").what == kind::follow);
    CHECK(b.redirect("h/c", "h/d").what == kind::follow);
    CHECK(b.redirect("h/e", "h/a").what == kind::follow);
    CHECK(b.looped() == 0);
    // A second answer for a URL already redirected changes nothing.
    CHECK(b.redirect("h/c", "h/a").what == kind::follow);
    CHECK(b.looped() == 0);
    // d -> e closes e -> a -> c -> d -> e; b led into it.
    auto r = b.redirect("h/d", "h/e");
    CHECK(r.what == kind::loop);
    CHECK(r.cycle == strings{"h/e", "h/a", "h/c", "h/d"});
    CHECK(r.lost == 5);
}

TEST_CASE("frontier: a long chain costs no walk of its length per redirect")
{
    // 200,000 URLs each redirecting to the next, added from the end backwards and then the
    // front: each addition finds its chain's end through the halved paths.
    frontier_book b(0, 0);
    const int n = 200'000;
    int follows = 0;
    for (int i = n - 1; i > 0; --i)
        follows += b.redirect("h/" + std::to_string(i), "h/" + std::to_string(i + 1)).what == kind::follow;
    CHECK(follows == n - 1);
    auto r = b.redirect("h/" + std::to_string(n), "h/1");
    CHECK(r.what == kind::loop);
    CHECK(r.cycle.size() == static_cast<std::size_t>(n));
    CHECK(r.lost == static_cast<std::uint64_t>(n));
}
