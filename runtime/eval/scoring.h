// Answer scoring of the retrieval tasks: the numbers a model wrote, and whether one of them is
// the expected key.
#pragma once

#include <string>
#include <vector>

namespace adakv::eval {

// The maximal digit runs of `text`, in order; a comma between two digits is a thousands
// separator and is dropped ("1,234,567" -> "1234567").
std::vector<std::string> extract_numbers(const std::string& text);

// True when one of the numbers in `output` contains `answer`: the key appears in what the
// model wrote, the string match of RULER and LongBench's passkey scoring. A number that runs
// on past the key ("12345000" for 12345) counts; one with a digit missing or changed does not.
bool is_correct(const std::string& output, const std::string& answer);

}  // namespace adakv::eval
