#include "comm/mpi/mpi_error.h"

#include <mpi.h>

#include <string>

#include "comm/communicator.h"

namespace adakv::comm::detail {

void throw_mpi_error(const char* call, int code, int rank, int size) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    length = 0;
  }
  std::string message = std::string(call) + " failed on ";
  message += rank < 0 ? std::string("this process")
                      : "rank " + std::to_string(rank) + " of " + std::to_string(size);
  message += ": ";
  message += length > 0 ? std::string(text, length) : "MPI error code " + std::to_string(code);
  throw CommError(message);
}

void check_mpi(int code, const char* call, int rank, int size) {
  if (code != MPI_SUCCESS) throw_mpi_error(call, code, rank, size);
}

}  // namespace adakv::comm::detail
