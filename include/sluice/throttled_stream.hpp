// Bandwidth shaping for any Asio stream: bytes per second in each direction, through rate
// limiters that many streams can share.
#pragma once

#include <sluice/error.hpp>
#include <sluice/limiter_options.hpp>
#include <sluice/token_bucket.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/system/error_code.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

namespace sluice {

/// An AsyncReadStream and AsyncWriteStream that moves its bytes no faster than its rate
/// limiters allow: each direction has a list of limiters (a connection's own, a global
/// one shared by every connection, ...), one permit a byte, and every byte passes all of
/// them. `asio::async_read`, `asio::async_write`, Beast's HTTP and websocket operations
/// work on it unchanged, as on the stream it wraps (a tcp::socket, a beast::tcp_stream,
/// an ssl::stream).
///
///     sluice::token_bucket<> global(io, sluice::rate::per_second(50'000'000), 64 * 1024);
///     sluice::token_bucket<> mine(io, sluice::rate::per_second(1'000'000), 64 * 1024);
///     sluice::throttled_stream<asio::ip::tcp::socket> s(std::move(socket));
///     s.write_limits() = {&mine, &global};            // 1 MB/s, and 50 MB/s for all
///     co_await asio::async_write(s, asio::buffer(data), asio::use_awaitable);
///
/// A write takes its permits first, then writes that many bytes at most: it never sends
/// faster than the limiters. A read reads first, then takes permits for the bytes it got
/// before it completes: a read waiting for data that never comes must not hold a shared
/// budget that other connections could use. So each stream may read one chunk ahead of
/// its limiters, and over any interval T a read limiter of rate R and burst B lets at most
/// B + R x T + (streams x chunk) bytes through; the kernel's receive window holds back
/// the sender meanwhile. Each operation moves at most `chunk()` bytes (16 KiB by default),
/// and no more than the burst of any limiter whose policy tells it (token and leaky
/// buckets); a limiter that cannot admit a chunk at once fails the operation with
/// error::exceeds_limit.
///
/// Executor: the wrapped stream's. Completion handlers run on their associated executor,
/// as the wrapped stream's operations do.
///
/// Cancellation: async_read_some and async_write_some honour terminal and partial
/// cancellation, in the wrapped stream's operation and while they wait for permits. A
/// read cancelled while waiting completes with asio::error::operation_aborted and the
/// bytes it had read (they are in the buffer; their permits are not taken).
///
/// Thread-safety: as the wrapped stream's (one read and one write at a time). The
/// limiters may be shared by streams on any threads; they must outlive every operation of
/// the streams that use them.
template <class NextLayer, class Limiter = token_bucket<>>
class throttled_stream {
public:
    /// The wrapped stream's type.
    using next_layer_type = std::remove_reference_t<NextLayer>;
    /// The wrapped stream's executor type.
    using executor_type = typename next_layer_type::executor_type;
    /// The type of the rate limiters, one permit a byte.
    using limiter_type = Limiter;

    /// The most bytes one operation moves unless set_chunk says otherwise.
    static constexpr std::size_t default_chunk = 16 * 1024;

    /// Builds the wrapped stream from `args` (a socket to move in, an executor...).
    template <class... Args>
    explicit throttled_stream(Args&&... args) : next_(std::forward<Args>(args)...)
    {
    }

    /// The wrapped stream.
    next_layer_type& next_layer() noexcept { return next_; }
    /// The wrapped stream.
    const next_layer_type& next_layer() const noexcept { return next_; }

    /// The wrapped stream's executor.
    executor_type get_executor() noexcept { return next_.get_executor(); }

    /// The limiters every read passes, in order; not owned. Empty: reads are not shaped.
    std::vector<Limiter*>& read_limits() noexcept { return read_limits_; }
    /// The limiters every write passes, in order; not owned. Empty: writes are not shaped.
    std::vector<Limiter*>& write_limits() noexcept { return write_limits_; }

    /// The most bytes one read or write moves. Throws system_error(error::invalid_count)
    /// for 0.
    void set_chunk(std::size_t bytes)
    {
        if (bytes == 0)
            throw boost::system::system_error(make_error_code(error::invalid_count));
        chunk_ = bytes;
    }

    /// The most bytes one read or write moves.
    std::size_t chunk() const noexcept { return chunk_; }

    /// Bytes read so far (permits taken for them, or not shaped).
    std::uint64_t bytes_read() const noexcept { return bytes_read_; }
    /// Bytes written so far.
    std::uint64_t bytes_written() const noexcept { return bytes_written_; }

    /// Reads at most chunk() bytes, then waits for their permits. Handler signature:
    /// void(boost::system::error_code, std::size_t). Errors: the wrapped stream's; a
    /// limiter's (error::closed, error::exceeds_limit) with the bytes read;
    /// asio::error::operation_aborted.
    template <class MutableBufferSequence,
              BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, std::size_t))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_read_some(const MutableBufferSequence& buffers,
                         Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code, std::size_t)>(
            transfer_op<MutableBufferSequence, false>{this, buffers}, token, next_);
    }

    /// Waits for the permits of at most chunk() bytes, then writes them. Handler
    /// signature: void(boost::system::error_code, std::size_t). Errors: the wrapped
    /// stream's; a limiter's (error::closed, error::exceeds_limit), nothing written;
    /// asio::error::operation_aborted.
    template <class ConstBufferSequence,
              BOOST_ASIO_COMPLETION_TOKEN_FOR(void(boost::system::error_code, std::size_t))
                  Token = boost::asio::default_completion_token_t<executor_type>>
    auto async_write_some(const ConstBufferSequence& buffers,
                          Token&& token = boost::asio::default_completion_token_t<executor_type>())
    {
        return boost::asio::async_compose<Token, void(boost::system::error_code, std::size_t)>(
            transfer_op<ConstBufferSequence, true>{this, buffers}, token, next_);
    }

private:
    // One read or write: for a write, permits (limiter by limiter) then the transfer; for
    // a read, the transfer then permits.
    template <class Buffers, bool Write>
    struct transfer_op {
        enum class state { start, charging, transferring, done };

        throttled_stream* self;
        Buffers buffers;
        std::size_t bytes = 0;   // the chunk of a write; what a read got
        std::size_t next = 0;    // the next limiter to take permits from
        state at = state::start;

        const std::vector<Limiter*>& limits() const { return Write ? self->write_limits_ : self->read_limits_; }

        template <class Self>
        void operator()(Self& op, boost::system::error_code ec = {}, std::size_t n = 0)
        {
            switch (at) {
            case state::start:
                op.reset_cancellation_state(boost::asio::enable_partial_cancellation());
                bytes = std::min(boost::asio::buffer_size(buffers), max_bytes());
                if (bytes == 0) {
                    // Nothing to move: the wrapped stream answers, no permit taken.
                    at = state::done;
                    return transfer(op, buffers);
                }
                if (Write) return charge(op);
                at = state::transferring;
                return transfer_chunk(op);
            case state::charging:
                if (ec) return op.complete(ec, Write ? 0 : bytes);
                return charge(op);
            case state::transferring:
                if (Write) {
                    self->bytes_written_ += n;
                    return op.complete(ec, n);
                }
                bytes = n;
                self->bytes_read_ += n;
                if (ec || n == 0) return op.complete(ec, n);
                return charge(op);
            case state::done:
                return op.complete(ec, n);
            }
        }

        // chunk(), and no more than a limiter whose policy tells its burst can admit at once.
        std::size_t max_bytes() const
        {
            std::size_t m = self->chunk_;
            for (Limiter* l : limits())
                if constexpr (requires { l->policy().burst(); })
                    m = static_cast<std::size_t>(std::min<std::uint64_t>(m, l->policy().burst()));
            return m;
        }

        // Takes the permits of `bytes` from the next limiter; after the last one, a write
        // transfers and a read completes.
        template <class Self>
        void charge(Self& op)
        {
            if (next < limits().size()) {
                at = state::charging;
                Limiter* l = limits()[next++];
                return l->async_acquire(bytes, wait_forever, std::move(op));
            }
            if (Write) {
                at = state::transferring;
                return transfer_chunk(op);
            }
            // A read with no limiter completes straight from its transfer's handler; one
            // with limiters comes here from the last acquire's.
            op.complete(boost::system::error_code(), bytes);
        }

        // The first `bytes` of the buffers: the first buffer alone when it is large
        // enough (no allocation), else a short list of buffers.
        template <class Self>
        void transfer_chunk(Self& op)
        {
            using buffer_type = std::conditional_t<Write, boost::asio::const_buffer, boost::asio::mutable_buffer>;
            auto it = boost::asio::buffer_sequence_begin(buffers);
            const buffer_type first(*it);
            if (first.size() >= bytes)
                return transfer(op, buffer_type(first.data(), bytes));
            std::vector<buffer_type> prefix;
            std::size_t left = bytes;
            for (; it != boost::asio::buffer_sequence_end(buffers) && left > 0; ++it) {
                const buffer_type b(*it);
                const std::size_t take = std::min(left, b.size());
                if (take > 0) prefix.emplace_back(b.data(), take);
                left -= take;
            }
            transfer(op, std::move(prefix));
        }

        template <class Self, class Sequence>
        void transfer(Self& op, const Sequence& seq)
        {
            if constexpr (Write)
                self->next_.async_write_some(seq, std::move(op));
            else
                self->next_.async_read_some(seq, std::move(op));
        }
    };

    NextLayer next_;
    std::vector<Limiter*> read_limits_;
    std::vector<Limiter*> write_limits_;
    std::size_t chunk_ = default_chunk;
    std::uint64_t bytes_read_ = 0;
    std::uint64_t bytes_written_ = 0;
};

} // namespace sluice
