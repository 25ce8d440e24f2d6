// What the router knows of its replicas (independent `adakv serve` engines): whether each is
// up, its KV pool as its /metrics last showed it, and the requests routed to it and not yet
// answered. Thread-safe; the policy in choose() is pure and unit-tested.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/server/http_client.h"

namespace adakv::server {

struct ReplicaLoad {
  bool up = false;
  double free_blocks = 0, total_blocks = 0;  // rank 0's pool: kept blocks are what Ada-KV holds
  double running = 0, waiting = 0;           // as of the last poll
  size_t in_flight = 0;                      // routed here and not yet answered
};

// The replica to send the next request to: among those up, the most free KV blocks once the
// requests routed since its last poll (in_flight beyond running + waiting) are charged at the
// blocks its running requests hold on average; ties go to fewer requests in flight, then to the
// lower index. nullopt when none is up.
//
// A request about a compressed context (`affinity` != 0: a hash of what names the context, see
// context_affinity()) goes where that context is cached: among the replicas up, the one that
// rendezvous hashing of `affinity` ranks first, so every request about it agrees while the set
// of replicas up stays the same; unless that replica has less than half the free blocks the
// load rule's choice has, when the load rule decides.
std::optional<size_t> choose_replica(const std::vector<ReplicaLoad>& loads, uint64_t affinity = 0);

// The affinity of a request body (JSON text) that asks for a compressed context
// ("kv_compress_context": true): a hash of its first chat message (where the document or
// system prompt of every turn of a chat sits), or of a completion's first 1024 bytes of prompt.
// 0 for any other request, or a body that is no such JSON.
uint64_t context_affinity(const std::string& body);

// Prometheus text of several replicas -> one: each sample once per replica with a
// replica="i" label, and once without it summed over the replicas (HELP/TYPE once per family).
std::string merge_replica_metrics(const std::vector<std::string>& texts);

class ReplicaSet {
 public:
  explicit ReplicaSet(std::vector<HttpEndpoint> replicas);

  size_t size() const { return endpoints_.size(); }
  const HttpEndpoint& endpoint(size_t i) const { return endpoints_.at(i); }

  // Reads each replica's /metrics (timeout_s each); a replica that does not answer 200 is down.
  // Returns their texts ("" for one that is down).
  std::vector<std::string> poll(double timeout_s);
  // Picks a replica (choose_replica) and counts the request as in flight there (nullopt: none
  // is up).
  std::optional<size_t> acquire(uint64_t affinity = 0);
  void release(size_t i);
  // The request could not reach replica i: it is down until a poll finds it again.
  void mark_down(size_t i);
  std::vector<ReplicaLoad> loads() const;
  size_t routed(size_t i) const;

 private:
  std::vector<HttpEndpoint> endpoints_;
  mutable std::mutex mu_;
  std::vector<ReplicaLoad> loads_;
  std::vector<size_t> routed_;
  bool polled_ = false;  // the first poll reports every replica, later ones the changes
};

}  // namespace adakv::server
