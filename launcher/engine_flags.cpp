#include "launcher/engine_flags.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace adakv::cli {
namespace {

// MemAvailable of /proc/meminfo in MiB (0 when unreadable).
double available_mib() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib / 1024;
  }
  return 0;
}

// Ranks of this job on this node (mpirun and srun say; 1 otherwise).
int local_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"}) {
    if (const char* v = std::getenv(var)) {
      const int n = std::atoi(v);
      if (n > 0) return n;
    }
  }
  return 1;
}

}  // namespace

void EngineFlags::add_to(CLI::App* app) {
  app->add_option("--kv-pool-mb", kv_pool_mb,
                  "KV block pool per rank in MiB, for every sequence in flight (default: " +
                      std::to_string(int(kDefaultPoolShare * 100)) +
                      "% of the memory available at start, split among this node's ranks)");
  app->add_option("--max-num-seqs", max_num_seqs, "Sequences in flight at most (default 64)");
  app->add_option("--max-num-batched-tokens", max_num_batched_tokens,
                  "Tokens in one step's forward: decodes first, then prompt chunks (default 2048)");
  app->add_option("--prefill-chunk", prefill_chunk,
                  "Longer prompts are prefilled in chunks of this many tokens (default 512)");
  app->add_flag("--no-prefix-caching", no_prefix_caching,
                "Do not keep the blocks of prompts kept whole for later prompts with the same "
                "beginning (prefix caching is on by default)");
  app->add_option("--kv-context-tail", context_tail,
                  "A cached compressed context (kv_compress_context) serves a later context that "
                  "goes on for at most this many tokens more; longer, it is compressed anew "
                  "(default 1024)");
  app->add_option("--kv-repeat-piece", repeat_piece,
                  "A context scored by reconstruction (--context-scoring) is repeated after "
                  "itself in pieces of at most this many tokens, which the pool holds on top of "
                  "the context while it is scored (default 2048; 0: as many as fit the model's "
                  "context)");
}

runtime::ServingConfig EngineFlags::config(const model::ModelConfig& local,
                                           kernels::KvDtype dtype) const {
  runtime::ServingConfig c;
  c.kv_dtype = dtype;
  const kernels::KvBlockLayout layout{c.block_tokens, local.head_dim, dtype};
  double mib = kv_pool_mb;
  if (mib < 0) throw std::invalid_argument("--kv-pool-mb must be > 0");
  if (mib == 0) mib = kDefaultPoolShare * available_mib() / local_ranks();
  c.kv_pool_blocks = size_t(mib * 1048576.0 / double(layout.block_bytes()));
  if (c.kv_pool_blocks == 0) {
    throw std::invalid_argument("--kv-pool-mb " + std::to_string(mib) +
                                " holds no KV block (one takes " +
                                std::to_string(layout.block_bytes()) + " bytes)");
  }
  c.max_num_seqs = max_num_seqs;
  c.max_num_batched_tokens = max_num_batched_tokens;
  c.prefill_chunk = prefill_chunk;
  c.prefix_caching = !no_prefix_caching;
  c.context_tail = context_tail;
  c.context_repeat_piece = repeat_piece;
  if (max_num_seqs == 0) throw std::invalid_argument("--max-num-seqs must be >= 1");
  if (max_num_batched_tokens == 0) {
    throw std::invalid_argument("--max-num-batched-tokens must be >= 1");
  }
  if (prefill_chunk == 0) throw std::invalid_argument("--prefill-chunk must be >= 1");
  return c;
}

std::string describe_pool(const runtime::ServingConfig& c, const model::ModelConfig& local,
                          const std::string& dtype) {
  const size_t block_bytes =
      kernels::KvBlockLayout{c.block_tokens, local.head_dim, c.kv_dtype}.block_bytes();
  char line[256];
  std::snprintf(line, sizeof line,
                "KV pool: %zu blocks (%.0f MiB per rank, %s), max %zu sequences, %zu tokens per "
                "step, prefill chunks of %zu, prefix caching %s",
                c.kv_pool_blocks, double(c.kv_pool_blocks * block_bytes) / 1048576.0, dtype.c_str(),
                c.max_num_seqs, c.max_num_batched_tokens, c.prefill_chunk,
                c.prefix_caching ? "on" : "off");
  return line;
}

}  // namespace adakv::cli
