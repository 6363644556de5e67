// `tessera plan --cluster FILE [--cluster FILE ...]`: the cluster from one or more JSON files, merged in
// the order given, so that measurements written apart (bench_collectives --cluster-output's "nccl"
// object, bench_gpu_train --cluster-output's "measured_step") combine with a device entry or the
// built-in table's. A file is an object of
//   "device"          a device entry (plan/cluster.h; "base": a built-in device to start from); later
//                     files' fields override earlier ones'. No file with one: the --device entry.
//   "num_devices"     the cluster's devices (the last file's)
//   "calibrated_for"  what `tessera plan --calibrate` measured (the last file's)
//   "nccl"            measured NCCL bus bandwidths (plan/measured_calibration.h); later fields override
//   "measured_step"   a measured one-GPU step (plan/measured_calibration.h); the last file's
// Anything else, and every bad field, is an Error naming the file and the field.
#pragma once

#include <string>
#include <vector>

#include "plan/cluster.h"

namespace tessera::plan {

struct CalibratedCluster {
  ClusterSpec cluster;
  bool num_devices_given = false;
  bool step_measured = false;  // a file had "measured_step"
  // What replaced the table's numbers with measurements, one line each, for the plan's printout.
  std::vector<std::string> notes;
};

// `fallback_device`: the built-in device (--device) when no file has a "device" object.
CalibratedCluster read_cluster_files(const std::vector<std::string>& paths, const std::string& fallback_device);

}  // namespace tessera::plan
