// fuzz-covers: lib/redis/reply_queue.hpp
// The pipeline's reply bookkeeping (reply_queue) over any sequence of links, commands,
// handshakes and replies a pipeline can produce, against a model kept per link: replies
// answer the oldest command; a reply on a link whose handshake was refused (an error
// reply, or a ROLE that is not master) or never answered counts as refused; a command
// whose link went away has no reply (link_error).
#include "fuzz.hpp"

#include "redis/reply_queue.hpp"

#include <chrono>
#include <deque>
#include <map>

namespace detail = sluice::redis::detail;

namespace {

struct entry {
    int id;
    int link;
    bool handshake;
};

struct link_state {
    bool alive = true;
    bool marked = false;       // its handshake has been sent
    bool answered = false;     // its handshake's reply came
    bool refused = false;      // ...and refused the link
};

using queue = detail::reply_queue<int>;
using clock_t_ = std::chrono::steady_clock;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::input in(data, size);
    queue q;
    std::deque<entry> model;
    std::map<int, clock_t_::time_point> deadlines;
    std::map<int, link_state> links;
    int link = 0, next_id = 0;
    links[link];
    q.new_link();

    for (int step = 0; step < 4096 && !in.empty(); ++step) {
        switch (in.byte() % 6) {
        case 0:
        case 1: {   // a command on the current link
            if (!links[link].alive) break;
            int id = next_id++;
            auto dl = clock_t_::time_point{} + std::chrono::milliseconds{in.byte()};
            q.push(id, dl);
            deadlines[id] = dl;
            model.push_back({id, link, false});
            // The last command pushed is this link's handshake (AUTH then ROLE: ROLE is).
            if (in.flag() && !links[link].marked) {
                q.mark_handshake();
                model.back().handshake = true;
                links[link].marked = true;
            }
            break;
        }
        case 2:
        case 3: {   // the oldest command's reply
            if (model.empty()) break;
            entry e = model.front();
            link_state& ls = links[e.link];
            FUZZ_CHECK(q.front() == e.id);
            FUZZ_CHECK(q.front_deadline() == deadlines[e.id]);
            FUZZ_CHECK(q.front_is_handshake() == (e.handshake && e.link == link && ls.alive));
            // A dead link's commands get no reply (hiredis answers them with none).
            bool replied = ls.alive && in.flag();
            bool error_reply = in.flag();
            auto a = q.pop(replied, error_reply);
            model.pop_front();
            FUZZ_CHECK(a.entry == e.id);
            if (e.handshake) {
                ls.answered = true;
                ls.refused = !replied || error_reply;
            }
            queue::outcome want = !replied ? queue::outcome::link_error
                                  : (ls.answered && ls.refused) ? queue::outcome::refused
                                                                : queue::outcome::reply;
            FUZZ_CHECK(a.how == want);
            break;
        }
        case 4: {   // the link goes: its pending commands will be answered with no reply
            links[link].alive = false;
            q.link_gone();
            break;
        }
        case 5: {   // a new link, once every command of the old one was answered
            bool pending = false;
            for (const auto& e : model) pending |= e.link == link;
            if (pending || links[link].alive) break;
            links[++link];
            q.new_link();
            break;
        }
        }
        FUZZ_CHECK(q.size() == model.size());
        FUZZ_CHECK(q.empty() == model.empty());
    }
    return 0;
}
