// File keys and ids (the Files API's names): validation, key <-> sandbox path, and the
// id <-> path mapping, which must be exact for every byte string (ids reach files).
#include <cstdlib>
#include <string>

#include "store/keys.h"

using namespace sandboxd::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  if (validate_key(input).empty()) {
    std::string path = sandbox_path_for_key(input);
    auto key = key_for_sandbox_path(path);
    if (!key) abort();  // every valid key has a path that maps back to a key
    if (file_id_for_path(path).empty()) abort();
  }
  (void)key_for_sandbox_path(input);
  // Ids: what a client sends is decoded or refused; an id made by the server decodes to
  // exactly its path.
  (void)path_for_file_id(input);
  std::string path = "/" + std::string(input);
  auto back = path_for_file_id(file_id_for_path(path));
  if (path.find('\0') == std::string::npos && (!back || *back != path)) abort();  // paths hold no NUL
  auto decoded = base64url_decode(input);
  if (decoded && base64url_decode(base64url_encode(*decoded)) != decoded) abort();
  return 0;
}
