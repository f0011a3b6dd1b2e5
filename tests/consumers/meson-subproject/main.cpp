// A Meson project that builds sluice as a subproject (subprojects/sluice, a wrap or a
// checkout), as .ci/run's install stage does (docs/guide.md, "Using sluice from your project");
// meson.build defines CONSUMER_REDIS when the subproject provides sluice-redis. A
// coroutine co_awaits a token bucket on an io_context; with CONSUMER_REDIS it also
// constructs a Redis limiter, so the link against libsluice_redis is checked (no server
// is needed: nothing is sent before the first acquire).
#include <sluice/sluice.hpp>
#include <sluice/version.hpp>
#ifdef CONSUMER_REDIS
#include <sluice/redis/connection.hpp>
#include <sluice/redis/token_bucket.hpp>
#endif

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>

int main()
{
    boost::asio::io_context io;
    sluice::token_bucket bucket(io, sluice::rate::per_second(1000), 2);
    int granted = 0;
    boost::asio::co_spawn(io, [&]() -> boost::asio::awaitable<void> {
        for (int i = 0; i < 5; ++i)
            if (co_await bucket.acquire(std::chrono::seconds(1))) ++granted;
    }, boost::asio::detached);
    io.run();

#ifdef CONSUMER_REDIS
    {
        boost::asio::io_context redis_io;   // never run: the limiter is only constructed
        sluice::redis::connection_config cfg;
        cfg.host = "127.0.0.1";
        sluice::redis::connection conn(redis_io, cfg);
        sluice::redis::token_bucket<sluice::redis::connection> shared(conn, sluice::rate::per_second(100), 10);
        conn.close();
    }
#endif

    std::printf("sluice %s (C++ %ld): %d of 5 granted\n", SLUICE_VERSION_STRING, static_cast<long>(__cplusplus), granted);
    return granted == 5 ? 0 : 1;
}
