// Answer scoring of the retrieval tasks: the numbers a model wrote, and whether one of them is
// the expected key.
#pragma once

#include <string>
#include <vector>

namespace adakv::eval {

// The maximal digit runs of `text`, in order; a comma between two digits is a thousands
// separator and is dropped ("1,234,567" -> "1234567").
std::vector<std::string> extract_numbers(const std::string& text);

// True when one of the numbers in `output` is exactly `answer` (a longer number that merely
// contains it does not count).
bool is_correct(const std::string& output, const std::string& answer);

}  // namespace adakv::eval
