// fa-grade: runs a build's tests and turns them into a per-lesson score (tools/grade.sh runs it).
//
//   fa-grade --build DIR [--points tests/grading.txt] [--out DIR] [--progress [--lessons DIR] [--not-built L,...]] [--timeout S]
//            [--perf STUDENT.csv SOLUTION.csv]
//
// It runs ctest once (JUnit XML into --out), groups the test cases by lesson (their "lessonNN/"
// prefix; a test executable that failed to build shows up as test_lessonNN_..._NOT_BUILT and
// makes the lesson score 0), and prints a table: points per lesson from the points file, times the
// share of the lesson's tests that passed. Tests that did not run (skipped: GPU tests without a
// GPU) are left out of the share and reported. Some tests are gates, not points: a lesson that
// does not compile, whose registered tests differ from the manifest, that calls the reference, or
// that fails the checks of the code a skeleton is given (declared features, bad input rejected)
// scores 0; passing them earns nothing, so a skeleton scores 0. A lesson with no test passed and
// every failure "not implemented yet" is "not started". --perf adds performance points from two fa-bench CSVs of the same GPU
// (the rule is in tests/grading.txt). --progress prints the same table as a student's progress,
// without points; with --lessons DIR (the student's folder) and --not-built LABELS
// (tools/progress.sh), one status per lesson: not started (its files untouched since generated),
// does not compile, TODOs left, failing (n of m), CPU parts passing (GPU not run), passing.
// Writes summary.json (for an LMS) and junit.xml into --out.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "skeleton.hpp"

namespace fs = std::filesystem;

namespace {

struct Lesson {
  double points = 0, perf_points = 0;
  int passed = 0, failed = 0, skipped = 0, not_implemented = 0;
  std::string broken;  // a gate failed: the lesson did not build, its tests vanished, or it calls the reference
  double perf_ratio = -1;  // student / solution time, geometric mean; -1: not measured
  std::string perf_note;
  double score() const {
    const int counted = passed + failed;
    if (!broken.empty() || counted == 0) return 0.0;
    return points * passed / counted;
  }
  double perf_score() const {
    if (perf_ratio < 0) return 0;
    return perf_points * std::clamp((2.0 - perf_ratio) / (2.0 - 1.2), 0.0, 1.0);
  }
  // A student's progress (--progress): one status per lesson.
  bool untouched = false, not_built = false;
  std::vector<std::string> todos_left;
  std::string progress() const {
    if (untouched) return "not started";
    if (not_built) return "does not compile";
    if (!todos_left.empty()) {  // "TODO(1) in kernel.cu: ..." -> "TODO(1), TODO(2) in kernel.cu; TODO(3) in model.cpp"
      std::string t = "TODOs left: ", file;
      for (const std::string& todo : todos_left) {
        const size_t in = todo.find(" in "), colon = todo.find(':');
        const std::string f = todo.substr(in + 4, colon - in - 4);
        if (!file.empty() && f != file) t += " in " + file + "; ";
        else if (!file.empty()) t += ", ";
        t += todo.substr(0, in);
        file = f;
      }
      return t + " in " + file;
    }
    if (!broken.empty()) return "failing: " + broken;
    if (failed > 0) return "failing (" + std::to_string(failed) + " of " + std::to_string(passed + failed) + " tests)";
    if (passed == 0) return skipped ? "CPU parts passing, GPU not run (no CPU tests)" : "no tests";
    if (skipped) return "CPU parts passing, GPU not run";
    return "passing";
  }
  std::string status() const {
    if (!broken.empty()) return "broken: " + broken;
    if (passed + failed == 0) return skipped ? "needs a GPU" : "no tests";
    if (failed == 0) return skipped ? "passing (CPU parts)" : "passing";
    if (passed == 0 && not_implemented == failed) return "not started";
    return "failing";
  }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') { o += "\\n"; continue; }
    o += c;
  }
  return o;
}

// fa-bench CSV: lesson id "04_fa2" -> list of (case key, ms, ok)
std::map<std::string, std::map<std::string, std::pair<double, bool>>> read_bench(const std::string& path) {
  std::map<std::string, std::map<std::string, std::pair<double, bool>>> out;
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (f.size() < 15) continue;
    const std::string key = f[2] + "/d" + f[3] + "/c" + f[4] + "/n" + f[7];
    out[f[1]][key] = {std::atof(f[8].c_str()), f[14] == "ok"};
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string build, points_file, out_dir = ".", perf_student, perf_solution, lessons_dir, not_built;
  bool progress = false;
  int timeout = 600;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::cerr << a << " needs a value\n"; std::exit(2); }
      return argv[++i];
    };
    if (a == "--build") build = next();
    else if (a == "--points") points_file = next();
    else if (a == "--out") out_dir = next();
    else if (a == "--progress") progress = true;
    else if (a == "--lessons") lessons_dir = next();
    else if (a == "--not-built") not_built = next();
    else if (a == "--timeout") timeout = std::stoi(next());
    else if (a == "--perf") { perf_student = next(); perf_solution = next(); }
    else { std::cerr << "unknown option " << a << " (see the header of tools/fa_grade.cpp)\n"; return 2; }
  }
  if (build.empty()) { std::cerr << "usage: fa-grade --build DIR [--points FILE] [--out DIR] [--progress] [--perf S.csv R.csv]\n"; return 2; }
  fs::create_directories(out_dir);
  const std::string junit = fs::absolute(fs::path(out_dir) / "junit.xml").string();

  std::map<std::string, Lesson> lessons;  // every lesson in the points file appears, tested or not
  if (!points_file.empty()) {
    std::ifstream in(points_file);
    if (!in) { std::cerr << "cannot read " << points_file << "\n"; return 2; }
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      std::string label;
      Lesson l;
      ls >> label >> l.points >> l.perf_points;
      lessons[label] = l;
    }
  }

  // --progress: what the student's folder says of itself (untouched since generated, the TODOs
  // still listed) and which lessons did not compile (progress.sh builds each on its own). Their
  // tests are not run: a lesson that did not compile would run its stale binaries.
  std::string skip = "mutants|harness|reference|skeletons";
  if (!not_built.empty()) {
    std::stringstream ss(not_built);
    for (std::string label; std::getline(ss, label, ',');)
      if (!label.empty()) {
        lessons[label].not_built = true;
        skip += "|" + label;
      }
  }
  if (!lessons_dir.empty()) {
    const auto hashes = fa::skeleton::read_hashes(lessons_dir);
    for (const auto& dir : fs::directory_iterator(lessons_dir)) {
      const std::string id = dir.path().filename().string();
      if (!dir.is_directory() || id.size() < 3 || !std::isdigit(static_cast<unsigned char>(id[0]))) continue;
      const std::string label = "lesson" + id.substr(0, 2);
      if (!lessons.count(label)) continue;  // a folder the points file does not know
      const fa::skeleton::LessonState st = fa::skeleton::lesson_state(dir.path().string(), hashes);
      Lesson& l = lessons[label];
      l.untouched = !hashes.empty() && st.edited.empty();
      l.todos_left = st.todos_left;
      if (l.untouched && !l.not_built) skip += "|" + label;
    }
  }
  // One ctest run over everything the build has; the per-test timeout keeps a hanging kernel from
  // stopping the grading (it fails its own test).
  const std::string cmd = "ctest --test-dir \"" + build + "\" --timeout " + std::to_string(timeout) +
                          " -j 4 --output-junit \"" + junit + "\" -E \"^(" + skip + ")/\" > \"" +
                          (fs::path(out_dir) / "ctest.log").string() + "\" 2>&1";
  std::cout << "running the tests of " << build << " (log: " << (fs::path(out_dir) / "ctest.log").string() << ")\n";
  std::system(cmd.c_str());  // its exit code says some test failed: that is what we are here to count
  const std::string xml = slurp(junit);
  if (xml.empty()) { std::cerr << "no JUnit output from ctest: did the build configure?\n"; return 1; }
  const std::regex tc_re("<testcase name=\"([^\"]*)\"[^>]*status=\"([a-z]+)\"[^>]*>([\\s\\S]*?)</testcase>");
  const std::regex label_re("^(lesson[0-9][0-9])/");
  const std::regex not_built_re("test_(lesson[0-9][0-9])_.*NOT_BUILT");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tc_re); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[1], status = (*it)[2], body = (*it)[3];
    std::smatch m;
    std::string label;
    if (std::regex_search(name, m, label_re) || std::regex_search(name, m, not_built_re)) label = m[1];
    else continue;
    Lesson& l = lessons[label];
    // Gates, not points: the lesson must build, register its tests and not call the reference.
    // So are the two checks of the code a skeleton is given (the features it declares, the bad input
    // it rejects before launching): failing them breaks the lesson, passing them earns nothing.
    const bool not_built = name.find("NOT_BUILT") != std::string::npos;
    auto ends_with = [&](const std::string& tail) {
      return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool gate = not_built || ends_with("/manifest") || ends_with("/links_without_reference") ||
                      ends_with("forward: declares the required features") ||
                      ends_with("forward: bad input rejected before launch") ||
                      ends_with("backward: declares the required features") ||
                      ends_with("backward: bad input rejected before launch");
    if (gate) {
      if (not_built) l.broken = "does not compile";  // ctest cannot even start it: never "run"
      else if (status != "run" && status != "notrun" && l.broken.empty()) l.broken = name.substr(name.find('/') + 1) + " failed";
      continue;
    }
    if (status == "run") ++l.passed;
    else if (status == "notrun" || status == "disabled") ++l.skipped;
    else {
      ++l.failed;
      if (body.find("not implemented yet") != std::string::npos) ++l.not_implemented;
    }
  }

  if (!perf_student.empty()) {
    const auto student = read_bench(perf_student), solution = read_bench(perf_solution);
    for (auto& [label, l] : lessons) {
      const std::string nn = label.substr(6);
      for (const auto& [id, cases] : solution) {
        if (id.rfind(nn + "_", 0) != 0) continue;
        double log_sum = 0;
        int n = 0;
        bool wrong = false;
        const auto sit = student.find(id);
        for (const auto& [key, ref] : cases) {
          if (!ref.second) continue;
          if (sit == student.end() || !sit->second.count(key) || !sit->second.at(key).second) {
            wrong = true;
            continue;
          }
          log_sum += std::log(sit->second.at(key).first / ref.first);
          ++n;
        }
        if (wrong) { l.perf_ratio = -1; l.perf_note = "benchmark case missing or failed validation"; }
        else if (n) l.perf_ratio = std::exp(log_sum / n);
      }
    }
  }

  double total = 0, max_total = 0;
  if (progress) {  // one line per lesson, and what to do next
    std::printf("\n%-10s %s\n", "lesson", "status");
    for (const auto& [label, l] : lessons) std::printf("%-10s %s\n", label.c_str(), l.progress().c_str());
    std::printf("\nbuild and test one lesson: cmake --build --preset student --target check-lessonNN\n");
    return 0;
  }
  std::printf("\n%-10s %-22s %7s %7s %8s", "lesson", "status", "passed", "failed", "skipped");
  if (!progress) std::printf(" %10s %14s", "score", "performance");
  std::printf("\n");
  std::ostringstream js;
  const char* seed = std::getenv("FA_TEST_SEED");
  js << "{\n  \"build\": \"" << json_escape(build) << "\",\n  \"seed\": \"" << (seed && *seed ? seed : "default")
     << "\",\n  \"level\": \"" << (std::getenv("FA_TEST_LEVEL") ? std::getenv("FA_TEST_LEVEL") : "basic") << "\",\n  \"lessons\": [";
  bool first = true;
  for (const auto& [label, l] : lessons) {
    const double perf = l.perf_score();
    total += l.score() + perf;
    max_total += l.points + (perf_student.empty() ? 0 : l.perf_points);
    std::printf("%-10s %-22s %7d %7d %8d", label.c_str(), l.status().c_str(), l.passed, l.failed, l.skipped);
    if (!progress) {
      std::printf(" %5.1f/%-4.0f", l.score(), l.points);
      if (perf_student.empty() || l.perf_points == 0) std::printf(" %14s", "-");
      else if (l.perf_ratio < 0) std::printf("   0.0/%-3.0f (%s)", l.perf_points, l.perf_note.empty() ? "not measured" : l.perf_note.c_str());
      else std::printf(" %5.1f/%-3.0f %.2fx", perf, l.perf_points, l.perf_ratio);
    }
    std::printf("\n");
    js << (first ? "\n" : ",\n") << "    {\"lesson\": \"" << label << "\", \"status\": \"" << l.status() << "\", \"passed\": " << l.passed
       << ", \"failed\": " << l.failed << ", \"skipped\": " << l.skipped << ", \"score\": " << l.score()
       << ", \"points\": " << l.points << ", \"perf_score\": " << perf << ", \"perf_points\": " << l.perf_points
       << ", \"perf_ratio\": " << l.perf_ratio << "}";
    first = false;
  }
  js << "\n  ],\n  \"total\": " << total << ",\n  \"max\": " << max_total << "\n}\n";
  std::ofstream(fs::path(out_dir) / "summary.json") << js.str();
  if (!progress)
    std::printf("\ntotal %.1f / %.0f (%.0f%%)   JUnit: %s   summary: %s\n", total, max_total,
                max_total > 0 ? 100.0 * total / max_total : 0.0, junit.c_str(),
                (fs::path(out_dir) / "summary.json").string().c_str());
  return 0;
}
