// The Messages API's content blocks as a streamed answer builds them, read in one place:
// content_block_start appends a block, content_block_delta adds to it (text, thinking,
// signature, a tool call's input as partial JSON, a citation), content_block_stop ends
// it. The tool loop reads the upstream model's stream with it and the Workspace reads the
// loop's stream with it, so both keep exactly the same blocks (citations included): a
// delta type learned once is learned by every reader.
//
// No I/O and no policy: the caller decides what a malformed event means (the tool loop
// refuses the upstream's answer, the Workspace keeps what it has).
#pragma once

#include <boost/json.hpp>
#include <boost/system/result.hpp>
#include <cstddef>
#include <map>
#include <string>

namespace sandboxd::messages {

// A content_block_delta's `delta`, typed.
struct BlockDelta {
  enum class Kind { text, thinking, signature, input_json, citation, other };
  Kind kind = Kind::other;
  std::string text;             // the text, thinking, signature or partial JSON it carries
  boost::json::value citation;  // a citations_delta's citation
};

// A delta from its JSON; an error when it is not an object with a string type. An
// unknown delta type is Kind::other (a newer upstream's addition is passed on, not refused).
boost::system::result<BlockDelta> tag_invoke(boost::json::try_value_to_tag<BlockDelta>,
                                             const boost::json::value& value);

class ContentAccumulator {
 public:
  enum class Outcome {
    applied,
    no_such_block,  // the event's index names no started block
    bad_delta,      // the delta is not an object with a string type
    bad_input,      // a tool call's streamed input is not a JSON object
  };

  // A content_block_start's block, appended (the events' numbering may be offset from
  // the blocks kept here, as the tool loop's is across upstream turns: the caller checks
  // the index).
  void start(boost::json::object block);
  // A content_block_delta for the block at `index`.
  Outcome apply(size_t index, const boost::json::value& delta);
  // A content_block_stop: a tool call's streamed input becomes its `input`.
  Outcome stop(size_t index);

  // True while the block at `index` has tool input streamed but not stopped (a call cut
  // off mid-stream: its input is incomplete).
  bool input_unfinished(size_t index) const { return partial_json_.contains(index); }

  const boost::json::array& blocks() const { return blocks_; }
  boost::json::array& blocks() { return blocks_; }
  size_t size() const { return blocks_.size(); }
  // The blocks, leaving the accumulator empty.
  boost::json::array take();

 private:
  boost::json::object* block_at(size_t index);

  boost::json::array blocks_;
  std::map<size_t, std::string> partial_json_;  // tool input being streamed, by block
};

}  // namespace sandboxd::messages
