// The Messages stream's content blocks as every reader rebuilds them (messages/): text,
// thinking and its signature, a tool call's streamed input, citations, and the events a
// reader must refuse or ignore. Pure logic: no root, no server.

#include "messages/content_accumulator.h"

#include <gtest/gtest.h>

namespace bj = boost::json;
using sandboxd::messages::BlockDelta;
using sandboxd::messages::ContentAccumulator;
using Outcome = ContentAccumulator::Outcome;

namespace {

bj::value delta(const char* type, const char* key, const char* text) {
  return bj::object{{"type", type}, {key, text}};
}

TEST(ContentAccumulator, TextThinkingAndSignatureAreJoined) {
  ContentAccumulator content;
  content.start({{"type", "thinking"}, {"thinking", ""}});
  content.start({{"type", "text"}, {"text", ""}});
  EXPECT_EQ(content.apply(0, delta("thinking_delta", "thinking", "Let me ")), Outcome::applied);
  EXPECT_EQ(content.apply(0, delta("thinking_delta", "thinking", "think.")), Outcome::applied);
  EXPECT_EQ(content.apply(0, delta("signature_delta", "signature", "sig-1")), Outcome::applied);
  EXPECT_EQ(content.apply(1, delta("text_delta", "text", "Hello, ")), Outcome::applied);
  EXPECT_EQ(content.apply(1, delta("text_delta", "text", "wörld")), Outcome::applied);
  EXPECT_EQ(content.stop(0), Outcome::applied);
  EXPECT_EQ(content.stop(1), Outcome::applied);
  auto blocks = content.take();
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].at("thinking"), "Let me think.");
  EXPECT_EQ(blocks[0].at("signature"), "sig-1");
  EXPECT_EQ(blocks[1].at("text"), "Hello, wörld");
  EXPECT_EQ(content.size(), 0u) << "take() leaves it empty";
}

TEST(ContentAccumulator, CitationsAreKeptInOrderOnTheirTextBlock) {
  ContentAccumulator content;
  content.start({{"type", "text"}, {"text", ""}});
  const bj::object first{
      {"type", "char_location"}, {"cited_text", "The sky is blue."}, {"document_index", 0}};
  const bj::object second{
      {"type", "page_location"}, {"cited_text", "Grass is green."}, {"document_index", 1}};
  EXPECT_EQ(content.apply(0, bj::object{{"type", "citations_delta"}, {"citation", first}}), Outcome::applied);
  EXPECT_EQ(content.apply(0, delta("text_delta", "text", "the sky is blue")), Outcome::applied);
  EXPECT_EQ(content.apply(0, bj::object{{"type", "citations_delta"}, {"citation", second}}),
            Outcome::applied);
  const auto& block = content.blocks()[0].as_object();
  ASSERT_TRUE(block.contains("citations"));
  const auto& citations = block.at("citations").as_array();
  ASSERT_EQ(citations.size(), 2u);
  EXPECT_EQ(citations[0], first);
  EXPECT_EQ(citations[1], second);
  EXPECT_EQ(block.at("text"), "the sky is blue");
}

TEST(ContentAccumulator, AToolCallsInputIsParsedWhenItsBlockStops) {
  ContentAccumulator content;
  content.start({{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "bash"}, {"input", bj::object{}}});
  content.apply(0, delta("input_json_delta", "partial_json", "{\"command\": \"ec"));
  EXPECT_TRUE(content.input_unfinished(0));
  content.apply(0, delta("input_json_delta", "partial_json", "ho hi\"}"));
  EXPECT_EQ(content.stop(0), Outcome::applied);
  EXPECT_FALSE(content.input_unfinished(0));
  EXPECT_EQ(content.blocks()[0].at("input"), (bj::object{{"command", "echo hi"}}));
  // A call whose input streams nothing has an empty object as input, as Anthropic's does.
  content.start({{"type", "tool_use"}, {"id", "toolu_2"}, {"name", "bash"}});
  content.apply(1, delta("input_json_delta", "partial_json", ""));
  EXPECT_EQ(content.stop(1), Outcome::applied);
  EXPECT_EQ(content.blocks()[1].at("input"), bj::object{});
}

TEST(ContentAccumulator, MalformedEventsAreReportedNotApplied) {
  ContentAccumulator content;
  EXPECT_EQ(content.apply(0, delta("text_delta", "text", "x")), Outcome::no_such_block);
  EXPECT_EQ(content.stop(3), Outcome::no_such_block);
  content.start({{"type", "text"}, {"text", "a"}});
  EXPECT_EQ(content.apply(0, bj::value(nullptr)), Outcome::bad_delta);
  EXPECT_EQ(content.apply(0, bj::object{{"text", "no type"}}), Outcome::bad_delta);
  EXPECT_EQ(content.apply(0, bj::object{{"type", 7}}), Outcome::bad_delta);
  EXPECT_EQ(content.blocks()[0].at("text"), "a") << "nothing refused was applied";
  // A delta type from a newer upstream is passed over, not refused.
  EXPECT_EQ(content.apply(0, bj::object{{"type", "future_delta"}, {"x", 1}}), Outcome::applied);
  EXPECT_EQ(content.blocks()[0].as_object().size(), 2u);
  // A tool input that is not a JSON object is refused; the call keeps no input.
  content.start({{"type", "tool_use"}, {"id", "t"}, {"name", "bash"}});
  content.apply(1, delta("input_json_delta", "partial_json", "[1, 2"));
  EXPECT_EQ(content.stop(1), Outcome::bad_input);
  EXPECT_FALSE(content.blocks()[1].as_object().contains("input"));
  content.start({{"type", "tool_use"}, {"id", "u"}, {"name", "bash"}});
  content.apply(2, delta("input_json_delta", "partial_json", "[1, 2]"));
  EXPECT_EQ(content.stop(2), Outcome::bad_input);
}

TEST(ContentAccumulator, ADeltaIsTyped) {
  auto text = bj::try_value_to<BlockDelta>(delta("text_delta", "text", "hi"));
  ASSERT_TRUE(text);
  EXPECT_EQ(text->kind, BlockDelta::Kind::text);
  EXPECT_EQ(text->text, "hi");
  auto json = bj::try_value_to<BlockDelta>(delta("input_json_delta", "partial_json", "{"));
  ASSERT_TRUE(json);
  EXPECT_EQ(json->kind, BlockDelta::Kind::input_json);
  EXPECT_EQ(json->text, "{");
  EXPECT_FALSE(bj::try_value_to<BlockDelta>(bj::value("text_delta")));
}

}  // namespace
