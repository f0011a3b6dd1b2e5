// Plain completion handlers: async_acquire(n, max_wait, handler). Each handler runs on
// the io_context, never inside async_acquire itself.

#include <sluice/sluice.hpp>

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstdio>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main()
{
    asio::io_context io;
    // At most 3 permits in any 500 ms window (the strong, sliding guarantee).
    sluice::sliding_window window(io, 3, 500ms);
    const auto start = std::chrono::steady_clock::now();

    for (int i = 0; i < 8; ++i) {
        window.async_acquire(1, 2s, [i, start](boost::system::error_code ec) {
            auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
            std::printf("job %d: %s at %4lld ms\n", i, ec ? ec.message().c_str() : "go",
                        static_cast<long long>(ms.count()));
        });
    }
    std::printf("all 8 queued; none has run yet\n");
    io.run();
}
