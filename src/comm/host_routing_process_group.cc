#include "comm/host_routing_process_group.h"

#include <initializer_list>

namespace tessera::comm {

namespace {

bool on_host(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    if (t->defined() && t->device().type != DeviceType::CPU) return false;
  return true;
}

class HostRoutingProcessGroup final : public ProcessGroup {
 public:
  HostRoutingProcessGroup(std::unique_ptr<ProcessGroup> host, std::unique_ptr<ProcessGroup> device)
      : host_(std::move(host)), device_(std::move(device)) {
    TESSERA_CHECK(host_ && device_, "make_host_routing_process_group: both groups are needed");
    TESSERA_CHECK(host_->world_ranks() == device_->world_ranks() && host_->rank() == device_->rank(),
                  "make_host_routing_process_group: the host and device groups of ", device_->name(),
                  " have other members");
  }

  int rank() const override { return device_->rank(); }
  int size() const override { return device_->size(); }
  const std::vector<int>& world_ranks() const override { return device_->world_ranks(); }
  const std::string& name() const override { return device_->name(); }

  WorkHandle all_reduce_async(const Tensor& t, ReduceOp op) override { return on({&t}).all_reduce_async(t, op); }
  WorkHandle all_gather_async(const Tensor& in, const Tensor& out) override {
    return on({&in, &out}).all_gather_async(in, out);
  }
  WorkHandle reduce_scatter_async(const Tensor& in, const Tensor& out, ReduceOp op) override {
    return on({&in, &out}).reduce_scatter_async(in, out, op);
  }
  // Every member must take the same path: a broadcast's tensor is on the same device on all of them.
  WorkHandle broadcast_async(const Tensor& t, int root) override { return on({&t}).broadcast_async(t, root); }
  WorkHandle all_to_all_async(const Tensor& in, const Tensor& out) override {
    return on({&in, &out}).all_to_all_async(in, out);
  }
  WorkHandle all_to_all_v_async(const Tensor& in, const std::vector<int64_t>& send_counts, const Tensor& out,
                                const std::vector<int64_t>& recv_counts) override {
    return on({&in, &out}).all_to_all_v_async(in, send_counts, out, recv_counts);
  }
  WorkHandle send_async(const Tensor& t, int dst, int tag) override { return on({&t}).send_async(t, dst, tag); }
  WorkHandle recv_async(const Tensor& t, int src, int tag) override { return on({&t}).recv_async(t, src, tag); }
  void barrier() override { host_->barrier(); }

  std::unique_ptr<ProcessGroup> split(int color, int key, const std::string& name) override {
    std::unique_ptr<ProcessGroup> host = host_->split(color, key, name);
    std::unique_ptr<ProcessGroup> device = device_->split(color, key, name);
    if (!host) return nullptr;
    return std::make_unique<HostRoutingProcessGroup>(std::move(host), std::move(device));
  }

 private:
  ProcessGroup& on(std::initializer_list<const Tensor*> tensors) { return on_host(tensors) ? *host_ : *device_; }

  std::unique_ptr<ProcessGroup> host_, device_;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_host_routing_process_group(std::unique_ptr<ProcessGroup> host,
                                                              std::unique_ptr<ProcessGroup> device) {
  return std::make_unique<HostRoutingProcessGroup>(std::move(host), std::move(device));
}

}  // namespace tessera::comm
