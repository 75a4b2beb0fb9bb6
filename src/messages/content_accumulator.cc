#include "messages/content_accumulator.h"

#include <string_view>
#include <utility>

namespace sandboxd::messages {

namespace json = boost::json;

boost::system::result<BlockDelta> tag_invoke(json::try_value_to_tag<BlockDelta>, const json::value& value) {
  if (!value.is_object()) return json::make_error_code(json::error::not_object);
  const auto& object = value.as_object();
  auto* type = object.if_contains("type");
  if (!type || !type->is_string()) return json::make_error_code(json::error::not_string);
  auto string_at = [&](const char* key) {
    auto* v = object.if_contains(key);
    return v && v->is_string() ? std::string(v->as_string()) : std::string();
  };
  BlockDelta delta;
  const std::string_view kind = type->as_string();
  if (kind == "text_delta") {
    delta.kind = BlockDelta::Kind::text;
    delta.text = string_at("text");
  } else if (kind == "thinking_delta") {
    delta.kind = BlockDelta::Kind::thinking;
    delta.text = string_at("thinking");
  } else if (kind == "signature_delta") {
    delta.kind = BlockDelta::Kind::signature;
    delta.text = string_at("signature");
  } else if (kind == "input_json_delta") {
    delta.kind = BlockDelta::Kind::input_json;
    delta.text = string_at("partial_json");
  } else if (kind == "citations_delta") {
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
