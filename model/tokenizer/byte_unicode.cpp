#include "model/tokenizer/byte_unicode.h"

#include <array>

namespace adakv::tokenizer {

namespace {

// Code points up to 323 (= 256 + 68 - 1) are the whole alphabet.
constexpr uint32_t kAlphabetEnd = 256 + 68;

bool printable_latin1(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

struct Alphabet {
  std::array<std::string, 256> spelling;
  std::array<int16_t, kAlphabetEnd> byte_of;

  Alphabet() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable_latin1(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(cp, spelling[b]);
      byte_of[cp] = static_cast<int16_t>(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

bool is_cont(uint8_t c) {
  return (c & 0xC0) == 0x80;
}

// Expected length of a sequence starting with lead byte c, 0 if c cannot start one. The valid
// range of the second byte is narrowed for E0, ED, F0 and F4 (no overlongs, no surrogates,
// nothing above U+10FFFF).
size_t seq_len(uint8_t c, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) {
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    return 4;
  }
  return 0;
}

}  // namespace

std::string_view byte_to_unicode(uint8_t byte) {
  return alphabet().spelling[byte];
}

int unicode_to_byte(uint32_t cp) {
  return cp < kAlphabetEnd ? alphabet().byte_of[cp] : -1;
}

std::string bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += byte_to_unicode(static_cast<uint8_t>(c));
  return out;
}

std::string unicode_to_bytes(std::string_view spelled) {
  std::string out;
  out.reserve(spelled.size());
  size_t pos = 0;
  while (pos < spelled.size()) {
    uint32_t cp = 0;
    const size_t n = utf8_decode(spelled, pos, cp);
    if (n == 0) {
      out.push_back(spelled[pos++]);
      continue;
    }
    const int b = unicode_to_byte(cp);
    if (b >= 0) {
      out.push_back(static_cast<char>(b));
    } else {
      out.append(spelled.substr(pos, n));
    }
    pos += n;
  }
  return out;
}

size_t utf8_decode(std::string_view s, size_t pos, uint32_t& cp) {
  const auto c0 = static_cast<uint8_t>(s[pos]);
  uint8_t lo = 0, hi = 0;
  const size_t n = seq_len(c0, lo, hi);
  if (n == 0 || pos + n > s.size()) return 0;
  if (n == 1) {
    cp = c0;
    return 1;
  }
  const auto c1 = static_cast<uint8_t>(s[pos + 1]);
  if (c1 < lo || c1 > hi) return 0;
  cp = c0 & (0xFF >> (n + 1));
  for (size_t i = 1; i < n; ++i) {
    const auto c = static_cast<uint8_t>(s[pos + i]);
    if (!is_cont(c)) return 0;
    cp = (cp << 6) | (c & 0x3F);
  }
  return n;
}

size_t utf8_complete_prefix(std::string_view s) {
  // An unfinished character is at most 3 bytes: a lead byte and up to 2 continuation bytes.
  const size_t size = s.size();
  for (size_t back = 1; back <= 3 && back <= size; ++back) {
    const size_t p = size - back;
    const auto c = static_cast<uint8_t>(s[p]);
    if (is_cont(c)) continue;
    uint8_t lo = 0, hi = 0;
    const size_t n = seq_len(c, lo, hi);
    if (n <= back) return size;  // ASCII, an invalid lead, or a sequence already complete
    if (back >= 2) {
      const auto c1 = static_cast<uint8_t>(s[p + 1]);
      if (c1 < lo || c1 > hi) return size;  // can never become valid
    }
    return p;
  }
  return size;
}

}  // namespace adakv::tokenizer
