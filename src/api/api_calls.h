// What the HTTP API's container and file endpoints answer, as calls with inputs of their
// own: the HTTP handlers parse a request into these, and the MCP surface (api/mcp.h)
// makes the same calls from a tool's arguments, so both answer with the same objects
// and the same errors.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json/object.hpp>
#include <memory>
#include <optional>
#include <string>

#include "api/routes.h"
#include "service/container_files.h"

namespace sandboxd::api {

// {id, type, created_at, expires_at, state, usage} of an open container (its usage walk
// runs on the blocking pool).
asio::awaitable<boost::json::object> describe_container(ContainerService& service,
                                                        const Container& container);

// GET /containers: one page of the owner's containers, {data, has_more, first_id, last_id}.
// `ctx` is the request on whose behalf it runs (cluster mode asks other replicas with it).
asio::awaitable<boost::json::object> list_containers_page(ApiContext& api, RequestContext& ctx, size_t limit,
                                                          std::string after_id);

// GET /files: one page of a container's uploads and outputs by creation time.
using FileListQuery = service::FilePageQuery;
asio::awaitable<Result<boost::json::object>> list_files_page(ApiContext& api, Container& container,
                                                             const FileListQuery& query);

// The file with this id, synced with the disk; 404 when missing.
asio::awaitable<Result<store::FileRecord>> find_file(ApiContext& api, Container& container,
                                                     const std::string& id);

// DELETE /files/{id}: {id, type: file_deleted}.
asio::awaitable<Result<boost::json::object>> delete_file(ApiContext& api, Container& container,
                                                         const std::string& id);

}  // namespace sandboxd::api
