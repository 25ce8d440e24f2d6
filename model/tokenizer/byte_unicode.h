// GPT-2's byte-level alphabet and small UTF-8 helpers.
//
// Byte-level BPE vocabularies spell every byte as one printable Unicode character: the
// printable Latin-1 bytes stand for themselves and the other 68 bytes (controls, space, 0x7F-
// 0xA0, 0xAD) take the code points 256, 257, ... in byte order (so ' ' is spelled 'Ġ' U+0120).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace adakv::tokenizer {

// The UTF-8 spelling of one byte in the byte-level alphabet (one character, 1 or 2 bytes).
std::string_view byte_to_unicode(uint8_t byte);

// The byte that a code point stands for in the byte-level alphabet, or -1 if it stands for none.
int unicode_to_byte(uint32_t cp);

// Spells bytes in the byte-level alphabet.
std::string bytes_to_unicode(std::string_view bytes);

// Turns a byte-level spelling back into bytes. Characters outside the alphabet (possible in
// hand-made vocabularies) are kept as their own UTF-8; invalid UTF-8 is copied byte for byte.
std::string unicode_to_bytes(std::string_view spelled);

// Decodes the well-formed UTF-8 character at s[pos]: returns its length (1-4) and sets cp, or
// returns 0 if the bytes there are not a complete, valid character (overlongs, surrogates and
// code points above U+10FFFF are invalid, as in RFC 3629).
size_t utf8_decode(std::string_view s, size_t pos, uint32_t& cp);

// Length of the longest prefix of s that does not end inside a character that could still
// complete: the tail held back is a valid but unfinished UTF-8 sequence (at most 3 bytes).
// Bytes that can never become valid are not held back.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace adakv::tokenizer
