// The serving loop behind its thread-safe door (runtime/server/front_door.h) as `adakv serve`
// drives it: HTTP threads submit, abort and render the metrics while one engine thread runs the
// loop, on a one-layer synthetic model built in memory (no model file). The unit suite, its
// ASan build and the ThreadSanitizer build (tests/sanitizers/run_tsan.sh) all run it.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/server/front_door.h"
#include "runtime/worker.h"
#include "tests/fuzz/targets/fuzz_model.h"

namespace adakv::server {
namespace {

// How each request ended, written by the engine thread's callbacks and read by the test's.
class Ledger {
 public:
  void end(uint64_t ticket, const std::string& how) {
    std::lock_guard lock(mu_);
    ends_[ticket].push_back(how);
    changed_.notify_all();
  }
  // With hold(n): once n requests have a token, the engine thread waits here until release(),
  // so that the test acts while they are mid-decode, however fast the engine runs.
  void token(uint64_t ticket) {
    std::unique_lock lock(mu_);
    ++tokens_[ticket];
    changed_.notify_all();
    changed_.wait(lock, [&] { return hold_ == 0 || tokens_.size() < hold_; });
  }
  void hold(size_t started) {
    std::lock_guard lock(mu_);
    hold_ = started;
  }
  void release() {
    hold(0);
    changed_.notify_all();
  }
  // Waits (at most a minute: the ThreadSanitizer build is slow) until `pred` holds.
  template <class Pred>
  bool wait(Pred pred) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return pred(*this); });
  }
  size_t ended() const {
    size_t n = 0;
    for (const auto& [ticket, how] : ends_) n += how.size();
    return n;
  }
  size_t tokens(uint64_t ticket) const {
    const auto it = tokens_.find(ticket);
    return it == tokens_.end() ? 0 : it->second;
  }
  std::map<uint64_t, std::vector<std::string>> ends() {
    std::lock_guard lock(mu_);
    return ends_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<uint64_t, std::vector<std::string>> ends_;
  std::map<uint64_t, size_t> tokens_;
  size_t hold_ = 0;
};

// `prompt_len` byte tokens; half the requests compressed by Ada-KV (window 8, half the budget),
// so that compaction runs on the engine thread too. Never stops early: it ends at max_tokens,
// or "abort".
Submission submission(Ledger& ledger, uint64_t ticket, size_t prompt_len, size_t max_tokens,
                      bool compressed) {
  Submission s;
  runtime::GenerateRequest& g = s.request.generate;
  for (size_t i = 0; i < prompt_len; ++i) g.prompt.push_back(int32_t(32 + (ticket * 7 + i) % 90));
  g.max_tokens = max_tokens;
  g.stop_at_eos = false;
  g.compression.policy = compressed ? compression::Policy::kAdaKV : compression::Policy::kFull;
  g.compression.budget_ratio = 0.5;
  g.compression.window = 8;
  s.request.on_token = [&ledger, ticket](int32_t) { ledger.token(ticket); };
  s.request.on_done = [&ledger, ticket](runtime::GenerateResult&& r) {
    ledger.end(ticket, r.finish_reason + " " + std::to_string(r.tokens.size()));
  };
  s.on_error = [&ledger, ticket](int status, const std::string& why) {
    ledger.end(ticket, "error " + std::to_string(status) + ": " + why);
  };
  s.arrived_s = FrontDoor::now_s();
  return s;
}

runtime::ServingConfig serving(size_t pool_blocks) {
  runtime::ServingConfig c;
  c.kv_pool_blocks = pool_blocks;
  c.prefill_chunk = 32;
  c.max_num_batched_tokens = 64;
  return c;
}

// The value of an unlabelled or labelled sample line of the Prometheus text.
double metric(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size() + 2));
}

class FrontDoorTest : public ::testing::Test {
 protected:
  runtime::Worker worker_{fuzz::tiny_model({.chat_template = "", .weights = true})};
  ServerMetrics metrics_;
  Ledger ledger_;
};

// Four HTTP threads submit 6 requests each into a pool that holds a few at a time (admission
// waits, decode growth preempts) and abort every third one at once; a fifth renders /metrics
// throughout. Every request ends exactly once, as asked, and every block comes back.
TEST_F(FrontDoorTest, RequestsFromManyThreadsEachEndOnceAndTheBlocksComeBack) {
  FrontDoor door(worker_, serving(12), 256, metrics_);
  std::thread engine([&] { door.run(); });

  constexpr size_t kThreads = 4, kEach = 6, kMaxTokens = 24;
  std::mutex tickets_mu;
  std::map<uint64_t, bool> aborted;  // ticket -> aborted by its thread
  std::vector<std::thread> http;
  for (size_t t = 0; t < kThreads; ++t) {
    http.emplace_back([&, t] {
      for (size_t i = 0; i < kEach; ++i) {
        const uint64_t ticket = door.new_ticket();
        const bool abort = i % 3 == 2;
        {
          std::lock_guard lock(tickets_mu);
          aborted[ticket] = abort;
        }
        ASSERT_EQ(door.submit(ticket, submission(ledger_, ticket, 40 + 5 * t, kMaxTokens, i % 2)),
                  SubmitStatus::kQueued);
        if (abort) door.abort(ticket);
      }
    });
  }
  std::atomic<bool> stop_reading{false};
  std::thread reader([&] {
    do {
      EXPECT_NE(metrics_.render().find("adakv:num_requests_running"), std::string::npos);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } while (!stop_reading);
  });
  for (auto& h : http) h.join();
  const size_t n = kThreads * kEach;
  EXPECT_TRUE(ledger_.wait([&](const Ledger& l) { return l.ended() >= n; }))
      << ledger_.ended() << " of " << n << " requests ended";
  stop_reading = true;
  reader.join();
  door.shutdown(0);
  engine.join();

  const auto ends = ledger_.ends();
  ASSERT_EQ(ends.size(), n);
  size_t n_aborted = 0;
  for (const auto& [ticket, how] : ends) {
    ASSERT_EQ(how.size(), 1u) << "request " << ticket << " ended " << how.size() << " times";
    if (aborted.at(ticket)) {
      ++n_aborted;
      EXPECT_EQ(how[0].rfind("abort ", 0), 0u) << "request " << ticket << ": " << how[0];
    } else {
      EXPECT_EQ(how[0], "length " + std::to_string(kMaxTokens)) << "request " << ticket;
    }
  }
  EXPECT_EQ(n_aborted, kThreads * kEach / 3);
  const std::string text = metrics_.render();
  EXPECT_EQ(metric(text, "adakv:request_success_total{finished_reason=\"length\"}"),
            double(n - n_aborted))
      << text;
  EXPECT_EQ(metric(text, "adakv:request_success_total{finished_reason=\"abort\"}"),
            double(n_aborted));
  EXPECT_EQ(metric(text, "adakv:num_requests_running"), 0);
  EXPECT_GT(metric(text, "adakv:num_preemptions_total"), 0) << "the pool never ran short";
  // Prefix caching keeps some blocks cached; those no request uses count as free.
  EXPECT_EQ(metric(text, "adakv:kv_cache_free_blocks"),
            metric(text, "adakv:kv_cache_total_blocks"));
}

// A drain lets what is in flight finish; a drain of 0 s ends it at once with "abort". Either
// way the door takes nothing more and run() returns.
TEST_F(FrontDoorTest, ShutdownDrainsOrAbortsWhatIsInFlightAndClosesTheDoor) {
  for (const double drain_s : {30.0, 0.0}) {
    FrontDoor door(worker_, serving(64), 256, metrics_);
    Ledger ledger;  // each door numbers its tickets from 1
    if (drain_s == 0) ledger.hold(3);
    std::thread engine([&] { door.run(); });
    // Long enough that a 0 s drain meets every request mid-decode.
    const size_t max_tokens = drain_s > 0 ? 16 : 180;
    std::vector<uint64_t> tickets;
    for (int i = 0; i < 3; ++i) {
      tickets.push_back(door.new_ticket());
      ASSERT_EQ(
          door.submit(tickets.back(), submission(ledger, tickets.back(), 30, max_tokens, i == 1)),
          SubmitStatus::kQueued);
    }
    ASSERT_TRUE(ledger.wait([&](const Ledger& l) {
      for (uint64_t t : tickets)
        if (l.tokens(t) == 0) return false;
      return true;
    })) << "drain "
        << drain_s << ": not every request started";
    door.shutdown(drain_s);
    EXPECT_FALSE(door.accepting());
    const uint64_t late = door.new_ticket();
    EXPECT_EQ(door.submit(late, submission(ledger, late, 30, 4, false)), SubmitStatus::kClosed);
    ledger.release();
    engine.join();

    const auto ends = ledger.ends();
    for (uint64_t t : tickets) {
      ASSERT_EQ(ends.count(t), 1u) << "drain " << drain_s << ": request " << t << " never ended";
      ASSERT_EQ(ends.at(t).size(), 1u);
      const std::string& how = ends.at(t)[0];
      if (drain_s > 0) {
        EXPECT_EQ(how, "length " + std::to_string(max_tokens));
      } else {
        EXPECT_EQ(how.rfind("abort ", 0), 0u) << how;
      }
    }
    EXPECT_EQ(ends.count(late), 0u);
  }
}

// Past max_queue waiting requests, a submission is turned away (the API's 429); those queued
// still run once the engine thread starts.
TEST_F(FrontDoorTest, SubmissionsPastTheQueueAreTurnedAway) {
  FrontDoor door(worker_, serving(64), 2, metrics_);
  std::vector<uint64_t> queued;
  for (int i = 0; i < 2; ++i) {
    queued.push_back(door.new_ticket());
    ASSERT_EQ(door.submit(queued.back(), submission(ledger_, queued.back(), 20, 4, false)),
              SubmitStatus::kQueued);
  }
  const uint64_t third = door.new_ticket();
  EXPECT_EQ(door.submit(third, submission(ledger_, third, 20, 4, false)), SubmitStatus::kQueueFull);
  std::thread engine([&] { door.run(); });
  EXPECT_TRUE(ledger_.wait([](const Ledger& l) { return l.ended() >= 2; }));
  door.shutdown(30);
  engine.join();
  const auto ends = ledger_.ends();
  for (uint64_t t : queued) EXPECT_EQ(ends.at(t), std::vector<std::string>{"length 4"});
  EXPECT_EQ(ends.count(third), 0u);
}

}  // namespace
}  // namespace adakv::server
