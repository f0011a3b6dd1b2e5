// async_eval on a pipeline: EVALSHA, and SCRIPT LOAD when the server has not got the script.
#pragma once

#include "pending_op.hpp"
#include "pipeline.hpp"

#include <sluice/redis/script.hpp>

#include <memory>
#include <string>
#include <vector>

namespace sluice::redis::detail {

/// On the pipeline's executor. Completes `op` with the script's reply; an error reply
/// completes with error::backend_error (see eval_fsm).
void run_eval(const std::shared_ptr<pipeline>& p, const script& s, std::vector<std::string> keys,
              std::vector<std::string> args, std::shared_ptr<pending_op> op);

} // namespace sluice::redis::detail
