// The host-routing group: operations on host tensors only reach the host group, any with a device
// tensor the device group (tensors "on cuda:0" of host memory: comm/staging_testing.h), splits split both.
#include "comm/host_routing_process_group.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "comm/staging_testing.h"

namespace tessera::comm {
namespace {

using testing::FakeDeviceScope;
using testing::kFakeGpu;

struct Done final : Work {
  void wait() override {}
  bool test() override { return true; }
};

// A group of one member that records each operation it is given, by name, in `log`.
class RecordingGroup final : public ProcessGroup {
 public:
  RecordingGroup(std::string tag, std::map<std::string, int>& log) : tag_(std::move(tag)), log_(log) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  const std::string& name() const override { return tag_; }
  WorkHandle all_reduce_async(const Tensor&, ReduceOp) override { return note("all_reduce"); }
  WorkHandle all_gather_async(const Tensor&, const Tensor&) override { return note("all_gather"); }
  WorkHandle reduce_scatter_async(const Tensor&, const Tensor&, ReduceOp) override { return note("reduce_scatter"); }
  WorkHandle broadcast_async(const Tensor&, int) override { return note("broadcast"); }
  WorkHandle all_to_all_async(const Tensor&, const Tensor&) override { return note("all_to_all"); }
  WorkHandle all_to_all_v_async(const Tensor&, const std::vector<int64_t>&, const Tensor&,
                                const std::vector<int64_t>&) override {
    return note("all_to_all_v");
  }
  WorkHandle send_async(const Tensor&, int, int) override { return note("send"); }
  WorkHandle recv_async(const Tensor&, int, int) override { return note("recv"); }
  void barrier() override { note("barrier"); }
  std::unique_ptr<ProcessGroup> split(int color, int, const std::string& name) override {
    note("split");
    return color < 0 ? nullptr : std::make_unique<RecordingGroup>(tag_ + "/" + name, log_);
  }

 private:
  WorkHandle note(const std::string& op) {
    ++log_[tag_ + " " + op];
    return std::make_unique<Done>();
  }
  std::string tag_;
  std::map<std::string, int>& log_;
  std::vector<int> ranks_{0};
};

TEST(HostRoutingProcessGroup, HostTensorsGoToTheHostGroupAndTheRestToTheDeviceGroup) {
  FakeDeviceScope fake;
  std::map<std::string, int> log;
  auto g = make_host_routing_process_group(std::make_unique<RecordingGroup>("host", log),
                                           std::make_unique<RecordingGroup>("device", log));
  EXPECT_EQ(g->name(), "device");
  const Tensor h = Tensor::zeros({4}, DType::F32, Device::cpu());
  const Tensor d = Tensor::zeros({4}, DType::F32, kFakeGpu);
  for (const Tensor* t : {&h, &d}) {
    g->all_reduce(*t);
    g->broadcast(*t, 0);
    g->send_async(*t, 0, 1)->wait();
    g->recv_async(*t, 0, 1)->wait();
  }
  // Pairs: all on the host, or any on the device (the device group then refuses what it cannot take).
  for (const Tensor* out : {&h, &d}) {
    g->all_gather_async(h, *out)->wait();
    g->reduce_scatter_async(h, *out)->wait();
    g->all_to_all_async(h, *out)->wait();
    g->all_to_all_v_async(h, {4}, *out, {4})->wait();
  }
  g->barrier();
  const std::map<std::string, int> expected{
      {"host all_reduce", 1},     {"device all_reduce", 1},     {"host broadcast", 1},   {"device broadcast", 1},
      {"host send", 1},           {"device send", 1},           {"host recv", 1},        {"device recv", 1},
      {"host all_gather", 1},     {"device all_gather", 1},     {"host reduce_scatter", 1},
      {"device reduce_scatter", 1}, {"host all_to_all", 1},     {"device all_to_all", 1},
      {"host all_to_all_v", 1},   {"device all_to_all_v", 1},   {"host barrier", 1}};
  EXPECT_EQ(log, expected);
}

TEST(HostRoutingProcessGroup, ASplitSplitsBothGroups) {
  FakeDeviceScope fake;
  std::map<std::string, int> log;
  auto g = make_host_routing_process_group(std::make_unique<RecordingGroup>("host", log),
                                           std::make_unique<RecordingGroup>("device", log));
  std::unique_ptr<ProcessGroup> part = g->split(0, 0, "tensor");
  ASSERT_NE(part, nullptr);
  EXPECT_EQ(part->name(), "device/tensor");
  part->all_reduce(Tensor::zeros({1}, DType::F32, Device::cpu()));
  part->all_reduce(Tensor::zeros({1}, DType::F32, kFakeGpu));
  EXPECT_EQ(g->split(-1, 0, "none"), nullptr);
  const std::map<std::string, int> expected{{"host split", 2},
                                            {"device split", 2},
                                            {"host/tensor all_reduce", 1},
                                            {"device/tensor all_reduce", 1}};
  EXPECT_EQ(log, expected);
}

}  // namespace
}  // namespace tessera::comm
