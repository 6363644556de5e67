#include "train/args/command_line_flags.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"

namespace tessera::train {
namespace {

// Option groups are CLI11 subcommands without a name.
std::vector<const CLI::App*> with_option_groups(const CLI::App& app) {
  std::vector<const CLI::App*> apps{&app};
  for (const CLI::App* group : app.get_subcommands([](const CLI::App* a) { return a->get_name().empty(); })) {
    const std::vector<const CLI::App*> nested = with_option_groups(*group);
    apps.insert(apps.end(), nested.begin(), nested.end());
  }
  return apps;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substituted = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substituted});
    }
  }
  return row[b.size()];
}

}  // namespace

void take_last_occurrence_of_scalars(CLI::App& app) {
  for (CLI::App* group : app.get_subcommands([](CLI::App* a) { return a->get_name().empty(); }))
    take_last_occurrence_of_scalars(*group);
  for (CLI::Option* option : app.get_options())
    if (option->get_expected_max() <= 1)
      option->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)->trigger_on_parse();
}

std::string unknown_flag_message(const CLI::App& app, const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg.size() < 3 || !arg.starts_with("--")) continue;
    const std::string flag = arg.substr(0, arg.find('='));
    if (app.get_option_no_throw(flag) != nullptr) continue;
    // The nearest known flag, if the difference is a typo's (a letter or two, or _ for -), not another word.
    std::string nearest;
    size_t best = std::max<size_t>(2, flag.size() / 5) + 1;
    for (const CLI::App* a : with_option_groups(app))
      for (const CLI::Option* option : a->get_options())
        for (const std::string& name : option->get_lnames())
          if (const size_t d = edit_distance(flag, "--" + name); d < best) {
            best = d;
            nearest = "--" + name;
          }
    return str_cat("unknown flag ", flag, nearest.empty() ? "" : str_cat(" (did you mean ", nearest, "?)"));
  }
  return "";
}

}  // namespace tessera::train
