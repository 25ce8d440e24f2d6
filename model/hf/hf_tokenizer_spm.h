// Scores for a SentencePiece-style BPE given as merges (a byte-fallback BPE tokenizer.json, as
// Llama 2's and Mistral's are), for tokenizer.ggml.scores.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace adakv::hf {

// merges: (left, right) in rank order, tokens by id (SentencePiece spelling). Returns one score
// per token:
//   - a token some merge makes scores -(the rank of the first merge that makes it);
//   - every other token (characters, <0xXX> bytes, specials, tokens no merge reaches) scores
//     kUnmergedScore.
//
// Why this is the same tokenization: HF's BPE repeatedly applies, among the adjacent pairs of
// the word, the merge of lowest rank (ties leftmost). adakv's SentencePiece BPE (spm.cpp)
// repeatedly merges the adjacent pair whose concatenation is the token of highest score (ties
// leftmost). With score = -rank the pair HF picks makes the token of highest score, so both
// pick the same pair, as long as each token is made by one merge only or its merges are never
// on offer at once; transformers' converter writes the merges of a SentencePiece vocabulary
// grouped by the token they make, in the vocabulary's score order, so that holds there.
// A token no merge makes would never form in HF; its lowest score makes spm.cpp form it only
// when no pair that HF could merge is on offer, which does not happen for vocabularies whose
// multi-character tokens are all made by merges (SentencePiece's, converted).
std::vector<float> scores_from_merges(
    const std::vector<std::pair<std::string, std::string>>& merges,
    const std::vector<std::string>& tokens);

inline constexpr float kUnmergedScore = -1e9f;

}  // namespace adakv::hf
