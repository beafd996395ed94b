// fa-skeleton: writes lessons/ from solutions/, or checks that lessons/ is up to date (maintainers).
//   fa-skeleton write [--force] <solutions-dir> <lessons-dir>
//   fa-skeleton check <solutions-dir> <lessons-dir>    (exit 1 and the stale files if out of date)
// Only source files are generated; README.md and profile.sh in lessons/ are written by hand, and
// ANSWERS.md stays with the solutions (it is for instructors).
//
// A student's work is never lost: `write` replaces a lessons/ file only if it is still exactly
// what the generator last wrote there (lessons/.skeleton-hashes records it). A file that was
// edited is kept, and `write` says so and exits 1; with --force it is replaced, and the edited
// version is kept beside it as <file>.mine-<date>-<time>.
#include <chrono>
#include <ctime>
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

static std::string stamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&now));
  return buf;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool force = false;
  for (auto it = args.begin(); it != args.end();)
    if (*it == "--force") {
      force = true;
      it = args.erase(it);
    } else {
      ++it;
    }
  if (args.size() != 3 || (args[0] != "write" && args[0] != "check") || (force && args[0] != "write")) {
    std::cerr << "usage: fa-skeleton write [--force] <solutions-dir> <lessons-dir>\n"
                 "       fa-skeleton check <solutions-dir> <lessons-dir>\n";
    return 2;
  }
  const bool write = args[0] == "write";
  const fs::path solutions = args[1], lessons = args[2];
  int stale = 0, files = 0, kept = 0;
  try {
    std::map<std::string, std::string> hashes = fa::skeleton::read_hashes(lessons.string()), generated;
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
        const std::string key = lesson.path().filename().string() + "/" + f.path().filename().string();
        const std::string origin = "solutions/" + key;
        const std::string text = fa::skeleton::transform(slurp(f.path()), origin);
        const fs::path target = out_dir / f.path().filename();
        generated[key] = fa::skeleton::hash_text(text);
        ++files;
        const bool present = fs::exists(target);
        const std::string now = present ? slurp(target) : "";
        if (!write) {
          if (!present || now != text) {
            std::cerr << "stale: " << target.string() << " differs from what " << origin << " generates\n";
            ++stale;
          }
          continue;
        }
        if (present && now == text) continue;
        const auto rec = hashes.find(key);
        const bool untouched = !present || (rec != hashes.end() && rec->second == fa::skeleton::hash_text(now));
        if (!untouched && !force) {
          std::cerr << "kept " << target.string() << ": it was edited since fa-skeleton wrote it (your work is not overwritten)\n";
          generated[key] = rec != hashes.end() ? rec->second : "edited";
          ++kept;
          continue;
        }
        fs::create_directories(out_dir);
        if (!untouched) {
          const fs::path backup = target.string() + ".mine-" + stamp();
          fs::copy_file(target, backup);
          std::cout << "saved your version of " << target.string() << " as " << backup.string() << "\n";
        }
        std::ofstream(target, std::ios::binary) << text;
        std::cout << "wrote " << target.string() << "\n";
      }
    }
    if (write) {
      fa::skeleton::write_hashes(lessons.string(), generated);
    } else if (generated != hashes) {
      std::cerr << "stale: " << (lessons / fa::skeleton::kHashFile).string() << " does not record what the generator writes\n";
      ++stale;
    }
  } catch (const std::exception& e) {
    std::cerr << "fa-skeleton: " << e.what() << "\n";
    return 1;
  }
  if (kept) {
    std::cerr << kept << " edited file(s) kept as they are. To replace them with fresh skeletons anyway (your versions are "
                 "saved beside them): fa-skeleton write --force " << solutions.string() << " " << lessons.string() << "\n";
    return 1;
  }
  if (stale) {
    std::cerr << stale << " stale skeleton file(s) (a maintainers' check): regenerate lessons/ with "
                 "`cmake --build --preset solutions --target skeletons` and commit it\n";
    return 1;
  }
  std::cout << files << " skeleton file(s) " << (write ? "up to date" : "in sync with solutions/") << "\n";
  return 0;
}
