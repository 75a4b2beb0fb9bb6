// The log's line formats without a server: the text lines are byte for byte what spdlog's
// default pattern writes (operators' parsers depend on them), the JSON lines parse and
// carry their level, and the numbers are printf's.
#include <gtest/gtest.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/ostream_sink.h>

#include <boost/json.hpp>
#include <chrono>
#include <random>
#include <sstream>
#include <string>

#include "base/utf8.h"
#include "ops/logging.h"

namespace {

using sandboxd::ops::LogField;

std::string formatted(spdlog::formatter& formatter, const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t out;
  formatter.format(msg, out);
  return std::string(out.data(), out.size());
}

TEST(Logging, TextLinesAreWhatSpdlogsDefaultPatternWrites) {
  auto ours = sandboxd::ops::line_formatter(false);
  spdlog::pattern_formatter spdlogs;
  const auto start = std::chrono::system_clock::now();
  int compared = 0;
  // Lines through many seconds (the date is kept per second) and every millisecond digit.
  for (int i = 0; i < 3000; ++i) {
    for (const char* name : {"", "audit-1"}) {
      for (auto level : {spdlog::level::info, spdlog::level::warn, spdlog::level::err}) {
        spdlog::details::log_msg msg(name, level, "request id=req_1 status=200 ms=0.125");
        msg.time = start + std::chrono::milliseconds(i * 997 + 3);
        ASSERT_EQ(formatted(*ours, msg), formatted(spdlogs, msg));
        ++compared;
      }
    }
  }
  // A line with a source location is spdlog's own.
  spdlog::details::log_msg located(spdlog::source_loc{"/src/x/file.cc", 12, "f"}, "", spdlog::level::info,
                                   "m");
  EXPECT_EQ(formatted(*ours, located), formatted(spdlogs, located));
  EXPECT_EQ(compared, 18000);
}

TEST(Logging, JsonLinesCarryTheirLevelAfterTheTime) {
  auto ours = sandboxd::ops::line_formatter(true);
  const std::string event = sandboxd::ops::event_json("execution", {{"owner", std::string_view("al\"ice\n")},
                                                                    {"ms", 12.0625},
                                                                    {"return_code", int64_t{-7}},
                                                                    {"big", int64_t{9007199254740993}},
                                                                    {"truncated", false},
                                                                    {"text", std::string_view("\xff")}});
  spdlog::details::log_msg msg("", spdlog::level::warn, event);
  const std::string line = formatted(*ours, msg);
  ASSERT_EQ(line.back(), '\n');
  const auto object = boost::json::parse(line).as_object();
  EXPECT_EQ(object.at("level"), "warning");
  EXPECT_EQ(object.at("event"), "execution");
  EXPECT_EQ(object.at("owner"), "al\"ice\n");
  EXPECT_EQ(object.at("return_code"), -7);
  EXPECT_EQ(object.at("big"), int64_t{9007199254740993});
  EXPECT_EQ(object.at("truncated"), false);
  EXPECT_EQ(object.at("text"), "\xef\xbf\xbd");
  // The level goes right after the time; the numbers as printf writes them (%.3f: ties
  // to even, 12.0625 -> 12.062).
  EXPECT_NE(line.find("Z\",\"level\":\"warning\",\"event\":\"execution\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"ms\":12.062,"), std::string::npos) << line;
  EXPECT_EQ(line.find("\"time\":\""), 1u) << line;

  spdlog::details::log_msg plain("", spdlog::level::info, "listening on \"x\"");
  const auto wrapped = boost::json::parse(formatted(*ours, plain)).as_object();
  EXPECT_EQ(wrapped.at("msg"), "listening on \"x\"");
  EXPECT_EQ(wrapped.at("level"), "info");
  EXPECT_TRUE(wrapped.contains("time"));
}

// A byte to escape (JSON) or quote (text) is found wherever it stands, in values of
// every length: the whole value is escaped or quoted, or appended as it is.
TEST(Logging, EveryByteToEscapeOrQuoteIsFoundWhereverItStands) {
  std::mt19937 random(7);
  for (size_t length = 0; length < 40; ++length) {
    for (size_t at = 0; at <= length; ++at) {
      for (char special : {'"', '\\', '\n', '\x01', '\x1f', '\x7f', '\x80', '\xff', ' ', '='}) {
        std::string value(length, 'a');
        for (auto& c : value) c = static_cast<char>('0' + random() % 40);  // 0-9 ... W: nothing special
        if (at < length) value[at] = special;
        const auto object =
            boost::json::parse(sandboxd::ops::event_json("e", {{"v", std::string_view(value)}}));
        ASSERT_EQ(std::string(object.at("v").as_string()), sandboxd::to_valid_utf8(value))
            << length << " " << at;
      }
    }
  }
  // The text format quotes a value with a space, a quote, '=' or a newline, wherever it is.
  std::ostringstream out;
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("", std::make_shared<spdlog::sinks::ostream_sink_st>(out));
  logger->set_pattern("%v");
  spdlog::set_default_logger(logger);
  for (size_t at = 0; at < 19; ++at) {
    for (char special : {' ', '"', '=', '\n', 'x'}) {
      std::string value(19, 'v');
      value[at] = special;
      out.str("");
      sandboxd::ops::log_event(spdlog::level::info, "e", {{"k", std::string_view(value)}});
      const std::string line = out.str();
      const bool quoted = line.starts_with("e k=\"");
      EXPECT_EQ(quoted, special != 'x') << line;
    }
  }
  spdlog::set_default_logger(previous);
}

}  // namespace
