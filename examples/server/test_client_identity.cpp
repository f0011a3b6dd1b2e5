// Who the server takes a request's client to be (client_identity.hpp), step by step from
// the header a request carries and the peer it came from, without a socket: trusted ranges,
// X-Forwarded-For over several lines, Forwarded (RFC 7239), IPv6, garbage, long lists.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include "client_identity.hpp"

#include <boost/beast/http/fields.hpp>
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <utility>

using server_check::networks;
using server_check::proxy_header;
namespace http = boost::beast::http;

namespace {

networks nets(std::initializer_list<const char*> list)
{
    networks n;
    for (auto s : list) REQUIRE(n.add(s));
    return n;
}

boost::asio::ip::address ip(const char* s)
{
    return boost::asio::ip::make_address(s);
}

// The client of a request with `fields` (name, value; in order, repeats kept) from `peer`.
std::string client(std::initializer_list<std::pair<const char*, const char*>> fields, const char* peer,
                   const networks& trusted, proxy_header which = proxy_header::x_forwarded_for)
{
    http::request_header<> h;
    h.method(http::verb::get);
    h.target("/");
    for (auto [name, value] : fields) h.insert(name, value);
    return server_check::client_of(h, ip(peer), trusted, which).to_string();
}

} // namespace

TEST_CASE("client_identity: trusted networks")
{
    networks n;
    CHECK(n.empty());
    CHECK(n.add("127.0.0.1"));
    CHECK(n.add("10.0.0.0/8"));
    CHECK(n.add("192.168.1.128/25"));
    CHECK(n.add("fd00::/8"));
    CHECK(n.add("::1"));
    CHECK(n.add("0.0.0.0/0"));   // everything IPv4: legal, if unwise
    CHECK_FALSE(n.empty());
    for (std::string bad : {"", "localhost", "10.0.0.0/", "10.0.0.0/33", "10.0.0.1/8", "fd00::/129", "fd00::1/8",
                            "10.0.0.0/8/8", "10.0.0.0/+8", "10.0.0.0/0008", "[::1]", "fe80::1%1", "1.2.3", "01.2.3.4",
                            "1.2.3.4 ", "::ffff:10.0.0.0/8"}) {
        CAPTURE(bad);
        networks m;
        CHECK_FALSE(m.add(bad));
        CHECK(m.empty());
    }
    networks t = nets({"127.0.0.1", "10.0.0.0/8", "192.168.1.128/25", "fd00::/8", "::1"});
    CHECK(t.contains(ip("127.0.0.1")));
    CHECK_FALSE(t.contains(ip("127.0.0.2")));
    CHECK(t.contains(ip("10.255.0.1")));
    CHECK_FALSE(t.contains(ip("11.0.0.1")));
    CHECK(t.contains(ip("192.168.1.200")));
    CHECK_FALSE(t.contains(ip("192.168.1.127")));
    CHECK(t.contains(ip("fdab::7")));
    CHECK_FALSE(t.contains(ip("fe80::1")));
    CHECK(t.contains(ip("::1")));
    CHECK_FALSE(t.contains(ip("::2")));
    // An IPv4-mapped address is the IPv4 address (a dual-stack socket's peers look so).
    CHECK(t.contains(ip("::ffff:10.1.2.3")));
    CHECK_FALSE(t.contains(ip("::ffff:11.1.2.3")));
    CHECK_FALSE(t.contains(ip("::10.1.2.3")));   // IPv4-compatible is not mapped
    CHECK(nets({"::ffff:127.0.0.1"}).contains(ip("127.0.0.1")));
    CHECK(nets({"::ffff:10.0.0.0/104"}).contains(ip("10.9.9.9")));
    CHECK(nets({"0.0.0.0/0"}).contains(ip("8.8.8.8")));
    CHECK_FALSE(nets({"0.0.0.0/0"}).contains(ip("2001:db8::1")));
    CHECK(nets({"::/0"}).contains(ip("8.8.8.8")));   // every IPv6 address, mapped ones too
}

TEST_CASE("client_identity: an untrusted peer is the client, whatever it sends")
{
    const auto t = nets({"127.0.0.1"});
    CHECK(client({{"X-Forwarded-For", "1.2.3.4"}}, "127.0.0.2", t) == "127.0.0.2");
    CHECK(client({{"Forwarded", "for=1.2.3.4"}}, "127.0.0.2", t, proxy_header::forwarded) == "127.0.0.2");
    CHECK(client({}, "::ffff:192.0.2.7", t) == "192.0.2.7");   // canonical
    CHECK(client({{"X-Forwarded-For", "1.2.3.4"}}, "::1", t) == "::1");
    // From a trusted peer without the header: the peer.
    CHECK(client({}, "127.0.0.1", t) == "127.0.0.1");
    CHECK(client({{"X-Forwarded-For", ""}}, "127.0.0.1", t) == "127.0.0.1");
}

TEST_CASE("client_identity: X-Forwarded-For lines are one list, read from the right")
{
    const auto t = nets({"127.0.0.1"});
    // One line: the entry the proxy appended, not the client's forgery before it.
    CHECK(client({{"X-Forwarded-For", "6.6.6.6, 198.51.100.7"}}, "127.0.0.1", t) == "198.51.100.7");
    // The attack of the issue: the forged line first, the proxy's own line appended.
    CHECK(client({{"X-Forwarded-For", "6.6.6.6"}, {"X-Forwarded-For", "198.51.100.7"}}, "127.0.0.1", t) ==
          "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "6.6.6.6, 7.7.7.7"}, {"X-Forwarded-For", "198.51.100.7"}}, "127.0.0.1", t) ==
          "198.51.100.7");
    // Lines apart from each other, among other fields, names in any case.
    CHECK(client({{"x-forwarded-for", "6.6.6.6"}, {"Host", "h"}, {"X-FORWARDED-FOR", "198.51.100.7"}}, "127.0.0.1", t) ==
          "198.51.100.7");
    // Trusted hops are walked over, right to left, across lines.
    const auto chain = nets({"127.0.0.1", "10.0.0.0/8"});
    CHECK(client({{"X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.0.0.2"}}, "127.0.0.1", chain) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "6.6.6.6, 198.51.100.7"}, {"X-Forwarded-For", "10.0.0.2, 10.0.0.3"}}, "127.0.0.1",
                 chain) == "198.51.100.7");
    // Every hop trusted: the farthest.
    CHECK(client({{"X-Forwarded-For", "10.0.0.9, 10.0.0.2"}}, "127.0.0.1", chain) == "10.0.0.9");
    // Empty elements and lines are skipped (RFC 9110 5.6.1).
    CHECK(client({{"X-Forwarded-For", "6.6.6.6,, 198.51.100.7 ,\t"}}, "127.0.0.1", t) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "198.51.100.7"}, {"X-Forwarded-For", " , "}}, "127.0.0.1", t) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", ","}}, "127.0.0.1", t) == "127.0.0.1");
}

TEST_CASE("client_identity: IPv6 and ports in X-Forwarded-For")
{
    const auto t = nets({"127.0.0.1", "fd00::/8"});
    CHECK(client({{"X-Forwarded-For", "2001:db8::7"}}, "127.0.0.1", t) == "2001:db8::7");
    CHECK(client({{"X-Forwarded-For", "[2001:db8::7]"}}, "127.0.0.1", t) == "2001:db8::7");
    CHECK(client({{"X-Forwarded-For", "[2001:db8::7]:4711"}}, "127.0.0.1", t) == "2001:db8::7");
    CHECK(client({{"X-Forwarded-For", "2001:DB8:0:0::7"}}, "127.0.0.1", t) == "2001:db8::7");   // canonical text
    CHECK(client({{"X-Forwarded-For", "198.51.100.7:80"}}, "127.0.0.1", t) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "::ffff:198.51.100.7"}}, "127.0.0.1", t) == "198.51.100.7");
    // A trusted IPv6 proxy, and a peer on IPv6.
    CHECK(client({{"X-Forwarded-For", "198.51.100.7, fd00::2"}}, "fd00::1", t) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "198.51.100.7, [fd00::2]:443"}}, "::ffff:127.0.0.1", t) == "198.51.100.7");
}

TEST_CASE("client_identity: what names no address stops the walk at the last trusted hop")
{
    const auto t = nets({"127.0.0.1", "10.0.0.0/8"});
    for (std::string bad : {"garbage", "unknown", "_hidden", "1.2.3", "1.2.3.4.5", "01.2.3.4", "1.2.3.4:", "1.2.3.4:x",
                            "1.2.3.4:123456", "[1.2.3.4]", "[2001:db8::7", "[2001:db8::7]x", "[2001:db8::7]:",
                            "fe80::1%eth0", "fe80::1%1", "2001:db8::7:80:1:2:3:4:5", "\"1.2.3.4\"", "1.2.3.4 5.6.7.8"}) {
        CAPTURE(bad);
        // The forged value left of it never counts.
        const std::string list = "6.6.6.6, " + bad;
        CHECK(client({{"X-Forwarded-For", list.c_str()}}, "127.0.0.1", t) == "127.0.0.1");
        const std::string behind = "6.6.6.6, " + bad + ", 10.0.0.2";
        CHECK(client({{"X-Forwarded-For", behind.c_str()}}, "127.0.0.1", t) == "10.0.0.2");
    }
    // An address longer than any address could be is garbage too.
    const std::string longer = "1111:2222:3333:4444:5555:6666:7777:8888:9999:0000";
    CHECK(client({{"X-Forwarded-For", longer.c_str()}}, "127.0.0.1", t) == "127.0.0.1");
}

TEST_CASE("client_identity: long lists cost a bounded walk")
{
    const auto t = nets({"127.0.0.1", "10.0.0.0/8"});
    // 2,000 trusted hops (an 8 KiB header holds fewer): the walk stops after max_hops of
    // them, at the last one reached, and never gets to the forged value at the far left.
    std::string list = "6.6.6.6";
    for (int i = 0; i < 2000; ++i) list += ", 10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1);
    const auto got = client({{"X-Forwarded-For", list.c_str()}}, "127.0.0.1", t);
    CHECK(got.starts_with("10.0."));
    const auto stop = 2000 - static_cast<int>(server_check::max_hops);
    CHECK(got == "10.0." + std::to_string(stop / 250) + "." + std::to_string(stop % 250 + 1));
    // Untrusted entries far left cost nothing: the walk ends at the first from the right.
    std::string many;
    for (int i = 0; i < 2000; ++i) many += "6.6.6." + std::to_string(i % 250) + ", ";
    many += "198.51.100.7";
    CHECK(client({{"X-Forwarded-For", many.c_str()}}, "127.0.0.1", t) == "198.51.100.7");
}

TEST_CASE("client_identity: Forwarded (RFC 7239)")
{
    const auto t = nets({"127.0.0.1", "10.0.0.0/8"});
    auto fwd = [&](std::initializer_list<std::pair<const char*, const char*>> fields, const char* peer = "127.0.0.1") {
        return client(fields, peer, t, proxy_header::forwarded);
    };
    // The examples of RFC 7239 4 and 7.
    CHECK(fwd({{"Forwarded", "for=\"_gazonk\""}}) == "127.0.0.1");
    CHECK(fwd({{"Forwarded", "For=\"[2001:db8:cafe::17]:4711\""}}) == "2001:db8:cafe::17");
    CHECK(fwd({{"Forwarded", "for=192.0.2.60;proto=http;by=203.0.113.43"}}) == "192.0.2.60");
    CHECK(fwd({{"Forwarded", "for=192.0.2.43, for=198.51.100.17"}}) == "198.51.100.17");
    CHECK(fwd({{"Forwarded", "for=192.0.2.43,for=\"[2001:db8:cafe::17]\",for=unknown"}}) == "127.0.0.1");
    // Lines are one list; the walk goes over trusted hops, right to left.
    CHECK(fwd({{"Forwarded", "for=6.6.6.6"}, {"Forwarded", "for=198.51.100.17"}}) == "198.51.100.17");
    CHECK(fwd({{"Forwarded", "for=6.6.6.6, for=198.51.100.17"}, {"Forwarded", "for=10.0.0.2;by=10.0.0.3"}}) ==
          "198.51.100.17");
    CHECK(fwd({{"Forwarded", "for=\"198.51.100.17:8080\""}}) == "198.51.100.17");
    CHECK(fwd({{"Forwarded", "for=\"198.51.100.17:_p-1\""}}) == "198.51.100.17");   // obfuscated port
    CHECK(fwd({{"Forwarded", "for=\"\\1\\98.51.100.17\""}}) == "198.51.100.17");   // quoted-pairs
    CHECK(fwd({{"Forwarded", "by=10.0.0.3; FOR=198.51.100.17 ;proto=https;"}}) == "198.51.100.17");
    CHECK(fwd({{"Forwarded", "for=6.6.6.6,, ,for=198.51.100.17 , "}}) == "198.51.100.17");   // empty elements
    CHECK(fwd({{"Forwarded", "host=\"a,b\";for=198.51.100.17"}}) == "198.51.100.17");   // a comma quoted
    // Stops: unknown, obfuscated, no for=, two for=, IPv6 unbracketed or bracketed unquoted,
    // an unterminated quote (the proxy's element after it is unreadable), bad syntax.
    for (std::string bad : {"for=unknown", "for=_hidden", "for=\"_x:80\"", "proto=https", "for=1.2.3.4;for=5.6.7.8",
                            "for=\"2001:db8::17\"", "for=[2001:db8::17]", "for=\"[2001:db8::17\"", "for=\"[1.2.3.4]\"",
                            "for=\"[2001:db8::17]x\"", "for=\"1.2.3.4:\"", "for=\"1.2.3.4:_\"", "for=\"1.2.3.4:_a b\"",
                            "for=1.2.3.4:80", "for=\"1.2.3.4", "for=\"1.2.3.4\\", "for=", "for", "=1.2.3.4",
                            "for=1.2.3.4 x", "for=\"1.2.3.4\"x", "for=\"fe80::1%1\""}) {
        CAPTURE(bad);
        const std::string list = "for=6.6.6.6, " + bad;
        CHECK(fwd({{"Forwarded", list.c_str()}}) == "127.0.0.1");
        CHECK(fwd({{"Forwarded", list.c_str()}, {"Forwarded", "for=10.0.0.2"}}) == "10.0.0.2");
    }
    const std::string huge = "for=\"" + std::string(100, '1') + "\"";
    CHECK(fwd({{"Forwarded", huge.c_str()}}) == "127.0.0.1");
    // A long value in another parameter does not matter.
    const std::string long_host = "host=\"" + std::string(100, 'h') + "\";for=198.51.100.17";
    CHECK(fwd({{"Forwarded", long_host.c_str()}}) == "198.51.100.17");
}

TEST_CASE("client_identity: one header is read, the other ignored")
{
    const auto t = nets({"127.0.0.1"});
    // The proxy writes X-Forwarded-For: a Forwarded the client sent passes it unchanged.
    CHECK(client({{"Forwarded", "for=6.6.6.6"}, {"X-Forwarded-For", "198.51.100.7"}}, "127.0.0.1", t) == "198.51.100.7");
    CHECK(client({{"Forwarded", "for=6.6.6.6"}}, "127.0.0.1", t) == "127.0.0.1");
    // The proxy writes Forwarded: an X-Forwarded-For the client sent is ignored.
    CHECK(client({{"X-Forwarded-For", "6.6.6.6"}, {"Forwarded", "for=198.51.100.7"}}, "127.0.0.1", t,
                 proxy_header::forwarded) == "198.51.100.7");
    CHECK(client({{"X-Forwarded-For", "6.6.6.6"}}, "127.0.0.1", t, proxy_header::forwarded) == "127.0.0.1");
}
