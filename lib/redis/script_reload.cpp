#include "script_reload.hpp"

#include "eval_fsm.hpp"

namespace sluice::redis::detail {

using boost::system::error_code;

namespace {

struct eval_state {
    std::shared_ptr<pending_op> op;
    script s;
    std::vector<std::string> keys;
    std::vector<std::string> args;
    eval_fsm fsm;
};

void send_evalsha(pipeline& p, const std::shared_ptr<eval_state>& st)
{
    std::vector<std::string> argv;
    argv.reserve(3 + st->keys.size() + st->args.size());
    argv.push_back("EVALSHA");
    argv.push_back(st->s.sha1());
    argv.push_back(std::to_string(st->keys.size()));
    argv.insert(argv.end(), st->keys.begin(), st->keys.end());
    argv.insert(argv.end(), st->args.begin(), st->args.end());
    // Weakly: the handler sits in the pipeline's own queue.
    p.submit_internal(std::move(argv), [w = p.weak_from_this(), st](error_code ec, reply r) {
        if (st->op->done()) return;   // cancelled
        if (st->fsm.on_evalsha(ec, r) == eval_fsm::next::done)
            return st->op->complete(ec, std::move(r));
        // A connection closed or gone since the NOSCRIPT came answers as close() does (the
        // op needs only the executor).
        auto self = w.lock();
        if (!self) return st->op->complete(error::closed);
        if (auto e = self->refusal()) return st->op->complete(*e);
        // Pipelined: the load precedes the retry on the same link.
        self->submit_internal({"SCRIPT", "LOAD", st->s.source()},
                              [st](error_code ec, reply r) { st->fsm.on_load(ec, std::move(r)); });
        send_evalsha(*self, st);
    });
}

} // namespace

void run_eval(const std::shared_ptr<pipeline>& p, const script& s, std::vector<std::string> keys,
              std::vector<std::string> args, std::shared_ptr<pending_op> op)
{
    if (auto e = p->refusal()) return op->complete(*e);
    send_evalsha(*p, std::make_shared<eval_state>(
                         eval_state{std::move(op), s, std::move(keys), std::move(args), {}}));
}

} // namespace sluice::redis::detail
