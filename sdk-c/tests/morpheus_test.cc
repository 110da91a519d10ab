// SPDX-License-Identifier: Apache-2.0 OR MIT
// The C SDK through its public headers: attach and detach, registration, checkpoints with and without
// a pending request, nesting, and every bad input of the issue, each with its error code.

#include <gtest/gtest.h>

#include <stdlib.h>

#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "morpheus_inline.h"
#include "sim_region.h"

namespace {

std::string unique_path(const char *tag) {
  static int n = 0;
  return "/dev/shm/morpheus-ctest-" + std::string(tag) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

std::vector<char> file_bytes(const char *path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Sets an environment variable for one test and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, old_.c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char *name_;
  std::string old_;
  bool had_ = false;
};

class Region {
 public:
  explicit Region(sim_layout layout) : layout_(layout) {
    std::string path = unique_path("region");
    ok_ = sim_region_create(&r_, path.c_str(), &layout_) == 0;
  }
  explicit Region(uint32_t count = 4) : Region(sim_layout_default(count)) {}
  ~Region() { sim_region_close(&r_, 1); }
  bool ok() const { return ok_; }
  const char *path() const { return r_.path; }
  const sim_region *get() const { return &r_; }

 private:
  sim_layout layout_;
  sim_region r_{};
  bool ok_ = false;
};

// Every test leaves the thread without a worker, and its mode rules on CLOCK_MONOTONIC.
class MorpheusTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (morpheus_worker *w = morpheus_worker_current()) morpheus_worker_unregister(w);
    morpheus_testing_set_mode_clock(-1);
  }

  static int register_direct(const Region &region, int slot, morpheus_worker **w) {
    morpheus_options opts;
    morpheus_options_init(&opts);
    opts.region_path = region.path();
    opts.direct_slot = slot;
    return morpheus_worker_register(&opts, w);
  }

  static std::string last_error() { return morpheus_last_error(); }
};

TEST_F(MorpheusTest, RegisterWritesTheLifecycleAndUnregisterFreesTheSlot) {
  Region region;
  ASSERT_TRUE(region.ok());
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 1, &w), 0) << last_error();
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w, morpheus_worker_current());
  EXPECT_EQ(morpheus_worker_slot(w), 1);
  EXPECT_EQ(morpheus_worker_status(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, worker_state), MORPHEUS_WORKER_STATE_RUNNING);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, runtime_kind), MORPHEUS_RUNTIME_KIND_C);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, escapable), MORPHEUS_ESCAPABLE_DEFAULT_C);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, tid), static_cast<uint32_t>(gettid()));
  ASSERT_EQ(morpheus_worker_unregister(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, worker_state), MORPHEUS_WORKER_STATE_INIT);
  EXPECT_EQ(SIM_LOAD(region.get(), 1, tid), 0u);
  EXPECT_EQ(morpheus_worker_current(), nullptr);
}

TEST_F(MorpheusTest, RuntimeKindOptionKeysTheSlotAndTheEscapableDefault) {
  Region region;
  ASSERT_TRUE(region.ok());
  morpheus_options opts;
  morpheus_options_init(&opts);
  EXPECT_EQ(opts.runtime_kind, MORPHEUS_RUNTIME_KIND_C);
  opts.region_path = region.path();
  opts.direct_slot = 2;
  opts.runtime_kind = MORPHEUS_RUNTIME_KIND_JAVA;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0) << last_error();
  EXPECT_EQ(SIM_LOAD(region.get(), 2, runtime_kind), MORPHEUS_RUNTIME_KIND_JAVA);
  EXPECT_EQ(SIM_LOAD(region.get(), 2, escapable), MORPHEUS_ESCAPABLE_DEFAULT_JAVA);
  ASSERT_EQ(morpheus_worker_unregister(w), 0);

  opts.runtime_kind = 999;
  EXPECT_EQ(morpheus_worker_register(&opts, &w), -(int)MORPHEUS_E_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("found 999"), std::string::npos) << last_error();
  EXPECT_EQ(morpheus_worker_current(), nullptr);
  EXPECT_EQ(SIM_LOAD(region.get(), 2, worker_state), MORPHEUS_WORKER_STATE_INIT);
}

TEST_F(MorpheusTest, LayoutOffsetsAreTheCompilersAndUnknownNamesAreRefused) {
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker"), (int64_t)sizeof(morpheus_worker));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.preempt_seq"), (int64_t)offsetof(morpheus_worker, preempt_seq));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.cached_ack"), (int64_t)offsetof(morpheus_worker, cached_ack));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.critical_depth"), (int64_t)offsetof(morpheus_worker, critical_depth));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.in_critical"), (int64_t)offsetof(morpheus_worker, in_critical));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.generation"), (int64_t)offsetof(morpheus_worker, generation));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.attached_generation"),
            (int64_t)offsetof(morpheus_worker, attached_generation));
  EXPECT_EQ(morpheus_layout_offset("morpheus_options"), (int64_t)sizeof(morpheus_options));
  EXPECT_EQ(morpheus_layout_offset("morpheus_options.direct_slot"), (int64_t)offsetof(morpheus_options, direct_slot));
  EXPECT_EQ(morpheus_layout_offset("morpheus_options.region_path"), (int64_t)offsetof(morpheus_options, region_path));
  EXPECT_EQ(morpheus_layout_offset("morpheus_options.runtime_kind"), (int64_t)offsetof(morpheus_options, runtime_kind));
  EXPECT_EQ(morpheus_layout_offset("morpheus_worker.nonsense"), -1);
  EXPECT_EQ(morpheus_layout_offset(nullptr), -1);
}

TEST_F(MorpheusTest, CheckpointWithoutAndWithAPendingRequest) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0) << last_error();
  EXPECT_FALSE(morpheus_checkpoint(w));
  uint64_t seq = sim_request_yield(region.get(), 0);
  EXPECT_TRUE(morpheus_checkpoint(w));
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), seq);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, yield_count), 1u);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_yield_reason), MORPHEUS_YIELD_REASON_PREEMPT_REQUEST);
  EXPECT_EQ(w->cached_ack, seq);
  EXPECT_FALSE(morpheus_checkpoint(w));
  EXPECT_EQ(morpheus_yield_count(w, MORPHEUS_YIELD_REASON_PREEMPT_REQUEST), 1u);
  // The out-of-line checkpoint behaves the same.
  sim_request_yield(region.get(), 0);
  EXPECT_EQ(morpheus_checkpoint_call(w), 1);
  EXPECT_EQ(morpheus_checkpoint_call(w), 0);
}

TEST_F(MorpheusTest, AnExplicitYieldAcknowledgesCountsAndSuspendsNothing) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0) << last_error();
  // Nothing pending: counted, nothing acknowledged.
  ASSERT_EQ(morpheus_record_explicit_yield(w), 0) << last_error();
  EXPECT_EQ(SIM_LOAD(region.get(), 0, yield_count), 1u);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_yield_reason), MORPHEUS_YIELD_REASON_EXPLICIT);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), 0u);
  // A pending request, inside a critical section (allowed, SCB.md §5.8): acknowledged, and the inline
  // fast path compares with the new acknowledgement.
  uint64_t seq = sim_request_yield(region.get(), 0);
  morpheus_critical_enter(w);
  ASSERT_EQ(morpheus_record_explicit_yield(w), 0) << last_error();
  EXPECT_EQ(morpheus_critical_exit(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), seq);
  EXPECT_EQ(w->cached_ack, seq);
  EXPECT_FALSE(morpheus_checkpoint(w)) << "the request was served by the application's own yield";
  EXPECT_EQ(morpheus_yield_count(w, MORPHEUS_YIELD_REASON_EXPLICIT), 2u);
  EXPECT_EQ(morpheus_yield_count(w, MORPHEUS_YIELD_REASON_PREEMPT_REQUEST), 0u);
  // After a scheduler restart it writes nothing and is no error (SCB.md §6).
  sim_set_generation(region.get(), 2);
  sim_request_yield(region.get(), 0);
  EXPECT_EQ(morpheus_record_explicit_yield(w), 0) << last_error();
  EXPECT_EQ(SIM_LOAD(region.get(), 0, yield_count), 2u);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), seq);
}

TEST_F(MorpheusTest, AnExplicitYieldOfAForeignOrNullHandleIsNotRegistered) {
  EXPECT_EQ(morpheus_record_explicit_yield(nullptr), -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
  EXPECT_NE(last_error().find("morpheus_record_explicit_yield"), std::string::npos) << last_error();
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  sim_request_yield(region.get(), 0);
  int rc = 0;
  std::thread([&] { rc = morpheus_record_explicit_yield(w); }).join();
  EXPECT_EQ(rc, -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
  EXPECT_EQ(SIM_LOAD(region.get(), 0, yield_count), 0u);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), 0u);
}

TEST_F(MorpheusTest, TheModeClockTimesTheDefensiveYield) {
  Region region;
  morpheus_worker *w = nullptr;
  const int64_t t0 = 1000000000;
  morpheus_testing_set_mode_clock(t0);
  ASSERT_EQ(register_direct(region, 0, &w), 0) << last_error();
  const int64_t slice = (int64_t)__atomic_load_n(&sim_header(region.get())->slice_ns, __ATOMIC_ACQUIRE);
  // A dropped hint, then a request: the yield evaluates the mode, DEFENSIVE (spec/SCB.md §5.4). From then
  // on the worker yields once per slice since its last yield, on the mode clock, which moves only when set.
  __atomic_fetch_add(&sim_scb(region.get(), 0)->hints_dropped, 1, __ATOMIC_RELAXED);
  sim_request_yield(region.get(), 0);
  EXPECT_TRUE(morpheus_checkpoint(w));
  EXPECT_EQ(morpheus_runtime_mode(w), (int)MORPHEUS_RUNTIME_MODE_DEFENSIVE);
  __atomic_fetch_add(&sim_scb(region.get(), 0)->hints_dropped, 1, __ATOMIC_RELAXED);  // stays DEFENSIVE
  morpheus_testing_set_mode_clock(t0 + slice - 1);
  for (int i = 0; i < 100; i++) EXPECT_FALSE(morpheus_checkpoint(w)) << "no slice since the last yield";
  morpheus_testing_set_mode_clock(t0 + slice);
  EXPECT_TRUE(morpheus_checkpoint(w));
  EXPECT_EQ(morpheus_yield_count(w, MORPHEUS_YIELD_REASON_DEFENSIVE), 1u);
  // An explicit yield restarts the clock too (§5.8).
  morpheus_testing_set_mode_clock(t0 + 2 * slice - 1);
  ASSERT_EQ(morpheus_record_explicit_yield(w), 0) << last_error();
  morpheus_testing_set_mode_clock(t0 + 2 * slice);
  EXPECT_FALSE(morpheus_checkpoint(w)) << "a slice since the DEFENSIVE yield, not since the explicit one";
  EXPECT_EQ(morpheus_yield_count(w, MORPHEUS_YIELD_REASON_DEFENSIVE), 1u);
}

TEST_F(MorpheusTest, NestedCriticalSectionsDeferTheRequest) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0) << last_error();
  morpheus_critical_enter(w);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 1u);
  morpheus_critical_enter(w);
  EXPECT_EQ(w->critical_depth, 2u);
  sim_request_yield(region.get(), 0);
  EXPECT_FALSE(morpheus_checkpoint(w)) << "never yields inside a critical section";
  EXPECT_EQ(morpheus_critical_exit(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 1u) << "only the outermost exit clears the flag";
  EXPECT_FALSE(morpheus_checkpoint(w));
  EXPECT_EQ(morpheus_critical_exit(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 0u);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), 0u) << "still pending";
  EXPECT_TRUE(morpheus_checkpoint(w)) << "honoured after the outermost exit";
  // The out-of-line variants track the same depth.
  EXPECT_EQ(morpheus_critical_enter_call(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 1u);
  EXPECT_EQ(morpheus_critical_exit_call(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 0u);
}

TEST_F(MorpheusTest, ExitWithoutEnterIsNotInCritical) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  EXPECT_EQ(morpheus_critical_exit(w), -static_cast<int>(MORPHEUS_E_NOT_IN_CRITICAL));
  EXPECT_NE(last_error().find("NOT_IN_CRITICAL"), std::string::npos) << last_error();
  EXPECT_EQ(w->critical_depth, 0u);
  EXPECT_EQ(morpheus_critical_exit_call(w), -static_cast<int>(MORPHEUS_E_NOT_IN_CRITICAL));
}

TEST_F(MorpheusTest, DetachedModeNeverYieldsAndCountsNesting) {
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = "";  // forces detached mode
  morpheus_worker *w = nullptr;
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0) << last_error();
  EXPECT_EQ(morpheus_worker_status(w), -static_cast<int>(MORPHEUS_E_DETACHED));
  EXPECT_EQ(morpheus_worker_slot(w), -1);
  EXPECT_FALSE(morpheus_checkpoint(w));
  morpheus_critical_enter(w);
  EXPECT_EQ(w->critical_depth, 1u);
  EXPECT_EQ(morpheus_critical_exit(w), 0);
  EXPECT_EQ(morpheus_critical_exit(w), -static_cast<int>(MORPHEUS_E_NOT_IN_CRITICAL));
  uint64_t budget = 0;
  EXPECT_EQ(morpheus_budget_remaining_ns(w, &budget), -static_cast<int>(MORPHEUS_E_DETACHED));
}

TEST_F(MorpheusTest, SecondRegistrationOnTheSameThreadIsAlreadyRegistered) {
  Region region;
  morpheus_worker *w = nullptr, *again = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  EXPECT_EQ(register_direct(region, 1, &again), -static_cast<int>(MORPHEUS_E_ALREADY_REGISTERED));
  EXPECT_EQ(again, nullptr);
  EXPECT_NE(last_error().find("slot 0"), std::string::npos) << last_error();
  EXPECT_EQ(SIM_LOAD(region.get(), 1, worker_state), MORPHEUS_WORKER_STATE_INIT);
}

TEST_F(MorpheusTest, SlotOutOfRangeAndBusy) {
  Region region(2);
  morpheus_worker *w = nullptr;
  EXPECT_EQ(register_direct(region, 2, &w), -static_cast<int>(MORPHEUS_E_SLOT_OUT_OF_RANGE));
  EXPECT_NE(last_error().find("scb_count 2"), std::string::npos) << last_error();
  __atomic_store_n(&sim_scb(region.get(), 1)->worker_state, MORPHEUS_WORKER_STATE_RUNNING, __ATOMIC_RELEASE);
  EXPECT_EQ(register_direct(region, 1, &w), -static_cast<int>(MORPHEUS_E_SLOT_BUSY));
  EXPECT_NE(last_error().find("found RUNNING"), std::string::npos) << last_error();
}

struct BadRegion {
  const char *name;
  sim_layout layout;
  uint32_t code;
  std::string message;
};

TEST_F(MorpheusTest, BadRegionsAreRefusedWithTheirCode) {
  sim_layout base = sim_layout_default(2);
  auto with = [&](auto change) {
    sim_layout l = base;
    change(l);
    return l;
  };
  const BadRegion cases[] = {
      {"wrong magic", with([](sim_layout &l) { l.magic = 42; }), MORPHEUS_E_BAD_MAGIC, "expected magic"},
      {"other major", with([](sim_layout &l) { l.abi_major = MORPHEUS_ABI_MAJOR + 1; }),
       MORPHEUS_E_ABI_MAJOR_MISMATCH, "ABI major"},
      {"empty file", with([](sim_layout &l) { l.file_len = 0; }), MORPHEUS_E_REGION_TRUNCATED, "found 0"},
      {"smaller than a header", with([](sim_layout &l) { l.file_len = 100; }), MORPHEUS_E_REGION_TRUNCATED,
       "found 100"},
      {"shorter than its slots", with([](sim_layout &l) { l.file_len = 200; }), MORPHEUS_E_REGION_TRUNCATED,
       "found 200"},
      {"stride smaller than the SCB", with([](sim_layout &l) { l.scb_stride = 64; }), MORPHEUS_E_BAD_LAYOUT,
       "scb_stride >= 128"},
      {"not ready", with([](sim_layout &l) { l.generation = 0; }), MORPHEUS_E_NOT_READY, "generation"},
  };
  for (const BadRegion &c : cases) {
    Region region(c.layout);
    ASSERT_TRUE(region.ok()) << c.name;
    morpheus_worker *w = nullptr;
    EXPECT_EQ(register_direct(region, 0, &w), -static_cast<int>(c.code)) << c.name << ": " << last_error();
    EXPECT_NE(last_error().find(morpheus_error_code_name(c.code)), std::string::npos) << last_error();
    EXPECT_NE(last_error().find(c.message), std::string::npos) << c.name << ": " << last_error();
    EXPECT_EQ(morpheus_worker_current(), nullptr) << c.name;
  }
}

// morpheus_region_check runs the same checks in the same order, registers nothing and leaves every
// byte of the region as it was.
TEST_F(MorpheusTest, RegionCheckRefusesBadRegionsAndWritesNothing) {
  sim_layout base = sim_layout_default(2);
  auto with = [&](auto change) {
    sim_layout l = base;
    change(l);
    return l;
  };
  const BadRegion cases[] = {
      {"wrong magic", with([](sim_layout &l) { l.magic = 42; }), MORPHEUS_E_BAD_MAGIC, "expected magic"},
      // Bad magic is reported before the other major: the order of SCB.md 1.3.
      {"wrong magic and major", with([](sim_layout &l) { l.magic = 42; l.abi_major = MORPHEUS_ABI_MAJOR + 1; }),
       MORPHEUS_E_BAD_MAGIC, "found 0x000000000000002a"},
      {"other major", with([](sim_layout &l) { l.abi_major = MORPHEUS_ABI_MAJOR + 1; }),
       MORPHEUS_E_ABI_MAJOR_MISMATCH,
       "ABI major " + std::to_string(MORPHEUS_ABI_MAJOR) + ", the region has ABI major " +
           std::to_string(MORPHEUS_ABI_MAJOR + 1)},
      {"empty file", with([](sim_layout &l) { l.file_len = 0; }), MORPHEUS_E_REGION_TRUNCATED, "found 0"},
      {"smaller than a header", with([](sim_layout &l) { l.file_len = 100; }), MORPHEUS_E_REGION_TRUNCATED,
       "found 100"},
      {"shorter than its slots", with([](sim_layout &l) { l.file_len = 200; }), MORPHEUS_E_REGION_TRUNCATED,
       "found 200"},
      {"stride smaller than the SCB", with([](sim_layout &l) { l.scb_stride = 64; }), MORPHEUS_E_BAD_LAYOUT,
       "scb_stride >= 128"},
      {"not ready", with([](sim_layout &l) { l.generation = 0; }), MORPHEUS_E_NOT_READY, "found 0"},
  };
  for (const BadRegion &c : cases) {
    Region region(c.layout);
    ASSERT_TRUE(region.ok()) << c.name;
    const std::vector<char> before = file_bytes(region.path());
    EXPECT_EQ(morpheus_region_check(region.path()), -static_cast<int>(c.code)) << c.name << ": " << last_error();
    EXPECT_NE(last_error().find(morpheus_error_code_name(c.code)), std::string::npos) << last_error();
    EXPECT_NE(last_error().find(c.message), std::string::npos) << c.name << ": " << last_error();
    EXPECT_NE(last_error().find(region.path()), std::string::npos) << c.name << ": " << last_error();
    EXPECT_EQ(file_bytes(region.path()), before) << c.name << ": the check wrote to the region";
    EXPECT_EQ(morpheus_worker_current(), nullptr) << c.name;
  }
}

TEST_F(MorpheusTest, RegionCheckNamesUnknownRequiredFeatureBits) {
  Region region;
  ASSERT_TRUE(region.ok());
  // The top required bit: no ABI defines it (required bits are 32-63 and are added from the bottom).
  const uint64_t unknown = 1ULL << 63;
  __atomic_store_n(&sim_header(region.get())->required_features, unknown, __ATOMIC_RELAXED);
  const std::vector<char> before = file_bytes(region.path());
  EXPECT_EQ(morpheus_region_check(region.path()), -static_cast<int>(MORPHEUS_E_UNKNOWN_REQUIRED_FEATURE));
  EXPECT_NE(last_error().find("0x8000000000000000"), std::string::npos) << last_error();
  EXPECT_EQ(file_bytes(region.path()), before);
}

TEST_F(MorpheusTest, RegionCheckAcceptsAValidRegionWithoutRegistering) {
  Region region;
  ASSERT_TRUE(region.ok());
  const std::vector<char> before = file_bytes(region.path());
  EXPECT_EQ(morpheus_region_check(region.path()), 0) << last_error();
  EXPECT_EQ(file_bytes(region.path()), before) << "a successful check writes nothing either";
  EXPECT_EQ(morpheus_worker_current(), nullptr);
  for (uint32_t slot = 0; slot < 4; slot++)
    EXPECT_EQ(SIM_LOAD(region.get(), slot, worker_state), MORPHEUS_WORKER_STATE_INIT) << slot;
  // The region the check accepted can be registered on afterwards.
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0) << last_error();
  // A check while this thread holds a worker is still only a check.
  EXPECT_EQ(morpheus_region_check(region.path()), 0) << last_error();
  EXPECT_EQ(morpheus_worker_current(), w);
}

TEST_F(MorpheusTest, RegionCheckDetachedMissingAndDiscovered) {
  EXPECT_EQ(morpheus_region_check(""), 1) << "\"\" is detached mode: no region to check";
  EXPECT_EQ(morpheus_region_check("/nonexistent/morpheus/region"), -static_cast<int>(MORPHEUS_E_IO));
  EXPECT_NE(last_error().find("/nonexistent/morpheus/region"), std::string::npos) << last_error();
  {
    ScopedEnv env(MORPHEUS_ENV_REGION, "");
    EXPECT_EQ(morpheus_region_check(nullptr), 1) << "MORPHEUS_REGION=\"\" forces detached mode";
  }
  Region good;
  {
    ScopedEnv env(MORPHEUS_ENV_REGION, good.path());
    EXPECT_EQ(morpheus_region_check(nullptr), 0) << last_error();
  }
  sim_layout l = sim_layout_default(2);
  l.magic = 42;
  Region bad(l);
  {
    ScopedEnv env(MORPHEUS_ENV_REGION, bad.path());
    EXPECT_EQ(morpheus_region_check(nullptr), -static_cast<int>(MORPHEUS_E_BAD_MAGIC)) << last_error();
    EXPECT_NE(last_error().find(bad.path()), std::string::npos) << last_error();
  }
}

TEST_F(MorpheusTest, MissingRegionFileIsIo) {
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = "/nonexistent/morpheus/region";
  opts.direct_slot = 0;
  morpheus_worker *w = nullptr;
  EXPECT_EQ(morpheus_worker_register(&opts, &w), -static_cast<int>(MORPHEUS_E_IO));
  EXPECT_NE(last_error().find("/nonexistent/morpheus/region"), std::string::npos) << last_error();
}

TEST_F(MorpheusTest, SchedulerRestartDetachesAndWritesNothing) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  sim_set_generation(region.get(), 2);
  sim_request_yield(region.get(), 0);
  EXPECT_FALSE(morpheus_checkpoint(w));
  EXPECT_EQ(morpheus_worker_status(w), -static_cast<int>(MORPHEUS_E_GENERATION_CHANGED));
  EXPECT_NE(last_error().find("generation 2"), std::string::npos) << last_error();
  EXPECT_EQ(morpheus_checkpoint_call(w), -static_cast<int>(MORPHEUS_E_GENERATION_CHANGED));
  EXPECT_EQ(SIM_LOAD(region.get(), 0, last_ack_seq), 0u);
  EXPECT_EQ(morpheus_set_priority(w, 5), -static_cast<int>(MORPHEUS_E_GENERATION_CHANGED));
  ASSERT_EQ(morpheus_worker_unregister(w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, worker_state), MORPHEUS_WORKER_STATE_RUNNING)
      << "nothing is written to a region another scheduler took over";
}

TEST_F(MorpheusTest, RestartSeenByAnInlineCriticalEnterDetaches) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  sim_set_generation(region.get(), 0);  // the scheduler retired the region
  morpheus_critical_enter(w);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, in_critical), 0u);
  EXPECT_EQ(morpheus_critical_exit(w), 0);
  EXPECT_EQ(morpheus_worker_status(w), -static_cast<int>(MORPHEUS_E_GENERATION_CHANGED));
}

TEST_F(MorpheusTest, RetiredRegionIsReportedEvenWithNothingPending) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  sim_set_generation(region.get(), 0);  // clean scheduler exit
  EXPECT_FALSE(morpheus_checkpoint(w)) << "the inline fast path only reads";
  EXPECT_EQ(morpheus_worker_status(w), -static_cast<int>(MORPHEUS_E_GENERATION_CHANGED));
  EXPECT_EQ(w->in_critical, nullptr) << "detached";
}

TEST_F(MorpheusTest, AHandleFromAnotherThreadIsRefused) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  int rc = 0;
  std::thread([&] { rc = morpheus_worker_unregister(w); }).join();
  EXPECT_EQ(rc, -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
  EXPECT_EQ(SIM_LOAD(region.get(), 0, worker_state), MORPHEUS_WORKER_STATE_RUNNING);
}

TEST_F(MorpheusTest, EscapableAndPriority) {
  Region region;
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = region.path();
  opts.direct_slot = 0;
  opts.escapable = 0;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, escapable), 0u);
  EXPECT_EQ(morpheus_set_escapable(w, true), 0);
  EXPECT_EQ(SIM_LOAD(region.get(), 0, escapable), 1u);
  EXPECT_EQ(morpheus_set_priority(w, -5), 0);
  EXPECT_EQ(static_cast<int32_t>(SIM_LOAD(region.get(), 0, priority)), -5);
  __atomic_store_n(&sim_scb(region.get(), 0)->budget_remaining_ns, 777u, __ATOMIC_RELAXED);
  uint64_t budget = 0;
  EXPECT_EQ(morpheus_budget_remaining_ns(w, &budget), 0);
  EXPECT_EQ(budget, 777u);
  EXPECT_EQ(morpheus_runtime_mode(w), static_cast<int>(MORPHEUS_RUNTIME_MODE_DETERMINISTIC));
}

TEST_F(MorpheusTest, EscapableAndPriorityGettersReportWhatWasStored) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 2, &w), 0) << last_error();
  // Defaults: the spec's escapable default for C (abi.toml [escapable_default]), priority 0.
  EXPECT_EQ(morpheus_escapable(w), static_cast<int>(MORPHEUS_ESCAPABLE_DEFAULT_C));
  EXPECT_EQ(morpheus_escapable(w), static_cast<int>(SIM_LOAD(region.get(), 2, escapable)));
  int32_t priority = 42;
  EXPECT_EQ(morpheus_priority(w, &priority), 0);
  EXPECT_EQ(priority, 0);
  for (bool value : {!MORPHEUS_ESCAPABLE_DEFAULT_C, static_cast<bool>(MORPHEUS_ESCAPABLE_DEFAULT_C)}) {
    ASSERT_EQ(morpheus_set_escapable(w, value), 0) << last_error();
    EXPECT_EQ(morpheus_escapable(w), value ? 1 : 0);
    EXPECT_EQ(SIM_LOAD(region.get(), 2, escapable), value ? 1u : 0u);
  }
  // Set, then read back: a value in range is what was stored and what is reported; a value out of
  // range is INVALID_ARGUMENT and changes nothing (never clamped).
  const struct {
    int32_t set, stored;
    int rc;
  } priorities[] = {{-7, -7, 0},
                    {19, 19, 0},
                    {-20, -20, 0},
                    {100, -20, -static_cast<int>(MORPHEUS_E_INVALID_ARGUMENT)},
                    {-100, -20, -static_cast<int>(MORPHEUS_E_INVALID_ARGUMENT)},
                    {0, 0, 0}};
  for (const auto &p : priorities) {
    ASSERT_EQ(morpheus_set_priority(w, p.set), p.rc) << "set " << p.set << ": " << last_error();
    EXPECT_EQ(morpheus_priority(w, &priority), 0);
    EXPECT_EQ(priority, p.stored) << "set " << p.set;
    EXPECT_EQ(static_cast<int32_t>(SIM_LOAD(region.get(), 2, priority)), p.stored) << "set " << p.set;
  }
  EXPECT_NE(std::string(last_error()).find("expected priority in -20..=19, found -100"), std::string::npos) << last_error();
}

TEST_F(MorpheusTest, AnOutOfRangePriorityRefusesRegistration) {
  Region region;
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = region.path();
  opts.direct_slot = 0;
  opts.priority = 20;
  morpheus_worker *w = nullptr;
  EXPECT_EQ(morpheus_worker_register(&opts, &w), -static_cast<int>(MORPHEUS_E_INVALID_ARGUMENT));
  EXPECT_EQ(w, nullptr);
  EXPECT_EQ(last_error().rfind("morpheus_worker_register: ", 0), 0u) << last_error();
  EXPECT_NE(last_error().find("expected priority in -20..=19, found 20"), std::string::npos) << last_error();
  EXPECT_EQ(SIM_LOAD(region.get(), 0, worker_state), MORPHEUS_WORKER_STATE_INIT) << "the slot stays free";
}

TEST_F(MorpheusTest, ADirectSlotWithASocketIsRefusedNamingBothAndWritesNothing) {
  // The binding kit's option rule (morpheus::kit::options), the same for every binding: a direct slot
  // and an agent socket exclude each other; neither is silently dropped.
  Region region;
  ASSERT_TRUE(region.ok());
  const std::vector<char> before = file_bytes(region.path());
  const std::string socket = unique_path("agent.sock");
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = region.path();
  opts.direct_slot = 0;
  opts.socket_path = socket.c_str();
  morpheus_worker *w = nullptr;
  EXPECT_EQ(morpheus_worker_register(&opts, &w), -static_cast<int>(MORPHEUS_E_INVALID_ARGUMENT));
  EXPECT_EQ(w, nullptr);
  EXPECT_NE(last_error().find("give slot or socket, not both"), std::string::npos) << last_error();
  EXPECT_EQ(morpheus_worker_current(), nullptr);
  EXPECT_EQ(file_bytes(region.path()), before) << "the refused registration wrote to the region";
  // Nothing was kept: the thread registers the same slot without the socket.
  opts.socket_path = nullptr;
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0) << last_error();
  EXPECT_EQ(morpheus_worker_slot(w), 0);
}

TEST_F(MorpheusTest, EscapableAndPriorityGettersOfADetachedWorkerReportTheConfiguredValues) {
  morpheus_options opts;
  morpheus_options_init(&opts);
  opts.region_path = "";
  opts.escapable = !MORPHEUS_ESCAPABLE_DEFAULT_C;
  opts.priority = -3;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0) << last_error();
  EXPECT_EQ(morpheus_escapable(w), opts.escapable);
  int32_t priority = 0;
  EXPECT_EQ(morpheus_priority(w, &priority), 0);
  EXPECT_EQ(priority, -3);
  ASSERT_EQ(morpheus_worker_unregister(w), 0);

  // Options left at their defaults: the C default, priority 0.
  morpheus_options_init(&opts);
  opts.region_path = "";
  ASSERT_EQ(morpheus_worker_register(&opts, &w), 0) << last_error();
  EXPECT_EQ(morpheus_escapable(w), static_cast<int>(MORPHEUS_ESCAPABLE_DEFAULT_C));
  EXPECT_EQ(morpheus_priority(w, &priority), 0);
  EXPECT_EQ(priority, 0);
}

TEST_F(MorpheusTest, EscapableAndPriorityGettersRefuseAForeignHandle) {
  Region region;
  morpheus_worker *w = nullptr;
  ASSERT_EQ(register_direct(region, 0, &w), 0);
  int escapable = 0, priority_rc = 0;
  int32_t priority = 42;
  std::thread([&] {
    escapable = morpheus_escapable(w);
    priority_rc = morpheus_priority(w, &priority);
  }).join();
  EXPECT_EQ(escapable, -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
  EXPECT_EQ(priority_rc, -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
  EXPECT_EQ(priority, 42) << "nothing stored on failure";
  EXPECT_EQ(morpheus_escapable(nullptr), -static_cast<int>(MORPHEUS_E_NOT_REGISTERED));
}

}  // namespace

namespace {

// A program compiled against another struct morpheus_worker layout is refused, not misread. Run in a
// child process: the mismatch is sticky for the library's lifetime, by design.
TEST(MorpheusLayout, AProgramWithAnotherWorkerLayoutCannotRegister) {
  EXPECT_EQ(morpheus_worker_layout_check(MORPHEUS_WORKER_LAYOUT_VERSION), 0) << "the header's own version";
  EXPECT_EXIT(
      {
        const int checked = morpheus_worker_layout_check(MORPHEUS_WORKER_LAYOUT_VERSION + 1);
        morpheus_options opts;
        morpheus_options_init(&opts);
        opts.region_path = "";  // even detached: the program's inline code would misread the worker
        morpheus_worker *w = nullptr;
        const int registered = morpheus_worker_register(&opts, &w);
        const std::string error = morpheus_last_error();
        const int unsupported = -static_cast<int>(MORPHEUS_E_UNSUPPORTED_PLATFORM);
        exit(checked == unsupported && registered == unsupported && w == nullptr &&
                     error.find("layout 2, this libmorpheus has layout 1") != std::string::npos
                 ? 0
                 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
