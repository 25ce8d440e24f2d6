#include "runtime/server/replica_set.h"

#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

namespace adakv::server {

namespace {

// Free blocks once the requests routed since the last poll are charged (choose_replica).
double expected_free(const ReplicaLoad& l) {
  const double seen = l.running + l.waiting;
  const double unseen = l.in_flight > seen ? double(l.in_flight) - seen : 0.0;
  const double per_request = l.running > 0 ? (l.total_blocks - l.free_blocks) / l.running : 0.0;
  return l.free_blocks - unseen * per_request;
}

// SplitMix64's finaliser: a well-mixed 64-bit hash of x.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::optional<size_t> choose_replica(const std::vector<ReplicaLoad>& loads, uint64_t affinity) {
  std::optional<size_t> best;
  double best_free = 0;
  for (size_t i = 0; i < loads.size(); ++i) {
    const ReplicaLoad& l = loads[i];
    if (!l.up) continue;
    const double free = expected_free(l);
    if (!best || free > best_free || (free == best_free && l.in_flight < loads[*best].in_flight)) {
      best = i;
      best_free = free;
    }
  }
  if (!best || affinity == 0) return best;
  std::optional<size_t> home;
  for (size_t i = 0; i < loads.size(); ++i) {
    if (loads[i].up && (!home || mix(affinity ^ mix(i)) > mix(affinity ^ mix(*home)))) home = i;
  }
  return expected_free(loads[*home]) >= 0.5 * best_free ? home : best;
}

uint64_t context_affinity(const std::string& body) {
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return 0;
  const auto compress = j.find("kv_compress_context");
  if (compress == j.end() || !compress->is_boolean() || !compress->get<bool>()) return 0;
  std::string named;
  if (const auto m = j.find("messages"); m != j.end() && m->is_array() && !m->empty()) {
    named = "chat:" + (*m)[0].dump();
  } else if (const auto p = j.find("prompt"); p != j.end() && p->is_string()) {
    named = "prompt:" + p->get<std::string>().substr(0, 1024);
  } else {
    return 0;
  }
  const uint64_t h = std::hash<std::string>{}(named);
  return h == 0 ? 1 : h;
}

namespace {

struct Sample {
  std::string name, labels;  // labels without braces ("" when none)
  double value = 0;
};

std::optional<Sample> parse_sample(const std::string& line) {
  static const std::regex form(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)\s*$)");
  std::smatch m;
  if (!std::regex_match(line, m, form)) return std::nullopt;
  try {
    return Sample{m[1], m[2], std::stod(m[3])};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string format_value(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

std::string series(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

}  // namespace

std::string merge_replica_metrics(const std::vector<std::string>& texts) {
  // Families in first-seen order; within each, its comment lines, then its series.
  struct Family {
    std::vector<std::string> comments;
    std::vector<std::string> order;        // series keys, first-seen order
    std::map<std::string, double> total;   // series -> sum over replicas
    std::vector<std::string> per_replica;  // labelled lines
  };
  std::vector<std::string> family_order;
  std::map<std::string, Family> families;
  auto family_of = [&](const std::string& sample_name) -> Family& {
    // A histogram's _bucket/_sum/_count samples belong to its family.
    std::string base = sample_name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (base.size() > s.size() && base.compare(base.size() - s.size(), s.size(), s) == 0 &&
          families.count(base.substr(0, base.size() - s.size()))) {
        base.resize(base.size() - s.size());
        break;
      }
    }
    if (!families.count(base)) family_order.push_back(base);
    return families[base];
  };
  for (size_t r = 0; r < texts.size(); ++r) {
    std::istringstream in(texts[r]);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      if (line[0] == '#') {
        if (r != 0) continue;
        std::istringstream words(line);
        std::string hash, kind, name;
        words >> hash >> kind >> name;
        if (name.empty()) continue;
        family_of(name).comments.push_back(line);
        continue;
      }
      const auto s = parse_sample(line);
      if (!s) continue;
      Family& f = family_of(s->name);
      const std::string key = series(s->name, s->labels);
      if (!f.total.count(key)) f.order.push_back(key);
      f.total[key] += s->value;
      const std::string labelled =
          "replica=\"" + std::to_string(r) + "\"" + (s->labels.empty() ? "" : "," + s->labels);
      f.per_replica.push_back(series(s->name, labelled) + " " + format_value(s->value));
    }
  }
  std::string out;
  for (const auto& name : family_order) {
    const Family& f = families[name];
    for (const auto& c : f.comments) out += c + "\n";
    for (const auto& key : f.order) out += key + " " + format_value(f.total.at(key)) + "\n";
    for (const auto& l : f.per_replica) out += l + "\n";
  }
  return out;
}

ReplicaSet::ReplicaSet(std::vector<HttpEndpoint> replicas)
    : endpoints_(std::move(replicas)), loads_(endpoints_.size()), routed_(endpoints_.size()) {}

std::vector<std::string> ReplicaSet::poll(double timeout_s) {
  std::vector<std::string> texts(endpoints_.size());
  for (size_t i = 0; i < endpoints_.size(); ++i) {
    ReplicaLoad seen;
    std::string why;
    try {
      auto [status, body] = http_get(endpoints_[i], "/metrics", timeout_s);
      if (status == 200) {
        seen.up = true;
        std::istringstream in(body);
        std::string line;
        while (std::getline(in, line)) {
          const auto s = parse_sample(line);
          if (!s || !s->labels.empty()) continue;
          if (s->name == "adakv:kv_cache_free_blocks") seen.free_blocks = s->value;
          if (s->name == "adakv:kv_cache_total_blocks") seen.total_blocks = s->value;
          if (s->name == "adakv:num_requests_running") seen.running = s->value;
          if (s->name == "adakv:num_requests_waiting") seen.waiting = s->value;
        }
        texts[i] = std::move(body);
      }
      // /metrics answers while the engine drains or after it died: /health says whether the
      // replica takes requests.
      if (status != 200) why = "/metrics answered " + std::to_string(status);
      if (seen.up && http_get(endpoints_[i], "/health", timeout_s).first != 200) {
        seen.up = false;
        why = "/health does not answer 200";
      }
    } catch (const std::exception& e) {
      seen.up = false;
      why = e.what();
    }
    std::lock_guard lock(mu_);
    seen.in_flight = loads_[i].in_flight;
    if (seen.up != loads_[i].up || !polled_) {
      std::fprintf(stderr, "[adakv] replica %zu (%s) is %s%s\n", i, endpoints_[i].url().c_str(),
                   seen.up ? "up" : "down", seen.up || why.empty() ? "" : (": " + why).c_str());
    }
    loads_[i] = seen;
  }
  std::lock_guard lock(mu_);
  polled_ = true;
  return texts;
}

std::optional<size_t> ReplicaSet::acquire(uint64_t affinity) {
  std::lock_guard lock(mu_);
  const auto i = choose_replica(loads_, affinity);
  if (i) {
    ++loads_[*i].in_flight;
    ++routed_[*i];
  }
  return i;
}

void ReplicaSet::release(size_t i) {
  std::lock_guard lock(mu_);
  if (loads_.at(i).in_flight > 0) --loads_[i].in_flight;
}

void ReplicaSet::mark_down(size_t i) {
  std::lock_guard lock(mu_);
  loads_.at(i).up = false;
}

std::vector<ReplicaLoad> ReplicaSet::loads() const {
  std::lock_guard lock(mu_);
  return loads_;
}

size_t ReplicaSet::routed(size_t i) const {
  std::lock_guard lock(mu_);
  return routed_.at(i);
}

}  // namespace adakv::server
