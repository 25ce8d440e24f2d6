// adakv_cluster_probe: a tiny MPI program for the cluster tests. Every rank reports where it
// runs (its network namespace, IPv4 addresses and local rank); rank 0 prints one line per rank
// and the ranks check, together, what the test expects:
//   --expect-ranks N        the job has N ranks
//   --expect-nodes K        the ranks run in K distinct network namespaces (simulated nodes)
//   --expect-env NAME=VAL   every rank sees NAME=VAL (mpirun -x reached it)
// An all-reduce and an all-gather cross every node, so a pass also means MPI traffic flows.
// Exit code 0 when every check passes on every rank, 1 otherwise.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

constexpr int kLine = 256;

struct Expect {
  int ranks = -1;
  int nodes = -1;
  std::vector<std::string> env;  // NAME=VALUE
};

unsigned long long netns_inode() {
  struct stat st {};
  return stat("/proc/self/ns/net", &st) == 0 ? static_cast<unsigned long long>(st.st_ino) : 0;
}

std::string ipv4_addresses() {
  std::string out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "?";
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
    if (std::string(buf) == "127.0.0.1") continue;
    out += (out.empty() ? "" : ",") + std::string(buf);
  }
  freeifaddrs(list);
  return out.empty() ? "-" : out;
}

bool parse_args(int argc, char** argv, Expect& e) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return false;
    if (a == "--expect-ranks") {
      e.ranks = std::atoi(argv[++i]);
    } else if (a == "--expect-nodes") {
      e.nodes = std::atoi(argv[++i]);
    } else if (a == "--expect-env") {
      e.env.push_back(argv[++i]);
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  Expect expect;
  int ok = 1;
  std::string problems;
  if (!parse_args(argc, argv, expect)) {
    ok = 0;
    problems += " bad arguments (--expect-ranks N --expect-nodes K --expect-env NAME=VALUE);";
  }
  for (const auto& kv : expect.env) {
    const auto eq = kv.find('=');
    const char* got = std::getenv(kv.substr(0, eq).c_str());
    if (eq == std::string::npos || !got || kv.substr(eq + 1) != got) {
      ok = 0;
      problems += " env " + kv + " but got " + (got ? got : "(unset)") + ";";
    }
  }

  const unsigned long long inode = netns_inode();
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  char line[kLine] = {};
  std::snprintf(line, sizeof line, "rank %d/%d local_rank %s netns %llu addrs %s%s", rank, size,
                local ? local : "?", inode, ipv4_addresses().c_str(),
                problems.empty() ? "" : (" FAIL:" + problems).c_str());

  std::vector<unsigned long long> inodes(size);
  MPI_Allgather(&inode, 1, MPI_UNSIGNED_LONG_LONG, inodes.data(), 1, MPI_UNSIGNED_LONG_LONG,
                MPI_COMM_WORLD);
  std::vector<char> lines(rank == 0 ? static_cast<size_t>(size) * kLine : 1);
  MPI_Gather(line, kLine, MPI_CHAR, lines.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD);
  long long rank_sum = rank + 1;
  MPI_Allreduce(MPI_IN_PLACE, &rank_sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);

  const int nodes =
      static_cast<int>(std::set<unsigned long long>(inodes.begin(), inodes.end()).size());
  if (rank_sum != static_cast<long long>(size) * (size + 1) / 2) ok = 0;
  if (expect.ranks >= 0 && size != expect.ranks) ok = 0;
  if (expect.nodes >= 0 && nodes != expect.nodes) ok = 0;
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  if (rank == 0) {
    for (int r = 0; r < size; ++r) std::printf("cluster probe: %s\n", &lines[r * kLine]);
    std::printf("cluster probe: %d ranks in %d network namespaces (expected %d ranks, %d)\n", size,
                nodes, expect.ranks, expect.nodes);
    std::printf("cluster probe: %s\n", all_ok ? "OK" : "FAILED");
    std::fflush(stdout);
  }
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
