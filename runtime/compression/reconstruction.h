// Scoring by reconstruction (KVzip, Scoring::kReconstruct): after a context comes an
// instruction to repeat it and the context itself; the queries of that repeat score every token
// of the context, and are rolled back once they have.
#pragma once

namespace adakv::compression {

// The instruction between a context and its repeat (plain text, no chat template).
inline constexpr const char* kRepeatInstruction = "\n\nRepeat the previous context exactly.\n\n";

}  // namespace adakv::compression
