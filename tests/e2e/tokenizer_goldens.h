// Checking a tokenizer against the JSONL goldens of tests/tools/gen_tokenizer_goldens.py (one
// line per string: text_b64, parse_special, ids; chat lines also carry the messages that render
// to the text). Shared by the tokenizer oracle tests of each model.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "model/tokenizer/byte_unicode.h"
#include "model/tokenizer/tokenizer.h"

namespace adakv::test {

inline std::string base64_decode(const std::string& in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

inline std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7F && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    }
  }
  return out;
}

// Bytes whose single-byte token the vocabulary lacks: encode drops them (see the golden script).
inline std::set<unsigned char> unencodable_bytes(const tokenizer::Tokenizer& tok) {
  std::set<std::string> tokens(tok.vocab().tokens.begin(), tok.vocab().tokens.end());
  std::set<unsigned char> out;
  for (int b = 0; b < 256; ++b) {
    const auto spelled = tokenizer::byte_to_unicode(static_cast<uint8_t>(b));
    if (tokens.count(std::string(spelled)) == 0) out.insert(static_cast<unsigned char>(b));
  }
  return out;
}

struct GoldenCounts {
  int lines = 0, encode_ok = 0, round_trip_ok = 0, invalid_utf8 = 0, chats = 0;
};

// Every line of the goldens at `path`: encode gives the ids, decode gives the text back (less
// the unencodable bytes), and a chat line's messages render to its text with the file's chat
// template. Failures are gtest failures naming the line.
inline GoldenCounts check_tokenizer_goldens(const tokenizer::Tokenizer& tok,
                                            const std::string& path) {
  GoldenCounts n;
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot read " << path;
  const std::set<unsigned char> dropped = unencodable_bytes(tok);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++n.lines;
    const auto j = nlohmann::json::parse(line);
    const std::string text = base64_decode(j.at("text_b64").get<std::string>());
    const bool parse_special = j.at("parse_special").get<bool>();
    const auto expected = j.at("ids").get<std::vector<int32_t>>();
    SCOPED_TRACE("line " + std::to_string(n.lines) + ": \"" + printable(text) + "\"");

    const std::vector<int32_t> ids = tok.encode(text, parse_special);
    EXPECT_EQ(ids, expected);
    n.encode_ok += ids == expected;

    std::string want;
    for (unsigned char c : text) {
      if (dropped.count(c) == 0) want.push_back(static_cast<char>(c));
    }
    const std::string back = tok.decode(ids);
    EXPECT_EQ(printable(back), printable(want));
    n.round_trip_ok += back == want;
    n.invalid_utf8 += j.value("invalid_utf8", false);

    if (j.contains("chat")) {
      ++n.chats;
      std::vector<tokenizer::ChatMessage> messages;
      for (const auto& m : j.at("chat")) {
        messages.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
      }
      EXPECT_EQ(tok.chat_template().render(messages, j.at("add_generation_prompt").get<bool>()),
                text);
    }
  }
  return n;
}

}  // namespace adakv::test
