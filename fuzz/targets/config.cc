// The YAML configuration file: a bad one is a ConfigError with a message, never a crash.
#include <string>

#include "ops/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)sandboxd::ops::parse_config(std::string(reinterpret_cast<const char*>(data), size));
  } catch (const sandboxd::ops::ConfigError&) {
  }
  return 0;
}
