// Needle in a haystack: "The special magic number of <city> is <7 digits>." hidden at a chosen
// depth in varied English prose, then "What is the special magic number of <city>? Answer with
// the number.".
//
// The prose is read at run time from text files; by default the license texts under
// /usr/share/common-licenses, which Debian's base-files (an essential package) installs on
// every Debian machine. Nothing of it is copied into the project.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/eval/prompt_builder.h"

namespace adakv::eval {

// The default haystack files, those of them that exist on this machine.
std::vector<std::string> default_haystack_files();

// The sentences of the prose paragraphs of `paths`, in order: paragraphs are separated by
// blank lines, whitespace is collapsed, and paragraphs that are mostly not words (headings,
// rules, section numbers) are dropped. Throws std::runtime_error naming an unreadable file, or
// when the files hold no prose at all.
std::vector<std::string> load_sentences(const std::vector<std::string>& paths);

// A prompt of `target_tokens` (as `count` measures it) with the needle at `depth` in [0, 1];
// the city, the number and the sentence the haystack starts from are drawn from `seed`.
Sample make_niah(const std::vector<std::string>& sentences, size_t target_tokens, double depth,
                 uint64_t seed, const TokenCounter& count);

}  // namespace adakv::eval
