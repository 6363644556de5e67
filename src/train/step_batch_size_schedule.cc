#include "train/step_batch_size_schedule.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/check.h"

namespace tessera::train {
namespace {

constexpr const char* kFlag = "--step-batch-size-schedule";

[[noreturn]] void refuse(const std::string& schedule, const std::string& why) {
  throw Error(str_cat(kFlag, "=", schedule, ": ", why));
}

// Megatron's _parse_numeric_value: an optional K/M/B/T suffix (either case), then int(float(x) * m),
// which truncates toward zero ("1.5" is 1). Python's float also reads "inf" and "nan", which int() then
// refuses; strtod's hexadecimal forms are not Python's, so only decimal digits, '.', signs and exponents.
int64_t parse_number(const std::string& text, const std::string& schedule, const std::string& entry) {
  std::string s = text;
  s.erase(0, s.find_first_not_of(" \t"));
  s.erase(s.find_last_not_of(" \t") + 1);
  double multiplier = 1;
  if (!s.empty()) {
    const char suffix = static_cast<char>(std::toupper(static_cast<unsigned char>(s.back())));
    const double m = suffix == 'T' ? 1e12 : suffix == 'B' ? 1e9 : suffix == 'M' ? 1e6 : suffix == 'K' ? 1e3 : 1;
    if (m != 1) {
      multiplier = m;
      s.pop_back();
    }
  }
  const bool decimal = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '+' || c == '-' || c == 'e' || c == 'E';
  });
  char* end = nullptr;
  const double value = decimal ? std::strtod(s.c_str(), &end) * multiplier : 0;
  if (!decimal || end != s.c_str() + s.size() || !std::isfinite(value) || std::fabs(value) >= 9.2e18)
    refuse(schedule, str_cat("entry \"", entry, "\": \"", text, "\" is not a number (digits, optionally with a "
                             "decimal point and a K, M, B or T suffix)"));
  return static_cast<int64_t>(value);  // toward zero, as Python's int()
}

}  // namespace

std::vector<BatchSizeStep> parse_step_batch_size_schedule(const std::string& schedule, int64_t seq_length) {
  TESSERA_CHECK(seq_length > 0, kFlag, ": the sequence length must be known (got ", seq_length, ")");
  std::string text = schedule;
  std::replace(text.begin(), text.end(), ',', ' ');
  std::vector<BatchSizeStep> steps;
  size_t pos = 0;
  while ((pos = text.find_first_not_of(" \t\n", pos)) != std::string::npos) {
    const size_t stop = std::min(text.size(), text.find_first_of(" \t\n", pos));
    const std::string entry = text.substr(pos, stop - pos);
    pos = stop;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos)
      refuse(schedule, str_cat("entry \"", entry, "\" is not THRESHOLD:BATCH_SIZE"));
    const int64_t tokens = parse_number(entry.substr(0, colon), schedule, entry);
    const int64_t size = parse_number(entry.substr(colon + 1), schedule, entry);
    // Python's // floors; a negative threshold is refused below either way (the first must be 0).
    const int64_t samples = tokens >= 0 ? tokens / seq_length : -((-tokens + seq_length - 1) / seq_length);
    steps.push_back({samples, size});
  }
  if (steps.empty()) refuse(schedule, "the schedule has no entries; give THRESHOLD:BATCH_SIZE pairs, the first at 0");
  std::stable_sort(steps.begin(), steps.end(),
                   [](const BatchSizeStep& a, const BatchSizeStep& b) { return a.threshold < b.threshold; });
  if (steps[0].threshold != 0)
    refuse(schedule, str_cat("the first entry (in threshold order) must have threshold 0, got ", steps[0].threshold,
                             " samples (thresholds are tokens, divided by --seq-length=", seq_length, ")"));
  for (size_t i = 1; i < steps.size(); ++i)
    if (steps[i].threshold <= steps[i - 1].threshold)
      refuse(schedule, str_cat("thresholds must be strictly increasing, got ", steps[i - 1].threshold, " samples twice "
                               "(thresholds are tokens, divided by --seq-length=", seq_length, ")"));
  for (const BatchSizeStep& s : steps)
    if (s.size <= 0) refuse(schedule, str_cat("batch sizes must be positive, got ", s.size));
  return steps;
}

}  // namespace tessera::train
