#!/bin/bash
# The NCCL communicator tests (label `gpu`) on a GPU machine that has the CUDA driver, the
# toolkit and the `nvidia-nccl-cu13` Python wheel but no MPI and no network (how they first ran,
# on one H200). Two steps:
#   here:  tests/tools/gpu_tests_on_bare_machine.sh prepare DIR   (after building build/)
#   there: tests/tools/gpu_tests_on_bare_machine.sh run DIR [RANKS]   (one rank per GPU)
# `prepare` puts the test binary and the Open MPI 4.1 Debian packages in DIR; `run` unpacks
# them without overwriting anything there, finds NCCL and cudart, and runs the tests.
set -euo pipefail
mode=${1:?usage: $0 prepare|run DIR [RANKS]}
dir=${2:?usage: $0 prepare|run DIR [RANKS]}
case "$mode" in
  prepare)
    mkdir -p "$dir/debs"
    cp build/tests/gpu/adakv_gpu_tests "$dir/"
    (cd "$dir/debs" && apt-get download openmpi-bin libopenmpi3 openmpi-common libpmix2 \
      libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libfabric1 \
      libibverbs1 libmunge2 libnl-3-200 libnl-route-3-200 libucx0 libpsm2-2 libpsm-infinipath1 \
      libudev1)
    ;;
  run)
    root=$(mktemp -d)
    for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$root"; done
    (cd "$root/usr" && cp -an . /usr/)
    (cd "$root/lib" && cp -an . /usr/lib/)
    (cd "$root/etc" && cp -an . /etc/)
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))')
    cudart=$(dirname "$(find / -name 'libcudart.so.13' -not -path '/proc/*' 2>/dev/null | head -1)")
    export LD_LIBRARY_PATH=$nccl:$cudart:/usr/lib/x86_64-linux-gnu
    export OMPI_MCA_btl_vader_single_copy_mechanism=none
    timeout 300 /usr/bin/orterun --allow-run-as-root --oversubscribe --bind-to none \
      -np "${3:-1}" -x LD_LIBRARY_PATH "$dir/adakv_gpu_tests"
    ;;
  *) echo "unknown mode '$mode' (prepare|run)" >&2; exit 2 ;;
esac
