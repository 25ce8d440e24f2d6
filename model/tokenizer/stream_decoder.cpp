#include <utility>

#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/tokenizer.h"

namespace adakv::tokenizer {

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  const size_t ready = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, ready);
  pending_.erase(0, ready);
  return out;
}

std::string StreamDecoder::flush() {
  return std::exchange(pending_, std::string());
}

}  // namespace adakv::tokenizer
