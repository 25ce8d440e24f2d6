// What tests running as ranks of an mpirun job (tests/mpi, tests/gpu) share, set up by
// mpi_test_main.cpp before RUN_ALL_TESTS: this rank's World and a communicator over all ranks.
//
// Every rank runs every test; a test that calls a collective must make the same calls on
// every rank (never return early on one rank only: agree first, e.g. with an all_reduce max).
#pragma once

#include "comm/communicator.h"
#include "comm/world.h"

namespace adakv::test {

// This rank's place in the job (device -1: tests pick their own).
comm::World test_world();
// The MPI communicator over every rank of the job (backend "mpi").
comm::Communicator& test_comm();

}  // namespace adakv::test
