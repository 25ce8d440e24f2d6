// Scoring by reconstruction (KVzip, Scoring::kReconstruct): after a context comes an
// instruction to repeat it and the context itself; the queries of that repeat score every token
// of the context, and are rolled back once they have. A context too long to follow with its
// whole repeat within the model's context is repeated in pieces, each after the instruction:
// the cache rolls back to the context between pieces, and each key keeps its largest score.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace adakv::compression {

// The instruction between a context and its repeat (plain text, no chat template).
inline constexpr const char* kRepeatInstruction = "\n\nRepeat the previous context exactly.\n\n";

// The most context tokens repeated after one instruction unless a caller says otherwise (KVzip's
// chunk size). A query of a piece attends over the context and its own piece only, not over the
// pieces before it, so a long context costs fewer query-key pairs than with one whole repeat,
// and the pool holds only one piece beside the context (measured: docs/experiments.md, "Repeats
// in pieces of 2,048 tokens, Qwen2.5 at 8k and 16k").
inline constexpr size_t kDefaultRepeatPiece = 2048;

// A piece shorter than this repeats too little per instruction to be worth it: the context is
// then not scored by reconstruction.
inline constexpr size_t kMinRepeatPiece = 64;

// Attention sinks a piece's queries are normalised over beside their own span
// (ReconstructKeys::kPiece): the first tokens, where heads with nothing to read park attention.
inline constexpr size_t kReconstructSink = 4;

// The context positions [begin, end) whose keys the piece scores under ReconstructKeys::kPiece.
struct PieceSpan {
  size_t begin = 0, end = 0;
};

// Piece `index` of a text repeated in pieces of piece_tokens, the text starting at context
// position text_offset: the span it repeats, the first piece's reaching back to the context's
// start and the last one's (`last`) on to its end, so that the spans cover the n_context
// positions once (a chat template before the text, a turn's end after it).
inline PieceSpan piece_span(size_t index, bool last, size_t piece_tokens, size_t text_offset,
                            size_t n_context) {
  PieceSpan s;
  s.begin = index == 0 ? 0 : std::min(n_context, text_offset + index * piece_tokens);
  s.end = last ? n_context : std::min(n_context, text_offset + (index + 1) * piece_tokens);
  s.end = std::max(s.end, s.begin);
  return s;
}

// Where `text` begins in `context`: the first position holding its first tokens (the first one
// or two of them may be merged differently after a chat template's newline), else 0.
inline size_t text_offset(const std::vector<int32_t>& context, const std::vector<int32_t>& text) {
  constexpr size_t kProbe = 16;
  for (size_t skip = 0; skip < 3 && skip < text.size(); ++skip) {
    const size_t m = std::min(kProbe, text.size() - skip);
    const auto first = text.begin() + long(skip);
    const auto at = std::search(context.begin(), context.end(), first, first + long(m));
    if (at != context.end()) return std::max<size_t>(size_t(at - context.begin()), skip) - skip;
  }
  return 0;
}

// The tokens fed after a context to score it by reconstruction: piece i is the instruction and
// text[i * piece_tokens, (i + 1) * piece_tokens), fed after the context and then rolled back.
struct RepeatPieces {
  std::vector<int32_t> tokens;  // every piece, in order
  std::vector<size_t> ends;     // end of each piece in `tokens` (ascending; the last is its size)
  size_t longest = 0;           // tokens of the longest piece
  size_t piece_tokens = 0;      // text tokens per piece (the last may have fewer)
  size_t text_offset = 0;       // context position of the text's first token

  bool empty() const { return tokens.empty(); }
};

inline RepeatPieces repeat_pieces(const std::vector<int32_t>& instruction,
                                  const std::vector<int32_t>& text, size_t piece_tokens,
                                  size_t text_offset = 0) {
  RepeatPieces r;
  piece_tokens = std::max<size_t>(piece_tokens, 1);
  r.piece_tokens = piece_tokens;
  r.text_offset = text_offset;
  for (size_t at = 0; at < text.size(); at += piece_tokens) {
    const size_t end = std::min(text.size(), at + piece_tokens);
    r.tokens.insert(r.tokens.end(), instruction.begin(), instruction.end());
    r.tokens.insert(r.tokens.end(), text.begin() + long(at), text.begin() + long(end));
    r.ends.push_back(r.tokens.size());
    r.longest = std::max(r.longest, instruction.size() + end - at);
  }
  return r;
}

// The longest piece that follows an n_context-token context within a model context of
// `model_context` tokens, for a text of text_tokens (0: none fits kMinRepeatPiece).
inline size_t repeat_piece_tokens(size_t n_context, size_t text_tokens, size_t instruction_tokens,
                                  size_t model_context) {
  const size_t used = n_context + instruction_tokens;
  if (used >= model_context) return 0;
  const size_t piece = std::min(text_tokens, model_context - used);
  return piece >= std::min(text_tokens, kMinRepeatPiece) ? piece : 0;
}

}  // namespace adakv::compression
