// SPDX-License-Identifier: Apache-2.0 OR MIT
//
// Platform check: the properties of this machine and toolchain that the
// Morpheus ABI (spec/SCB.md) takes for granted. The SCB is shared memory that a
// BPF program, a Rust agent and five language runtimes read and write with
// plain and atomic accesses at fixed offsets, so the build must fail here, with
// a clear message, on a platform where those assumptions do not hold.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <vector>

#include "gtest/gtest.h"

namespace {

// Interference size the compiler aligns to; the SCB splits its two directions
// on such a boundary so that the scheduler's and the runtime's stores never
// share a line.
constexpr std::size_t kLine = std::hardware_destructive_interference_size;

// L1 data cache line of the machine running the test, 0 if it cannot be told.
long HostCacheLine() {
  long line = sysconf(_SC_LEVEL1_DCACHE_LINESIZE);
  if (line > 0) return line;
  std::ifstream sysfs("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size");
  long from_sysfs = 0;
  if (sysfs >> from_sysfs && from_sysfs > 0) return from_sysfs;
  return 0;
}

bool IsAligned(const void* p, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(p) % alignment == 0;
}

struct alignas(kLine) LineAligned {
  std::atomic<std::uint64_t> seq;
};

LineAligned g_static_line[3];

TEST(ByteOrder, IsLittleEndian) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the ABI's magic values and integers are stored little-endian");
  const std::uint64_t value = 0x0807060504030201ull;
  unsigned char bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);
  for (unsigned i = 0; i < sizeof value; ++i) {
    EXPECT_EQ(bytes[i], i + 1) << "byte " << i << " of a u64 in memory";
  }
}

TEST(Layout, IntegersAreNaturallyAligned) {
  // spec/abi.toml gives every field an offset that assumes natural alignment
  // (i386, for one, aligns a u64 inside a struct to 4 only).
  EXPECT_EQ(alignof(std::uint16_t), 2u);
  EXPECT_EQ(alignof(std::uint32_t), 4u);
  EXPECT_EQ(alignof(std::uint64_t), 8u);
  struct U32ThenU64 {
    std::uint32_t a;
    std::uint64_t b;
  };
  EXPECT_EQ(offsetof(U32ThenU64, b), 8u);
  EXPECT_EQ(sizeof(U32ThenU64), 16u);
}

TEST(Atomics, FixedWidthAtomicsAreLockFreePlainWords) {
  // Lock-free and the size of the plain integer: an atomic field is then the
  // same bytes a BPF program or another language accesses in place.
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "u64 atomics need a lock");
  static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "u32 atomics need a lock");
  static_assert(__atomic_always_lock_free(sizeof(std::uint64_t), nullptr), "C11 u64 atomics need a lock");
  EXPECT_EQ(sizeof(std::atomic<std::uint64_t>), sizeof(std::uint64_t));
  EXPECT_EQ(alignof(std::atomic<std::uint64_t>), alignof(std::uint64_t));
  EXPECT_EQ(sizeof(std::atomic<std::uint32_t>), sizeof(std::uint32_t));
  std::atomic<std::uint64_t> probe{0};
  EXPECT_TRUE(probe.is_lock_free());
}

TEST(CacheLine, CompilerLineCoversHostLine) {
  const long host = HostCacheLine();
  ASSERT_GT(host, 0) << "cannot read the L1 data cache line size (sysconf or sysfs)";
  EXPECT_GE(kLine, static_cast<std::size_t>(host))
      << "aligning to the compiler's interference size would not separate cache lines on this host";
  EXPECT_EQ(sysconf(_SC_PAGESIZE) % host, 0) << "page size is not a whole number of cache lines";
}

TEST(CacheLine, OverAlignedObjectsAreAlignedInEveryStorage) {
  static_assert(alignof(LineAligned) == kLine, "alignas(line) ignored");
  static_assert(sizeof(LineAligned) == kLine, "line-aligned type is not padded to the line");
  LineAligned on_stack[3];
  auto on_heap = std::make_unique<LineAligned>();  // C++17 aligned operator new
  std::vector<LineAligned> in_vector(3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(IsAligned(&g_static_line[i], kLine)) << "static element " << i;
    EXPECT_TRUE(IsAligned(&on_stack[i], kLine)) << "automatic element " << i;
    EXPECT_TRUE(IsAligned(&in_vector[i], kLine)) << "vector element " << i;
  }
  EXPECT_TRUE(IsAligned(on_heap.get(), kLine));
}

// The SCB lives in memory mapped by several processes (a memfd or a pinned BPF
// map); atomics must work through any mapping, from any process.
TEST(SharedMemory, AtomicsAreAddressFreeAcrossMappingsAndProcesses) {
  const long page = sysconf(_SC_PAGESIZE);
  const int fd = memfd_create("morpheus-platform-check", MFD_CLOEXEC);
  ASSERT_GE(fd, 0) << "memfd_create: " << std::strerror(errno);
  ASSERT_EQ(ftruncate(fd, page), 0) << std::strerror(errno);
  void* map_a = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  void* map_b = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(map_a, MAP_FAILED);
  ASSERT_NE(map_b, MAP_FAILED);
  ASSERT_NE(map_a, map_b);
  close(fd);
  EXPECT_TRUE(IsAligned(map_a, kLine));

  auto* counter_a = new (map_a) std::atomic<std::uint64_t>(0);
  auto* counter_b = static_cast<std::atomic<std::uint64_t>*>(map_b);
  counter_a->fetch_add(1, std::memory_order_release);
  EXPECT_EQ(counter_b->load(std::memory_order_acquire), 1u);
  std::uint64_t expected = 1;
  EXPECT_TRUE(counter_b->compare_exchange_strong(expected, 7, std::memory_order_acq_rel));
  EXPECT_EQ(counter_a->load(std::memory_order_acquire), 7u);

  constexpr int kIncrements = 200000;
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork: " << std::strerror(errno);
  if (child == 0) {
    for (int i = 0; i < kIncrements; ++i) counter_b->fetch_add(1, std::memory_order_relaxed);
    _exit(0);
  }
  for (int i = 0; i < kIncrements; ++i) counter_a->fetch_add(1, std::memory_order_relaxed);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(counter_a->load(), 7u + 2u * kIncrements) << "increments were lost between processes";

  munmap(map_a, page);
  munmap(map_b, page);
}

}  // namespace
