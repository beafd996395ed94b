// fa-skeleton: writes lessons/ from solutions/, or checks that lessons/ is up to date.
//   fa-skeleton write <solutions-dir> <lessons-dir>
//   fa-skeleton check <solutions-dir> <lessons-dir>    (exit 1 and the stale files if out of date)
// Only source files are generated; README.md and profile.sh in lessons/ are written by hand, and
// ANSWERS.md stays with the solutions (it is for instructors).
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "skeleton.hpp"

namespace fs = std::filesystem;

static std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int main(int argc, char** argv) {
  if (argc != 4 || (std::string(argv[1]) != "write" && std::string(argv[1]) != "check")) {
    std::cerr << "usage: fa-skeleton write|check <solutions-dir> <lessons-dir>\n";
    return 2;
  }
  const bool write = std::string(argv[1]) == "write";
  const fs::path solutions = argv[2], lessons = argv[3];
  int stale = 0, files = 0;
  try {
    for (const auto& lesson : fs::directory_iterator(solutions)) {
      if (!lesson.is_directory()) continue;
      const fs::path out_dir = lessons / lesson.path().filename();
      // Generated sources in lessons/ that no longer have a solution are stale too.
      if (fs::exists(out_dir))
        for (const auto& f : fs::directory_iterator(out_dir))
          if (fa::skeleton::is_source(f.path().filename().string()) && !fs::exists(lesson.path() / f.path().filename())) {
            std::cerr << "stale: " << f.path().string() << " has no solution counterpart\n";
            ++stale;
          }
      for (const auto& f : fs::directory_iterator(lesson.path())) {
        if (!fa::skeleton::is_source(f.path().filename().string())) continue;
        const std::string origin = "solutions/" + lesson.path().filename().string() + "/" + f.path().filename().string();
        const std::string text = fa::skeleton::transform(slurp(f.path()), origin);
        const fs::path target = out_dir / f.path().filename();
        ++files;
        if (write) {
          fs::create_directories(out_dir);
          if (!fs::exists(target) || slurp(target) != text) {
            std::ofstream(target, std::ios::binary) << text;
            std::cout << "wrote " << target.string() << "\n";
          }
        } else if (!fs::exists(target) || slurp(target) != text) {
          std::cerr << "stale: " << target.string() << " differs from what " << origin << " generates\n";
          ++stale;
        }
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "fa-skeleton: " << e.what() << "\n";
    return 1;
  }
  if (stale) {
    std::cerr << stale << " stale skeleton file(s): run `cmake --build --preset solutions --target skeletons` and commit lessons/\n";
    return 1;
  }
  std::cout << files << " skeleton file(s) " << (write ? "up to date" : "in sync with solutions/") << "\n";
  return 0;
}
