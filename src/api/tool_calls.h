// One sub-tool call in a container, the same for the direct tool endpoints and the
// /messages tool loop: bash runs in the container's sandbox (started on demand), the
// editor works on the container's folders. Returns the tool result block's `content`.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <memory>
#include <string_view>

#include "api/routes.h"
#include "runtime/cancellation.h"
#include "runtime/sandbox.h"

namespace sandboxd::api {

// `tool` is bash_code_execution or text_editor_code_execution. Errors come back as
// *_tool_result_error blocks (with `detail`); a cancelled call kills its command. A call
// that capacity refuses (429, or 503 for the quota) is an error: the direct endpoints
// answer with it, a /messages turn shows it as a `too_many_requests` block.
// `depth` is the nesting depth of the request that makes the call (0: a user's); the
// command's ANTHROPIC_AUTH_TOKEN is for depth + 1. `on_output`, when set, sees a
// command's output while it runs (see runtime::ExecRequest::on_output).
asio::awaitable<Result<boost::json::object>> run_sub_tool(
    ApiContext& api, std::shared_ptr<Container> container, std::string_view tool,
    const boost::json::object& input, std::shared_ptr<runtime::Cancellation> cancellation = nullptr,
    int depth = 0, std::function<void(runtime::OutputStreamId, std::string_view)> on_output = nullptr);

}  // namespace sandboxd::api
