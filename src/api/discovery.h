// Discovering the files that code wrote, so that they are listed (with created_at when
// first seen) without walking a container's folders on every request: after an
// execution the walk runs once, after the response and coalesced with other
// executions; a listing walks only when something may have changed (an execution since
// the last walk, or a running sandbox whose background processes may write).
#pragma once

#include <memory>

#include "api/routes.h"

namespace sandboxd::api {

void after_execution(ApiContext& api, const std::shared_ptr<Container>& container);
void before_listing(ApiContext& api, Container& container);

}  // namespace sandboxd::api
