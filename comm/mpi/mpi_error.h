// Turns a failed MPI call into CommError. Internal to comm/mpi/ (no MPI types here: the
// error code is MPI's int).
#pragma once

namespace adakv::comm::detail {

// Throws CommError "<call> failed on rank R of N: <MPI_Error_string(code)>"; rank < 0 means
// the rank is not known yet ("on this process").
[[noreturn]] void throw_mpi_error(const char* call, int code, int rank, int size);

// Throws as above when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* call, int rank, int size);

}  // namespace adakv::comm::detail
