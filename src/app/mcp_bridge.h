// `sandboxd mcp --url URL`: a stdio MCP server for clients that only start local ones
// (Claude Desktop, Claude Code's stdio servers). It reads JSON-RPC messages from stdin,
// one a line, posts each to the server's /mcp endpoint (Streamable HTTP) with the token
// from the environment, and writes every message the server answers — progress
// notifications as they stream, then the response — to stdout, one a line. Requests run
// concurrently (a cancellation reaches the server while its command runs); at the end
// of stdin the session is ended (DELETE) and the bridge exits.
#pragma once

#include <string>

namespace sandboxd::app {

struct McpBridgeOptions {
  std::string url;                           // the server, or its /mcp endpoint
  std::string token_env = "SANDBOXD_TOKEN";  // the environment variable holding the token
};

// Returns the exit status.
int mcp_bridge(const McpBridgeOptions& options);

}  // namespace sandboxd::app
