// Whether a segment's first bytes are a header of the layout a limiter asks for (see
// include/sluice/shm/segment.hpp): sans-io, apart from the system calls of segment.cpp, so
// that the fuzz target fuzz/shm_table.cpp feeds it any bytes.
#include <sluice/shm/segment.hpp>

#include <cstring>
#include <string>

namespace sluice::shm::detail {

error check_header(const void* header, std::size_t size, const segment_layout& layout, std::size_t asked,
                   const std::array<char, 40>& boot, bool& stale, std::string& what)
{
    stale = false;
    if (size < sizeof(segment_header)) {
        what = "not a sluice segment (too short)";
        return error::shm_incompatible;
    }
    segment_header h;
    std::memcpy(&h, header, sizeof h);
    if (h.magic != segment_magic || h.byte_order != byte_order_mark) {
        what = "not a sluice segment";
        return error::shm_incompatible;
    }
    const std::size_t need = payload_offset + layout.payload;
    if (h.layout_version != segment_layout_version || h.header_size != sizeof(segment_header) ||
        h.word_size != sizeof(std::atomic<std::int64_t>) || h.lock_free != 1 || h.kind != layout.kind ||
        h.size != size || size < need) {
        what = "layout version " + std::to_string(h.layout_version) + ", kind " + std::to_string(h.kind) +
               " (this build: version " + std::to_string(segment_layout_version) + ", kind " +
               std::to_string(layout.kind) + ")";
        return error::shm_incompatible;
    }
    if (h.boot_id != boot) {
        stale = true;
        return {};
    }
    if (h.config != layout.config || (asked != 0 && asked != size)) {
        what = "exists with another configuration";
        return error::shm_config_mismatch;
    }
    return {};
}

} // namespace sluice::shm::detail
