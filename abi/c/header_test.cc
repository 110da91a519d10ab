// SPDX-License-Identifier: Apache-2.0 OR MIT
// C++ users include the generated header as it is; the static asserts inside it check every offset at
// compile time, this checks what a C++ program sees at run time.
#include "morpheus_abi.h"

#include <atomic>
#include <cstddef>
#include <cstring>

#include <gtest/gtest.h>

TEST(MorpheusAbiHeader, ScbIsTwoCacheLinesWithTheDirectionSplitAtByte64) {
  EXPECT_EQ(sizeof(morpheus_scb), 2 * MORPHEUS_CACHE_LINE_SIZE);
  EXPECT_EQ(alignof(morpheus_scb), MORPHEUS_CACHE_LINE_SIZE);
  EXPECT_LT(offsetof(morpheus_scb, preempt_seq), MORPHEUS_CACHE_LINE_SIZE);
  EXPECT_GE(offsetof(morpheus_scb, last_ack_seq), MORPHEUS_CACHE_LINE_SIZE);
}

TEST(MorpheusAbiHeader, AtomicFieldsAreLockFreeInPlace) {
  alignas(64) morpheus_scb scb{};
  auto *seq = reinterpret_cast<std::atomic<morpheus_u64> *>(&scb.preempt_seq);
  EXPECT_TRUE(seq->is_lock_free());
  seq->fetch_add(1, std::memory_order_release);
  EXPECT_EQ(scb.preempt_seq, 1u);
}

TEST(MorpheusAbiHeader, RegionMagicSpellsMorpheusInMemory) {
  morpheus_region_header header{};
  header.magic = MORPHEUS_REGION_MAGIC;
  EXPECT_EQ(0, std::memcmp(&header.magic, "MORPHEUS", 8));
}

TEST(MorpheusAbiHeader, EnumNamesComeFromTheSpec) {
  EXPECT_STREQ(morpheus_worker_state_name(MORPHEUS_WORKER_STATE_RUNNING), "RUNNING");
  EXPECT_STREQ(morpheus_error_code_name(MORPHEUS_E_GENERATION_CHANGED), "GENERATION_CHANGED");
  EXPECT_EQ(morpheus_worker_state_name(999), nullptr);
}
