#include "plan/cluster_files.h"

#include <fstream>

#include "core/check.h"
#include "core/file_io.h"
#include "plan/measured_calibration.h"

namespace tessera::plan {
namespace {

// Runs `f`, prefixing any Error (or JSON exception) with "--cluster=PATH: ".
template <typename F>
auto naming_file(const std::string& path, F f) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw Error(str_cat("--cluster=", path, ": ", e.what()));
  } catch (const Error& e) {
    throw Error(str_cat("--cluster=", path, ": ", e.what()));
  }
}

}  // namespace

CalibratedCluster read_cluster_files(const std::vector<std::string>& paths, const std::string& fallback_device) {
  CalibratedCluster out;
  nlohmann::json device, nccl = nlohmann::json::object(), step;
  std::string device_paths, step_path;
  for (const std::string& path : paths) {
    std::ifstream in = open_input_file(path, "--cluster=" + path);
    naming_file(path, [&] {
      const nlohmann::json j = nlohmann::json::parse(in);
      TESSERA_CHECK(j.is_object(), "expected a JSON object");
      for (const auto& [key, value] : j.items())
        TESSERA_CHECK(key == "device" || key == "num_devices" || key == "calibrated_for" || key == "nccl" ||
                          key == "measured_step",
                      "field \"", key, "\": unknown (known: device, num_devices, calibrated_for, nccl, measured_step)");
      if (j.contains("device")) {
        TESSERA_CHECK(j.at("device").is_object(), "\"device\": expected an object");
        if (device.is_null()) device = j.at("device");
        else device.merge_patch(j.at("device"));
        device_paths += (device_paths.empty() ? "" : ",") + path;
      }
      if (j.contains("num_devices")) {
        TESSERA_CHECK(j.at("num_devices").is_number_integer() && j.at("num_devices").get<int>() > 0,
                      "\"num_devices\"=", j.at("num_devices").dump(), ": must be a positive integer");
        out.cluster.num_devices = j.at("num_devices").get<int>();
        out.num_devices_given = true;
      }
      if (j.contains("calibrated_for")) {
        TESSERA_CHECK(j.at("calibrated_for").is_object(), "\"calibrated_for\": expected an object");
        out.cluster.calibrated_for = j.at("calibrated_for");
      }
      if (j.contains("nccl")) {
        nccl_bus_bandwidths_from_json(j.at("nccl"));  // each file's fields checked where they are
        nccl.merge_patch(j.at("nccl"));
      }
      if (j.contains("measured_step")) {
        measured_step_from_json(j.at("measured_step"));
        step = j.at("measured_step");
        step_path = path;
      }
      return 0;
    });
  }
  if (device.is_null()) out.cluster.device = find_device(fallback_device);
  else out.cluster.device = naming_file(device_paths, [&] { return device_from_json(device); });
  if (!nccl.empty())
    out.notes = apply_nccl_bus_bandwidths(out.cluster.device, nccl_bus_bandwidths_from_json(nccl));
  out.step_measured = !step.is_null();
  if (out.step_measured)
    out.cluster.device = naming_file(step_path, [&] {
      return fit_gemm_efficiency(out.cluster.device, measured_step_from_json(step), &out.notes);
    });
  return out;
}

}  // namespace tessera::plan
