// The Workspace's chat threads as a service (docs/http-api.md, "Code execution in the
// Workspace" in docs/contract.md): threads an owner creates, lists, renames and deletes,
// and the turns posted to them. A turn's history is the stored conversation (its last
// workspace.maxHistoryTurns turns); code execution is offered when the request uses
// Skills or asks for it, and never while features.codeExecution.enabled is false, and
// then runs in a container of the thread's id. Files the turn writes to outputs/ become
// the thread's artifacts, appended to the answer as zylon-resource blocks.
//
// No HTTP here: the surface (api/thread_chat.cc) parses requests, runs the tool loop
// that answers a turn, frames its events for the client and shapes the responses; the
// turn below rebuilds the answer from the loop's events, finds its artifacts and stores
// it. Expected failures come back as ApiError values (base/error.h).
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/json.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.h"
#include "messages/content_accumulator.h"
#include "ops/config.h"
#include "runtime/cancellation.h"
#include "service/services.h"
#include "store/database.h"
#include "store/metadata.h"
#include "store/thread_store.h"

namespace sandboxd::service {

// The content block type of an artifact in an answer: the workspace's, not the model's.
inline constexpr std::string_view kResourceBlock = "zylon-resource";

// A stored message's content or extra as JSON; null when it does not parse.
boost::json::value stored_json(const std::string& text);

// The zylon-resource block of an artifact: what the page needs to preview and download
// it (downloads still follow workspace.downloads at download time).
boost::json::object resource_block(const std::string& thread_id, const store::ThreadArtifact& artifact,
                                   bool downloadable);

// A title from the first message: its first line, at most 80 bytes (cut on a UTF-8
// character boundary).
std::string title_from(std::string_view content);

// The stored conversation in upstream terms: the last `max_turns - 1` turns (the new
// message is the last turn). zylon-resource blocks are the workspace's, not the model's;
// without code execution in this turn, earlier code execution steps are left out (the
// model could not be given the tool their blocks belong to).
boost::json::array history_for_upstream(const std::vector<store::ThreadMessage>& stored, int max_turns,
                                        bool code_execution);

// What one message posted to a thread asks for.
struct TurnRequest {
  std::string content;
  boost::json::array skills;              // {type, skill_id, version?}
  bool code_execution_requested = false;  // pgpt.tools names code_execution
  // The tool version pgpt.tools asks for (an Anthropic one drops `detail` from error
  // blocks, as /messages does); Zylon's own when it names none.
  std::string code_tool_type = "code_execution_v1";
  std::string model = "default";
  int64_t max_tokens = 4096;
};

// A file of a thread's container the page lists: one the user uploaded or one a turn
// wrote to outputs/.
struct ThreadFile {
  store::FileRecord record;
  bool upload = false;  // under uploads/ (else under outputs/)
};

// Turns running now, one per thread: a second message waits for the first to finish,
// and a stop request finds the turn's cancellation here.
class RunningTurns {
 public:
  bool claim(const std::string& owner, const std::string& id,
             std::shared_ptr<runtime::Cancellation> cancellation);
  void release(const std::string& owner, const std::string& id);
  // Cancels the thread's running turn; false when none runs.
  bool cancel(const std::string& owner, const std::string& id);
  bool running(const std::string& owner, const std::string& id);

 private:
  std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<runtime::Cancellation>> running_;
};

class WorkspaceTurn;

class WorkspaceChat : public std::enable_shared_from_this<WorkspaceChat> {
 public:
  // `database`: the metadata database, which keeps the threads.
  WorkspaceChat(Services& services, std::shared_ptr<store::db::Database> database);

  store::ThreadStore& threads() { return threads_; }

  // The owner's thread; 404 when there is none.
  asio::awaitable<Result<store::ThreadRecord>> find(const std::string& owner, const std::string& id);
  // A new thread, within the owner's thread and container quotas (a thread's turns run
  // in a container of its id: one that could not get it is refused now).
  asio::awaitable<Result<store::ThreadRecord>> create(const std::string& owner, const std::string& title);
  // Newest first; `title_query`: only threads whose title holds it (ignoring case).
  asio::awaitable<store::ThreadPage> list(const std::string& owner, size_t limit, const std::string& after_id,
                                          const std::string& title_query);
  asio::awaitable<std::vector<store::ThreadMessage>> messages(const std::string& owner,
                                                              const std::string& id);
  asio::awaitable<Result<store::ThreadRecord>> rename(const std::string& owner, const std::string& id,
                                                      const std::string& title);
  // The thread's container first (a turn running now has its command killed with the
  // sandbox), then the thread with its messages and artifacts.
  asio::awaitable<void> remove(const store::ThreadRecord& thread);
  asio::awaitable<std::vector<store::ThreadArtifact>> artifacts(const std::string& owner,
                                                                const std::string& id);
  // What the user uploaded and what turns wrote to outputs/ (none before the first turn
  // with code execution made the container).
  asio::awaitable<std::vector<ThreadFile>> files(const std::string& owner, const std::string& id);

  // Stops the thread's running turn (its command is killed, what was said so far is
  // stored marked stopped) and waits, bounded, until it has been stored. False when no
  // turn was running.
  asio::awaitable<bool> stop_turn(const std::string& owner, const std::string& id);

  // Claims the thread for a turn (429 while another one runs) and makes it ready: the
  // upstream request with the history, and, with code execution, the thread's container
  // opened (made when needed) and what its outputs/ holds now. `config` is the
  // configuration the request took; the ids are the user's message's and, unless the
  // loop's stream names its own, the answer's.
  asio::awaitable<Result<std::shared_ptr<WorkspaceTurn>>> begin_turn(
      const store::ThreadRecord& thread, TurnRequest request, std::shared_ptr<const ops::Config> config,
      std::string user_message_id, std::string answer_id);

 private:
  friend class WorkspaceTurn;

  Services& services_;
  store::ThreadStore threads_;
  RunningTurns running_;
};

// One turn, from its claim on the thread to its stored answer. The loop's events pass
// through record() as the stream goes (the answer is rebuilt from them as an SDK
// would); at the answer's message_delta the surface asks for the artifacts, sends their
// blocks, and stores the turn before the client learns that the message ended.
class WorkspaceTurn {
 public:
  WorkspaceTurn(std::shared_ptr<WorkspaceChat> chat, std::string owner, std::string thread_id,
                std::shared_ptr<runtime::Cancellation> cancellation, std::string answer_id);
  ~WorkspaceTurn();
  WorkspaceTurn(const WorkspaceTurn&) = delete;
  WorkspaceTurn& operator=(const WorkspaceTurn&) = delete;

  const std::string& thread_id() const { return thread_id_; }
  // A stop request or the client leaving cancels it.
  const std::shared_ptr<runtime::Cancellation>& cancellation() const { return cancellation_; }
  // The thread's container, when code execution is offered; null otherwise.
  const std::shared_ptr<Container>& container() const { return container_; }
  // The Anthropic Messages request the loop runs (taken once).
  boost::json::object take_upstream_request() { return std::move(upstream_request_); }

  // One event of the loop's stream other than message_delta. Returns what the client
  // gets in its place when that differs (a block of the workspace's own type the model
  // made up), nullopt to pass it on as it is.
  std::optional<boost::json::object> record(std::string_view event, const boost::json::object& data);

  // The answer is complete: the files this turn wrote or changed under outputs/ become
  // its artifacts, appended to the answer as zylon-resource blocks. Returns them with
  // their index in the answer, for the client.
  asio::awaitable<std::vector<std::pair<int64_t, boost::json::object>>> add_artifacts();

  // A stopped answer keeps only what a later turn can give the model back: a code
  // execution call without its result, or a thinking block without its signature,
  // would make the upstream refuse the conversation.
  void drop_incomplete_blocks();

  // The stored answer and the container the answer names ({id, expires_at}: answered,
  // not stored, as it rolls).
  struct Answer {
    store::ThreadMessage message;
    boost::json::value container;
  };
  // Stores the user's message and the answer that `message_delta` ends, with the
  // artifacts, and lets the thread take its next message. 404 when the thread was
  // deleted while it answered.
  asio::awaitable<Result<Answer>> store(const boost::json::object& message_delta);

  bool stored() const { return stored_; }
  // Why the turn failed: an error event of the loop, or the thread deleted meanwhile.
  const std::optional<ApiError>& failure() const { return failure_; }

  // The thread takes its next message (done once; store() does it too).
  void release();

 private:
  friend class WorkspaceChat;

  // Fingerprints of what outputs/ held before the turn.
  struct Fingerprint {
    uint64_t size;
    std::string etag;
    int64_t mtime_ns;
    bool operator==(const Fingerprint&) const = default;
  };
  using OutputsSnapshot = std::map<std::string, Fingerprint>;
  asio::awaitable<OutputsSnapshot> snapshot_outputs();
  asio::awaitable<std::vector<store::ThreadArtifact>> changed_outputs();

  std::shared_ptr<WorkspaceChat> chat_;
  std::string owner_, thread_id_;
  std::shared_ptr<runtime::Cancellation> cancellation_;
  std::shared_ptr<Container> container_;
  OutputsSnapshot outputs_before_;
  store::ThreadMessage user_;
  std::string request_text_;  // the user's message as typed (user_.content is its JSON)
  std::string model_;
  boost::json::object upstream_request_;

  std::string message_id_;
  messages::ContentAccumulator content_;  // the answer's blocks, read from the loop's stream
  std::vector<store::ThreadArtifact> artifacts_;
  bool stored_ = false;
  bool released_ = false;
  std::optional<ApiError> failure_;
};

}  // namespace sandboxd::service
