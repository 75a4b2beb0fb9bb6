// container_upload content blocks ({"type": "container_upload", "file_id": ID}) of a
// /messages request: the file that a Files API id names is placed in the request's
// container for the turn, and the model is told where it is.
//
// A sandboxd file id is the file's sandbox path (store/keys.h), the same in every
// container, so "placing" means:
// - the request's container holds a file at that path (an upload, or an output of an
//   earlier command): it is used where it is, nothing is copied;
// - it does not, and exactly one other container of the same owner does: that file is
//   copied into this container's uploads, at the same path below uploads/ (an output
//   outputs/chart.png arrives as /mnt/user-data/uploads/chart.png), as an upload of it
//   would be (quota, sessions bucket, record); an existing upload there is replaced;
// - several of the owner's containers hold it: 400, the id cannot say which;
// - none does, or the id is not one of this server's: 404 not_found_error naming the
//   block. Other owners' containers are never looked at.
// Only the blocks of the turn being generated are placed (model::current_turn_start:
// the last user message with more than tool_result blocks, and what follows it), as
// Anthropic places them; those of finished turns were placed when their turn ran.
#pragma once

#include <boost/json/object.hpp>
#include <memory>

#include "api/routes.h"

namespace sandboxd::api {

// Places the turn's files in `container` and rewrites every container_upload block of
// `body.messages` into a text block naming the file's sandbox path (the upstream model
// knows no such block). `owner` is the request's.
asio::awaitable<Result<void>> place_container_uploads(ApiContext& api, const std::string& owner,
                                                      std::shared_ptr<Container> container,
                                                      boost::json::object& body);

}  // namespace sandboxd::api
