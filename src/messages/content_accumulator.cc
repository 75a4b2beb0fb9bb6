#include "messages/content_accumulator.h"

#include <string_view>
#include <utility>

namespace sandboxd::messages {

namespace json = boost::json;

namespace {

// The deltas that carry text, and the field that holds it (Anthropic's stream events).
struct TextDeltaType {
  std::string_view type;
  BlockDelta::Kind kind;
  const char* field;
};
constexpr TextDeltaType kTextDeltaTypes[] = {
    {"text_delta", BlockDelta::Kind::text, "text"},
    {"thinking_delta", BlockDelta::Kind::thinking, "thinking"},
    {"signature_delta", BlockDelta::Kind::signature, "signature"},
    {"input_json_delta", BlockDelta::Kind::input_json, "partial_json"},
};

}  // namespace

boost::system::result<BlockDelta> tag_invoke(json::try_value_to_tag<BlockDelta>, const json::value& value) {
  if (!value.is_object()) return json::make_error_code(json::error::not_object);
  const auto& object = value.as_object();
  auto* type = object.if_contains("type");
  if (!type || !type->is_string()) return json::make_error_code(json::error::not_string);
  BlockDelta delta;
  const std::string_view kind = type->as_string();
  for (const auto& known : kTextDeltaTypes) {
    if (kind != known.type) continue;
    delta.kind = known.kind;
    if (auto* text = object.if_contains(known.field); text && text->is_string())
      delta.text = std::string(text->as_string());
    return delta;
  }
  if (kind == "citations_delta") {
    delta.kind = BlockDelta::Kind::citation;
    if (auto* citation = object.if_contains("citation")) delta.citation = *citation;
  }
  return delta;
}

void ContentAccumulator::start(json::object block) { blocks_.emplace_back(std::move(block)); }

json::object* ContentAccumulator::block_at(size_t index) {
  if (index >= blocks_.size() || !blocks_[index].is_object()) return nullptr;
  return &blocks_[index].as_object();
}

ContentAccumulator::Outcome ContentAccumulator::apply(size_t index, const json::value& value) {
  auto* block = block_at(index);
  if (!block) return Outcome::no_such_block;
  auto delta = json::try_value_to<BlockDelta>(value);
  if (!delta) return Outcome::bad_delta;
  auto append = [&](const char* field) {
    auto* have = block->if_contains(field);
    std::string joined = have && have->is_string() ? std::string(have->as_string()) : std::string();
    joined.append(delta->text);
    block->insert_or_assign(field, std::move(joined));
  };
  switch (delta->kind) {
    case BlockDelta::Kind::text:
      append("text");
      break;
    case BlockDelta::Kind::thinking:
      append("thinking");
      break;
    case BlockDelta::Kind::signature:
      block->insert_or_assign("signature", std::move(delta->text));
      break;
    case BlockDelta::Kind::input_json:
      partial_json_[index].append(delta->text);
      break;
    case BlockDelta::Kind::citation: {
      if (delta->citation.is_null()) break;
      auto& citations = (*block)["citations"];
      if (!citations.is_array()) citations = json::array{};
      citations.as_array().push_back(std::move(delta->citation));
      break;
    }
    case BlockDelta::Kind::other:
      break;
  }
  return Outcome::applied;
}

ContentAccumulator::Outcome ContentAccumulator::stop(size_t index) {
  auto* block = block_at(index);
  if (!block) return Outcome::no_such_block;
  auto it = partial_json_.find(index);
  if (it == partial_json_.end()) return Outcome::applied;
  boost::system::error_code ec;
  json::value input = it->second.empty() ? json::value(json::object{}) : json::parse(it->second, ec);
  partial_json_.erase(it);
  if (ec || !input.is_object()) return Outcome::bad_input;
  block->insert_or_assign("input", std::move(input));
  return Outcome::applied;
}

json::array ContentAccumulator::take() {
  partial_json_.clear();
  return std::exchange(blocks_, json::array{});
}

}  // namespace sandboxd::messages
