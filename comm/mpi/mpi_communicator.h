// The MPI implementation of Communicator: host buffers, MPI_COMM_WORLD's ranks. Created by
// MpiJob::communicator(); this header exists for that and for tests (no MPI types here).
//
// Preconditions: MPI is initialized (an MpiJob exists) and the calling thread is the one
// that initialized it. Every MPI return code is checked: a failure throws CommError
// "MPI_<Call> failed on rank R of N: <MPI error string>". Sizes 0 are no-ops. Counts above
// what one MPI call takes (int) are split into several calls.
#pragma once

#include <climits>
#include <cstddef>
#include <memory>

#include "comm/communicator.h"

namespace adakv::comm {

// The most elements (floats, bytes) one MPI call carries.
inline constexpr size_t kMpiMaxCount = INT_MAX;

// Duplicates MPI_COMM_WORLD (collective). `max_count` (1..kMpiMaxCount) caps the elements
// per MPI call; tests lower it to exercise the splitting of large buffers.
std::unique_ptr<Communicator> make_mpi_world_communicator(size_t max_count = kMpiMaxCount);

// The ranks of MPI_COMM_WORLD that pass the same `color`, ordered by `key` (MPI_Comm_split;
// collective over the whole world): a tensor-parallel group, a pipeline's stages.
std::unique_ptr<Communicator> make_mpi_split_communicator(int color, int key);

}  // namespace adakv::comm
