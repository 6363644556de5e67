// The NCCL process group at world size 1 on a GPU (the machines lent for checks have one GPU, and NCCL
// refuses two ranks on one), each collective against the single-process group's result on host copies,
// and the staged group with the real transfers and pinned memory; skipped, with the reason, where no GPU
// or no NCCL is present. Several ranks, each with a GPU, are for a machine that has them.
#include "comm/cuda/nccl_process_group.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>

#include "comm/device_staging.h"
#include "comm/staged_process_group.h"
#include "core/testing.h"
#include "kernels/cuda/cuda_runtime.h"
#include "kernels/tensor_ops.h"

namespace tessera::comm::cuda {
namespace {

using ::tessera::testing::error_of;

const Device kGpu{DeviceType::CUDA, 0};

Tensor host_values(DType dt, int64_t n, int64_t seed) {
  Tensor t = Tensor::empty({n}, dt, Device::cpu());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = (i * 7 + seed) % 23 - 11;
    switch (dt) {
      case DType::F32: t.host_f32()[i] = static_cast<float>(v) * 0.25f; break;
      case DType::I32: t.host_i32()[i] = static_cast<int32_t>(v); break;
      default: t.host_i64()[i] = v + (int64_t{1} << 40); break;
    }
  }
  return t;
}

bool same_bytes(const Tensor& host, const Tensor& device) {
  Tensor back = kernels::to_device(device, Device::cpu());
  return back.nbytes() == host.nbytes() && std::memcmp(back.host_raw(), host.host_raw(), host.nbytes()) == 0;
}

class GpuGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (tessera::cuda::device_count(&why) == 0) GTEST_SKIP() << why;
    tessera::cuda::register_device_allocators();
    tessera::cuda::check(cudaSetDevice(0), "cudaSetDevice");
  }
};

class NcclGroupTest : public GpuGroupTest {
 protected:
  void SetUp() override {
    GpuGroupTest::SetUp();
    if (IsSkipped()) return;
    try {
      nccl_ = load_nccl_library();
    } catch (const Error& e) {
      GTEST_SKIP() << e.what();
    }
    group_ = make_nccl_process_group(make_single_process_group("world"), 0, nccl_);
    reference_ = make_single_process_group("world");
  }
  NcclLibrary nccl_;
  std::unique_ptr<ProcessGroup> group_, reference_;
};

TEST_F(NcclGroupTest, EveryCollectiveAtWorldSizeOne) {
  EXPECT_EQ(group_->size(), 1);
  EXPECT_EQ(group_->name(), "world");
  for (DType dt : {DType::F32, DType::I32, DType::I64})
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4099}}) {
      const std::string label = str_cat(dtype_name(dt), " n=", n);
      Tensor h = host_values(dt, n, 1), d = kernels::to_device(h, kGpu);
      reference_->all_reduce(h, ReduceOp::Max);
      group_->all_reduce(d, ReduceOp::Max);
      EXPECT_TRUE(same_bytes(h, d)) << "all_reduce " << label;

      Tensor out_h = Tensor::zeros({n}, dt, Device::cpu()), out_d = Tensor::zeros({n}, dt, kGpu);
      reference_->all_gather(h, out_h);
      group_->all_gather(d, out_d);
      EXPECT_TRUE(same_bytes(out_h, out_d)) << "all_gather " << label;

      reference_->reduce_scatter(h, out_h);
      group_->reduce_scatter(d, out_d);
      EXPECT_TRUE(same_bytes(out_h, out_d)) << "reduce_scatter " << label;

      group_->broadcast(d, 0);
      EXPECT_TRUE(same_bytes(h, d)) << "broadcast " << label;

      Tensor a2a = Tensor::zeros({n}, dt, kGpu);
      group_->all_to_all(d, a2a);
      EXPECT_TRUE(same_bytes(h, a2a)) << "all_to_all " << label;
      Tensor a2av = Tensor::zeros({n}, dt, kGpu);
      group_->all_to_all_v_async(d, {n}, a2av, {n})->wait();
      EXPECT_TRUE(same_bytes(h, a2av)) << "all_to_all_v " << label;
    }
  group_->barrier();
  auto part = group_->split(0, 0, "part");
  ASSERT_NE(part, nullptr);
  Tensor one = kernels::to_device(host_values(DType::F32, 3, 2), kGpu);
  part->all_reduce(one);
  EXPECT_TRUE(same_bytes(host_values(DType::F32, 3, 2), one));
}

TEST_F(NcclGroupTest, RefusesHostTensorsAndOtherDtypes) {
  Tensor h = Tensor::zeros({2}, DType::F32, Device::cpu());
  EXPECT_EQ(error_of([&] { group_->all_reduce(h); }),
            "all_reduce on group world: t is on cpu; this NCCL group works on cuda:0 tensors");
  Tensor b = Tensor::zeros({2}, DType::BF16, kGpu);
  EXPECT_EQ(error_of([&] { group_->all_reduce(b); }),
            "all_reduce on group world: t has dtype bf16; supported are fp32, int32 and int64");
}

TEST_F(GpuGroupTest, StagedGroupWithPinnedMemoryAndRealTransfers) {
  auto staged = make_staged_process_group(make_single_process_group("world"), make_transfer_staging());
  Tensor h = host_values(DType::F32, 5000, 3), d = kernels::to_device(h, kGpu);
  Tensor out = Tensor::zeros({5000}, DType::F32, kGpu);
  staged->all_reduce(d);
  staged->all_gather(d, out);
  EXPECT_TRUE(same_bytes(h, out));
  EXPECT_EQ(staging_stats(*staged).copies_to_host, 2);
  EXPECT_EQ(staging_stats(*staged).copies_to_device, 2);
}

TEST_F(GpuGroupTest, DeviceGroupChoiceAtWorldSizeOne) {
  std::string reason;
  auto g = make_device_process_group(make_single_process_group("world"), DeviceCollectives::Staged, 0, &reason);
  EXPECT_EQ(reason, "group world: staged (--device-collectives staged)");
  auto a = make_device_process_group(make_single_process_group("world"), DeviceCollectives::Auto, 0, &reason);
  EXPECT_TRUE(reason == "group world: nccl (each rank has its own GPU)" || reason.rfind("group world: staged (no NCCL", 0) == 0)
      << reason;
  Tensor d = kernels::to_device(host_values(DType::I32, 9, 4), kGpu);
  a->all_reduce(d);
  EXPECT_TRUE(same_bytes(host_values(DType::I32, 9, 4), d));
}

}  // namespace
}  // namespace tessera::comm::cuda
