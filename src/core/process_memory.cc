#include "core/process_memory.h"

#include <fstream>
#include <string>
#include <unistd.h>

namespace tessera {
namespace {

double proc_status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(field, 0) == 0) return std::stod(line.substr(field.size())) * 1024;  // "VmRSS:   123456 kB"
  return 0;
}

}  // namespace

double resident_bytes() { return proc_status_bytes("VmRSS:"); }
double peak_resident_bytes() { return proc_status_bytes("VmHWM:"); }

double physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
}

}  // namespace tessera
