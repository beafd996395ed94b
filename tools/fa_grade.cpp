// fa-grade: runs a build's tests and turns them into a per-lesson score (tools/grade.sh runs it).
//
//   fa-grade --build DIR [--points DIR/grading.txt] [--out DIR] [--instructor DIR] [--jobs N]
//            [--timeout S] [--labels lesson00,lesson04] [--lessons DIR] [--perf STUDENT.csv SOLUTION.csv]
//   fa-grade --build DIR --progress [--lessons DIR] [--not-built L,...] [--points FILE] [--out DIR]
//   fa-grade --points DIR/grading.txt --points-table      (the README's table of points)
//   fa-grade --points DIR/grading.txt --check-manifest DIR/manifest.txt
//
// The points file is a build's grading.txt: tests/grading.txt's rules and features, and each
// lesson's points from its fa_add_lesson line (cmake/FaLesson.cmake, fa_write_grading).
//
// It runs ctest once over the build (one test per core, or --jobs), printing each lesson as its
// last test ends and a line a minute while tests run, and reads ctest's JUnit file.
//
// Trust: a test passes only when its process printed the grader's signed result line
// (tests/grading_mac.hpp) saying its doctest test case ran and failed nothing. fa-grade draws a
// fresh key for every run and passes it in FA_GRADE_KEY; an exit code, doctest's own summary or a
// forged line without the key counts for nothing. A skip counts only when signed too (no GPU).
//
// Scores (the rules are written out in tests/grading.txt): a lesson's tests are grouped into
// features (the shared suites' tests by name, the lesson's own tests as one more); a feature scores
// only when every one of its tests passed; a part (the lesson's kernel, its CPU model) scores
// nothing unless its core features passed, and the lesson's own tests nothing unless some part's
// core passed. Points = lesson points x (weight of the features scored / weight of all its
// features). Features whose tests did not run (GPU tests without a GPU) are reported as such: the
// lesson is graded on its CPU parts only and says what share of it they are. Gates earn nothing but
// zero the lesson: it does not build, its tests differ from the manifest, it calls the reference,
// or it fails the checks of the code a skeleton is given (declared features, bad input rejected).
// A lesson with no test passed and every failure "not implemented yet" is "not started", and so is
// one whose files in the student's folder (--lessons) are as the course gave them.
// --perf adds performance points from two fa-bench CSVs of the same GPU, only for a lesson whose
// correctness tests all ran and passed.
//
// Reports: --out gets what students may see (summary.json, junit.xml: one suite per lesson, each
// failure with its first failing check); the secret seed (FA_TEST_SEED) and the key are removed
// from them. --instructor (default: <out>-instructor) gets ctest's own log and JUnit file and
// seed.txt (the seed and how to reproduce a failure).
//
// --progress prints the same run as a student's progress, without points; with --lessons DIR (the
// student's folder) and --not-built LABELS (tools/progress.sh), one status per lesson: not started
// (its files untouched since generated), does not compile, TODOs left, failing (n of m), CPU parts
// passing (GPU not run), passing.
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../tests/grading_mac.hpp"
#include "skeleton.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kPublicSeed = "20261121";  // runtime/random.cpp's default

// A feature of tests/grading.txt: a group of test cases scored all or nothing.
struct FeatureDef {
  std::string name;
  bool core = false;
  double weight = 1;
  std::set<std::string> only;  // lessons=NN,...: elsewhere its tests belong to the core
  std::vector<std::string> tests;
};
constexpr const char* kOwnTests = "own-tests";

// One test of the run, as the grader judges it.
struct Test {
  std::string name, label, part, kase, feature;
  std::string verdict;  // pass, fail, skip
  std::string message;  // a failure's first failing check, or why it counts as failed
  bool gate = false, not_implemented = false, unsigned_result = false;
  double seconds = 0;
};

// Where a feature of one lesson stands: all its tests passed, one failed, or some did not run.
struct FeatureState {
  std::string part, name;
  bool core = false;
  double weight = 1;
  int passed = 0, failed = 0, skipped = 0;
  std::string state() const { return failed ? "failed" : skipped ? "not run" : "passed"; }
  bool counted = false;
  std::string why;  // why a passing feature does not count
};

struct Lesson {
  double points = 0, perf_points = 0;
  int passed = 0, failed = 0, skipped = 0, not_implemented = 0, unsigned_results = 0;
  std::string broken;  // a gate failed: the lesson did not build, its tests vanished, or it calls the reference
  std::string arch_skip;  // the build skipped the lesson (it needs another GPU architecture)
  std::map<std::string, FeatureState> features;  // "part/feature"
  double earned_weight = 0, total_weight = 0, ran_weight = 0;
  std::string core_note;  // which core failed, when one did
  double perf_ratio = -1;  // student / solution time, geometric mean; -1: not measured
  std::string perf_note;

  double score() const {
    if (!broken.empty() || total_weight == 0) return 0.0;
    return points * earned_weight / total_weight;
  }
  // The share of the lesson this run could grade: all of it when it is broken or not started (0
  // points whatever a GPU would say), else the weight of the features whose tests ran.
  double share_ran() const {
    if (!broken.empty() || not_started()) return 1.0;
    return total_weight > 0 ? ran_weight / total_weight : 0.0;
  }
  bool all_correct() const {
    return broken.empty() && failed == 0 && skipped == 0 && passed > 0 && earned_weight == total_weight && total_weight > 0;
  }
  double perf_score() const {
    if (perf_ratio < 0 || !all_correct()) return 0;
    return perf_points * std::clamp((2.0 - perf_ratio) / (2.0 - 1.2), 0.0, 1.0);
  }
  // No test passed and every failure says "not implemented yet", or (--lessons) its files are as
  // the course gave them and nothing passed (a GPU lesson graded without a GPU).
  bool not_started() const {
    return broken.empty() && passed == 0 && ((failed > 0 && not_implemented == failed) || untouched);
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
    if (!arch_skip.empty()) return "not run: " + arch_skip;
    if (passed + failed + skipped == 0) return "no tests";
    if (not_started()) return "not started";
    if (passed + failed == 0) return "not run: needs a GPU";
    char share[64];
    std::snprintf(share, sizeof share, "CPU parts only (%.0f%%)", 100.0 * share_ran());
    if (ran_weight < total_weight) return failed ? std::string(share) + ", failing" : share;
    if (failed || earned_weight < total_weight) return "failing";
    return "passing";
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
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (c == '\n') { o += "\\n"; continue; }
    if (c == '\t') { o += "\\t"; continue; }
    if (c < 0x20) continue;
    o += static_cast<char>(c);
  }
  return o;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t') continue;  // not allowed in XML 1.0
        o += static_cast<char>(c);
    }
  }
  return o;
}

std::string xml_unescape(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') { o += s[i]; continue; }
    const size_t semi = s.find(';', i);
    if (semi == std::string::npos) { o += s[i]; continue; }
    const std::string ent = s.substr(i + 1, semi - i - 1);
    if (ent == "amp") o += '&';
    else if (ent == "lt") o += '<';
    else if (ent == "gt") o += '>';
    else if (ent == "quot") o += '"';
    else if (ent == "apos") o += '\'';
    else if (!ent.empty() && ent[0] == '#') o += static_cast<char>(std::strtol(ent.c_str() + 1 + (ent[1] == 'x'), nullptr, ent[1] == 'x' ? 16 : 10));
    else { o += s.substr(i, semi - i + 1); }
    i = semi;
  }
  return o;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Every whole-word occurrence of each secret (a run of digits or hex not part of a longer one)
// becomes "(secret)".
std::string scrub(std::string s, const std::vector<std::string>& secrets) {
  for (const std::string& x : secrets) {
    if (x.empty()) continue;
    for (size_t at = s.find(x); at != std::string::npos; at = s.find(x, at)) {
      auto word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
      const bool left = at > 0 && word(s[at - 1]), right = at + x.size() < s.size() && word(s[at + x.size()]);
      if (left || right) { at += x.size(); continue; }
      s.replace(at, x.size(), "(secret)");
      at += 8;  // strlen("(secret)")
    }
  }
  return s;
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

struct Points {
  std::map<std::string, Lesson> lessons;
  std::vector<FeatureDef> features;
};

Points read_points(const std::string& file) {
  Points pts;
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (trim(line).empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string first;
    ls >> first;
    if (first == "feature") {
      // feature <name> [core] [weight=W] [lessons=NN,NN] | <test case> | <test case> ...
      const size_t bar = line.find('|');
      std::istringstream head(line.substr(0, bar));
      FeatureDef f;
      head >> first >> f.name;
      for (std::string w; head >> w;) {
        if (w == "core") f.core = true;
        else if (w.rfind("weight=", 0) == 0) f.weight = std::atof(w.c_str() + 7);
        else if (w.rfind("lessons=", 0) == 0) {
          std::stringstream ss(w.substr(8));
          for (std::string nn; std::getline(ss, nn, ',');) f.only.insert("lesson" + nn);
        } else throw std::runtime_error(file + ":" + std::to_string(n) + ": unknown word '" + w + "' in a feature line");
      }
      if (bar != std::string::npos) {
        std::stringstream ss(line.substr(bar + 1));
        for (std::string t; std::getline(ss, t, '|');)
          if (!trim(t).empty()) f.tests.push_back(trim(t));
      }
      if (f.name.empty() || f.weight <= 0) throw std::runtime_error(file + ":" + std::to_string(n) + ": a feature needs a name and a weight > 0");
      pts.features.push_back(f);
      continue;
    }
    Lesson l;
    if (!(ls >> l.points >> l.perf_points)) throw std::runtime_error(file + ":" + std::to_string(n) + ": expected '<label> <points> <perf points>'");
    pts.lessons[first] = l;
  }
  return pts;
}

// The feature a test case belongs to in a lesson, with its definition (nullptr for own-tests).
const FeatureDef* feature_of(const Points& pts, const std::string& label, const std::string& kase) {
  const FeatureDef* core = nullptr;
  for (const FeatureDef& f : pts.features)
    if (f.core && f.only.empty()) { core = &f; break; }
  for (const FeatureDef& f : pts.features)
    if (std::find(f.tests.begin(), f.tests.end(), kase) != f.tests.end())
      return f.only.empty() || f.only.count(label) ? &f : core;  // a restricted feature's tests join the core elsewhere
  return nullptr;
}

double elapsed_s(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
std::string clock_str(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%d:%02d", int(s) / 60, int(s) % 60);
  return b;
}

// The label a test belongs to: "lessonNN" from "lessonNN/...", "lessonNN.model/manifest" or
// "test_lessonNN_..._NOT_BUILT".
std::string label_of(const std::string& name) {
  static const std::regex label_re("^(lesson[0-9][0-9])[/.]");
  static const std::regex not_built_re("^test_(lesson[0-9][0-9])_.*NOT_BUILT");
  std::smatch m;
  if (std::regex_search(name, m, label_re) || std::regex_search(name, m, not_built_re)) return m[1];
  return "";
}

std::string random_key() {
  std::random_device rd;
  std::string k;
  const char* hex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    const unsigned v = rd() & 0xff;
    k += hex[v >> 4];
    k += hex[v & 15];
  }
  return k;
}

// The first failing check of a doctest report: from its first "ERROR: " line ("file:line: ERROR:
// ..." or "FATAL ERROR: ...") to the next report, at most 60 lines.
std::string first_failure(const std::string& out) {
  std::istringstream in(out);
  std::string msg;
  bool on = false;
  int lines = 0;
  for (std::string line; std::getline(in, line);) {
    const size_t e = line.find("ERROR: ");
    const bool error_line = e != std::string::npos && line.find(": ") < e;
    if (!on) {
      if (!error_line) continue;
      on = true;
      msg = line.substr(e + 7);
      continue;
    }
    if (error_line || line.rfind("===", 0) == 0 || line.rfind("[doctest]", 0) == 0 || line.rfind("... and ", 0) == 0 ||
        line.rfind("FA_GRADE_RESULT", 0) == 0)
      break;
    if (++lines > 60) { msg += "\n  ..."; break; }
    msg += "\n" + line;
  }
  return trim(msg);
}

// The last few non-empty lines of an output (what a test that ended badly said last).
std::string last_lines(const std::string& out, int n) {
  std::vector<std::string> keep;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!trim(line).empty()) keep.push_back(line.substr(0, 300));
  std::string s;
  for (size_t i = keep.size() > size_t(n) ? keep.size() - n : 0; i < keep.size(); ++i) s += "\n  " + keep[i];
  return s;
}

// A failure in one line, for the JUnit message: its first line (the case), the first line that
// says what is wrong (a MISMATCH, an error) and the first hint.
std::string headline(const std::string& msg) {
  std::istringstream in(msg);
  std::string first, what, hint;
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty()) continue;
    if (first.empty()) first = line;
    else if (what.empty() && line.find("within tolerance") == std::string::npos) what = line;
    if (hint.empty() && line.rfind("hint [", 0) == 0) hint = line;
  }
  std::string h = first;
  if (!what.empty()) h += " | " + what.substr(0, 300);
  if (!hint.empty() && hint != what) h += " | " + hint.substr(0, 300);
  return h;
}

// ctest's JUnit file: each <testcase name=".." time=".." status=".."> with its <system-out>.
struct RawCase {
  std::string name, status, output;
  double seconds = 0;
};
std::vector<RawCase> read_ctest_junit(const std::string& xml) {
  std::vector<RawCase> out;
  auto attr = [](const std::string& tag, const std::string& a) {
    const size_t at = tag.find(" " + a + "=\"");
    if (at == std::string::npos) return std::string();
    const size_t from = at + a.size() + 3, to = tag.find('"', from);
    return xml_unescape(tag.substr(from, to - from));
  };
  for (size_t at = xml.find("<testcase "); at != std::string::npos; at = xml.find("<testcase ", at + 1)) {
    const size_t tag_end = xml.find('>', at);
    if (tag_end == std::string::npos) break;
    const std::string tag = xml.substr(at, tag_end - at);
    RawCase c;
    c.name = attr(tag, "name");
    c.status = attr(tag, "status");
    c.seconds = std::atof(attr(tag, "time").c_str());
    if (tag.back() != '/') {
      const size_t end = xml.find("</testcase>", tag_end);
      const std::string body = xml.substr(tag_end + 1, (end == std::string::npos ? xml.size() : end) - tag_end - 1);
      const size_t o = body.find("<system-out>"), oe = body.rfind("</system-out>");
      if (o != std::string::npos && oe != std::string::npos && oe > o) c.output = xml_unescape(body.substr(o + 12, oe - o - 12));
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string build, points_file, out_dir = ".", instructor_dir, perf_student, perf_solution, lessons_dir, not_built, only_labels,
      check_manifest;
  bool progress = false, points_table = false;
  int timeout = 600;
  int jobs = static_cast<int>(std::thread::hardware_concurrency());
  if (jobs < 1) jobs = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { std::cerr << a << " needs a value\n"; std::exit(2); }
      return argv[++i];
    };
    if (a == "--build") build = next();
    else if (a == "--points") points_file = next();
    else if (a == "--out") out_dir = next();
    else if (a == "--instructor") instructor_dir = next();
    else if (a == "--progress") progress = true;
    else if (a == "--lessons") lessons_dir = next();
    else if (a == "--not-built") not_built = next();
    else if (a == "--labels") only_labels = next();
    else if (a == "--timeout") timeout = std::stoi(next());
    else if (a == "--jobs" || a == "-j") jobs = std::max(1, std::stoi(next()));
    else if (a == "--perf") { perf_student = next(); perf_solution = next(); }
    else if (a == "--points-table") points_table = true;
    else if (a == "--check-manifest") check_manifest = next();
    else { std::cerr << "unknown option " << a << " (see the header of tools/fa_grade.cpp)\n"; return 2; }
  }

  Points pts;
  try {
    if (!points_file.empty()) pts = read_points(points_file);
  } catch (const std::exception& e) {
    std::cerr << "fa-grade: " << e.what() << "\n";
    return 2;
  }
  std::map<std::string, Lesson>& lessons = pts.lessons;  // every lesson in the points file appears, tested or not

  if (points_table) {  // the README's table (README.md, "For instructors"), generated from the points file
    double sum = 0, perf_sum = 0;
    std::string head = "| lesson |", rule = "|---|", pts_row = "| correctness |", perf_row = "| performance (`--perf`) |";
    for (const auto& [label, l] : lessons) {
      char p[32], q[32];
      std::snprintf(p, sizeof p, " %g |", l.points);
      std::snprintf(q, sizeof q, " %s |", l.perf_points > 0 ? std::to_string(int(l.perf_points)).c_str() : "-");
      head += " " + label.substr(6) + " |";
      rule += "--:|";
      pts_row += p;
      perf_row += q;
      sum += l.points;
      perf_sum += l.perf_points;
    }
    char p[32], q[64];
    std::snprintf(p, sizeof p, " %g |", sum);
    std::snprintf(q, sizeof q, " %g (%g in all) |", perf_sum, sum + perf_sum);
    std::printf("%s all |\n%s--:|\n%s%s\n%s%s\n", head.c_str(), rule.c_str(), pts_row.c_str(), p, perf_row.c_str(), q);
    return 0;
  }
  if (!check_manifest.empty()) {  // every shared-suite test of the manifest has a feature in the points file
    std::ifstream in(check_manifest);
    if (!in) { std::cerr << "cannot read " << check_manifest << "\n"; return 2; }
    const std::set<std::string> gates = {"forward: declares the required features", "forward: bad input rejected before launch",
                                         "backward: declares the required features", "backward: bad input rejected before launch"};
    int missing = 0, suite_tests = 0;
    for (std::string line; std::getline(in, line);) {
      static const std::regex tiles_line("^lesson[0-9][0-9]\\.tiles *\\|.*");
      if (line.rfind("@forward-suite |", 0) != 0 && line.rfind("@backward-suite |", 0) != 0 && !std::regex_match(line, tiles_line))
        continue;
      const std::string kase = trim(line.substr(line.find('|') + 1));
      ++suite_tests;
      if (gates.count(kase)) continue;
      bool found = false;
      for (const FeatureDef& f : pts.features) found = found || std::count(f.tests.begin(), f.tests.end(), kase) > 0;
      if (!found) { std::printf("not in any feature of %s: %s\n", points_file.c_str(), kase.c_str()); ++missing; }
    }
    if (suite_tests == 0) { std::printf("no shared-suite tests found in %s\n", check_manifest.c_str()); return 1; }
    std::printf("%d shared-suite and tile-count tests, %d without a feature\n", suite_tests, missing);
    return missing ? 1 : 0;
  }

  if (build.empty()) { std::cerr << "usage: fa-grade --build DIR [--points FILE] [--out DIR] [--progress] [--perf S.csv R.csv] (see tools/fa_grade.cpp)\n"; return 2; }
  fs::create_directories(out_dir);
  if (instructor_dir.empty()) instructor_dir = progress ? out_dir : fs::path(out_dir).lexically_normal().string() + "-instructor";
  fs::create_directories(instructor_dir);
  const std::string raw_junit = fs::absolute(fs::path(instructor_dir) / (progress ? "junit.xml" : "ctest-junit.xml")).string();
  const std::string junit = fs::absolute(fs::path(out_dir) / "junit.xml").string();
  const std::string ctest_log = (fs::path(instructor_dir) / "ctest.log").string();
  fs::remove(raw_junit);

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
      if (progress && l.untouched && !l.not_built) skip += "|" + label;
    }
  }
  // --labels: grade only these lessons (the table too).
  std::string select;
  if (!only_labels.empty()) {
    std::set<std::string> keep;
    std::stringstream ss(only_labels);
    for (std::string label; std::getline(ss, label, ',');)
      if (!label.empty()) keep.insert(label.rfind("lesson", 0) == 0 ? label : "lesson" + label);
    std::string alt;
    for (const std::string& l : keep) alt += (alt.empty() ? "" : "|") + l;
    select = " -R \"^(" + alt + ")[/.]|^test_(" + alt + ")_\"";
    for (auto it = lessons.begin(); it != lessons.end();) it = keep.count(it->first) ? std::next(it) : lessons.erase(it);
  }
  const std::string filter = " -E \"^(" + skip + ")/\"" + select;

  // The tests this run will start, by number: for the progress lines.
  std::map<int, std::string> listed;
  std::map<std::string, int> per_label_total;
  {
    const std::string list_cmd = "ctest --test-dir \"" + build + "\" -N" + filter + " 2>/dev/null";
    FILE* p = popen(list_cmd.c_str(), "r");
    static const std::regex item("^ *Test +#([0-9]+): (.*)$");
    char buf[4096];
    while (p && std::fgets(buf, sizeof buf, p)) {
      std::string line = buf;
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      std::smatch m;
      if (std::regex_match(line, m, item)) {
        listed[std::stoi(m[1])] = m[2];
        ++per_label_total[label_of(m[2])];
      }
    }
    if (p) pclose(p);
  }

  // One ctest run over everything the build has; the per-test timeout keeps a hanging kernel from
  // stopping the grading (it fails its own test). Each test's output is kept whole in the JUnit
  // file (the signed result line is its last line).
  const std::string key_hex = random_key();
  uint8_t key[16];
  fa::grading::parse_key(key_hex, key);
  setenv(fa::grading::kKeyEnv, key_hex.c_str(), 1);
  // The grade is of the lessons as they run by default (their tests run every variant anyway): a
  // FA_TEST_VARIANT left in the environment would move the suites onto one variant.
  unsetenv("FA_TEST_VARIANT");
  const std::string cmd = "ctest --test-dir \"" + build + "\" --timeout " + std::to_string(timeout) + " -j " + std::to_string(jobs) +
                          " --test-output-size-passed 1048576 --test-output-size-failed 1048576 --test-output-truncation middle" +
                          " --output-junit \"" + raw_junit + "\"" + filter + " 2>&1";
  std::cout << "running the tests of " << build << " (log: " << ctest_log << ")";
  if (!progress) std::cout << ": " << listed.size() << " tests, " << jobs << " at a time";
  std::cout << "\n" << std::flush;
  {
    const auto t0 = std::chrono::steady_clock::now();
    std::ofstream log(ctest_log);
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) { std::cerr << "cannot run ctest\n"; return 1; }
    static const std::regex done_re("^ *[0-9]+/[0-9]+ Test +#([0-9]+): .*");
    std::map<std::string, int> done_per_label, passed_per_label, skipped_per_label;
    int done = 0, lessons_done = 0;
    const size_t lessons_total = per_label_total.size() - per_label_total.count("");
    double last_print = 0;
    std::string pending;
    const int fd = fileno(p);
    for (;;) {
      pollfd pfd{fd, POLLIN, 0};
      const int r = poll(&pfd, 1, 1000);
      if (r > 0) {
        char buf[4096];
        const ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0) break;
        pending.append(buf, static_cast<size_t>(n));
        for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
          const std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          log << line << "\n";
          std::smatch m;
          if (!std::regex_match(line, m, done_re)) continue;
          ++done;
          const auto it = listed.find(std::stoi(m[1]));
          if (it == listed.end()) continue;
          const std::string label = label_of(it->second);
          if (line.find(" Passed ") != std::string::npos) ++passed_per_label[label];
          else if (line.find("Skipped") != std::string::npos || line.find("Not Run") != std::string::npos) ++skipped_per_label[label];
          if (!progress && !label.empty() && ++done_per_label[label] == per_label_total[label]) {
            const int total_l = per_label_total[label], ok = passed_per_label[label], sk = skipped_per_label[label];
            std::printf("  [%s] %s: its %d tests ran (ctest: %d passed, %d skipped, %d failed); %d of %zu lessons done\n",
                        clock_str(elapsed_s(t0)).c_str(), label.c_str(), total_l, ok, sk, total_l - ok - sk, ++lessons_done,
                        lessons_total);
            std::fflush(stdout);
            last_print = elapsed_s(t0);
          }
        }
      } else if (r < 0) {
        break;
      }
      if (!progress && elapsed_s(t0) - last_print >= 60) {
        std::string running;
        for (const auto& [label, total] : per_label_total)
          if (!label.empty() && done_per_label[label] < total) running += (running.empty() ? "" : ", ") + label.substr(6);
        std::printf("  [%s] %d of %zu tests done; lessons not finished: %s\n", clock_str(elapsed_s(t0)).c_str(), done, listed.size(),
                    running.empty() ? "-" : running.c_str());
        std::fflush(stdout);
        last_print = elapsed_s(t0);
      }
    }
    pclose(p);  // its exit code says some test failed: that is what we are here to count
    if (!progress) std::printf("  [%s] all tests done\n", clock_str(elapsed_s(t0)).c_str());
  }
  unsetenv(fa::grading::kKeyEnv);

  const std::string xml = slurp(raw_junit);
  if (xml.empty()) { std::cerr << "no JUnit output from ctest: did the build configure?\n"; return 1; }
  std::vector<Test> tests;
  for (const RawCase& rc : read_ctest_junit(xml)) {
    Test t;
    t.name = rc.name;
    t.seconds = rc.seconds;
    const std::string& status = rc.status;
    const std::string& output = rc.output;
    t.label = label_of(t.name);
    if (t.label.empty()) continue;
    // Gates, not points: the lesson must build, register its tests and not call the reference.
    // So are the two checks of the code a skeleton is given (the features it declares, the bad input
    // it rejects before launching): failing them breaks the lesson, passing them earns nothing.
    auto ends_with = [&](const std::string& tail) {
      return t.name.size() >= tail.size() && t.name.compare(t.name.size() - tail.size(), tail.size(), tail) == 0;
    };
    const bool not_built_test = t.name.find("NOT_BUILT") != std::string::npos;
    const bool script = not_built_test || ends_with("/manifest") || ends_with("/links_without_reference") ||
                        ends_with("/missing") || ends_with("/skipped_architecture");
    // A missing folder or a lesson the build skipped counts as a test (as the progress table
    // always did); only the grade also breaks the lesson for a missing folder.
    t.gate = (script && !ends_with("/missing") && !ends_with("/skipped_architecture")) || ends_with("forward: declares the required features") || ends_with("forward: bad input rejected before launch") ||
             ends_with("backward: declares the required features") || ends_with("backward: bad input rejected before launch");
    // The test's part and case: lessonNN/model/<case> (the CPU model), lessonNN/lessonNN: ... (its
    // own tests), lessonNN/<suite case> (the lesson itself); lessonNN/tiles/<case> (the tiles the
    // lesson's kernel visits) belongs to the kernel.
    std::string rest = t.name.substr(std::min(t.name.size(), t.label.size() + 1));
    t.part = "kernel";
    if (rest.rfind("model/", 0) == 0) { t.part = "model"; rest = rest.substr(6); }
    else if (rest.rfind("tiles/", 0) == 0) rest = rest.substr(6);
    else if (rest.rfind(t.label + ": ", 0) == 0) t.part = "own";
    t.kase = rest;
    if (script) {
      // Run by CMake scripts and sh, not by the student's code: their exit status is the verdict.
      if (not_built_test) { t.verdict = "fail"; t.message = "does not compile"; }
      else if (ends_with("/skipped_architecture")) { t.verdict = "skip"; t.message = trim(output); }
      else if (status == "run") t.verdict = "pass";
      else { t.verdict = "fail"; t.message = trim(output).substr(0, 2000); }
    } else {
      // The student's code ran in this process: only the signed result line counts.
      std::vector<std::string> results;
      std::istringstream in(output);
      for (std::string line; std::getline(in, line);)
        if (line.rfind("FA_GRADE_RESULT", 0) == 0) results.push_back(trim(line));
      bool signed_ok = false, skip_ok = false, clean = false;
      std::string why;
      if (results.size() != 1) {
        why = results.empty() ? "the test ended without the grader's result line (it crashed, timed out, or exited before its checks finished)"
                              : "the test printed more than one result line (a forged one among them)";
      } else {
        const std::string& line = results[0];
        const std::string tag = fa::grading::kResultTag;
        const size_t mac_at = line.find(" mac="), case_at = line.find(" case=");
        if (line.rfind(tag, 0) != 0 || mac_at == std::string::npos || case_at == std::string::npos || case_at < mac_at) {
          why = "the result line is malformed (forged)";
        } else {
          const std::string fields = line.substr(tag.size(), mac_at - tag.size());
          const std::string mac = line.substr(mac_at + 5, case_at - mac_at - 5);
          const std::string name = line.substr(case_at + 6);
          if (fa::grading::mac_hex(key, fields + " case=" + name) != mac) why = "the result line's signature is wrong (forged)";
          else if (name != t.kase) why = "the result line is for another test case (" + name + ")";
          else if (fields == "skipped=no-gpu") skip_ok = true;
          else {
            signed_ok = true;
            clean = fields.find("run=1 failed=0 ") == 0 && fields.find(" asserts_failed=0 ") != std::string::npos &&
                    fields.size() >= 7 && fields.compare(fields.size() - 7, 7, " exit=0") == 0;
          }
        }
      }
      if (skip_ok && status != "run") t.verdict = "skip";
      else if (signed_ok && clean && status == "run") t.verdict = "pass";
      else {
        t.verdict = "fail";
        t.unsigned_result = !signed_ok && !skip_ok;
        const std::string first = first_failure(output);
        if (t.unsigned_result) t.message = why + (output.empty() ? "" : "; its output ended with:" + last_lines(output, 4));
        else if (!first.empty()) t.message = first;
        else if (skip_ok) t.message = "signed as skipped (no GPU), yet its process exited 0";
        else if (status == "run") t.message = "its process reported failure after its checks passed (exit code or counts)";
        else t.message = "failed (" + status + ")";
        if (t.unsigned_result && !first.empty()) t.message += "\nits first failing check: " + first;
      }
      t.not_implemented = t.verdict == "fail" && output.find("not implemented yet") != std::string::npos;
    }
    tests.push_back(t);
  }

  // Per lesson: counts, gates, features.
  for (Test& t : tests) {
    Lesson& l = lessons[t.label];
    if (t.gate) {
      if (t.verdict == "fail" && l.broken.empty()) {
        if (t.name.find("NOT_BUILT") != std::string::npos) l.broken = "does not compile";  // ctest cannot even start it
        else l.broken = t.name.substr(t.name.find('/') + 1) + (t.unsigned_result ? " gave no signed result" : " failed");
      }
      if (t.unsigned_result) ++l.unsigned_results;
      continue;
    }
    if (t.verdict == "pass") ++l.passed;
    else if (t.verdict == "skip") ++l.skipped;
    else {
      ++l.failed;
      if (t.not_implemented) ++l.not_implemented;
      if (t.unsigned_result) ++l.unsigned_results;
    }
    if (t.kase == "missing") {
      if (!progress && l.broken.empty()) l.broken = "its folder is missing";
      continue;
    }
    if (t.kase == "skipped_architecture") {
      l.arch_skip = "the build skipped it (it needs another GPU architecture)";
      continue;
    }
    const FeatureDef* f = feature_of(pts, t.label, t.kase);
    const std::string fname = f ? f->name : kOwnTests;
    const std::string part = t.part == "own" ? "own" : t.part;
    t.feature = (part == "own" ? "" : part + ": ") + fname;
    FeatureState& fs = l.features[part + "/" + fname];
    fs.part = part;
    fs.name = fname;
    fs.core = f && f->core;
    fs.weight = f ? f->weight : 1;
    if (t.verdict == "pass") ++fs.passed;
    else if (t.verdict == "skip") ++fs.skipped;
    else ++fs.failed;
  }
  for (auto& [label, l] : lessons) {
    std::map<std::string, bool> core_ok;  // part -> every core feature of it passed
    for (auto& [k, f] : l.features) {
      if (!core_ok.count(f.part)) core_ok[f.part] = true;
      if (f.core && f.state() != "passed") {
        core_ok[f.part] = false;
        if (f.state() == "failed") l.core_note += (l.core_note.empty() ? "" : "; ") + (f.part == "own" ? "" : f.part + " ") + f.name + " failed";
      }
    }
    const bool some_suite_core = (core_ok.count("kernel") && core_ok["kernel"]) || (core_ok.count("model") && core_ok["model"]);
    const bool own_core = !core_ok.count("own") || core_ok["own"];  // lesson 09's RoPE: the lesson's point
    for (auto& [k, f] : l.features) {
      l.total_weight += f.weight;
      if (f.state() != "not run") l.ran_weight += f.weight;
      if (f.state() != "passed") continue;
      if (!core_ok[f.part]) f.why = "its part's core failed or did not run";
      else if (!own_core) f.why = "a core feature of the lesson's own tests failed or did not run";
      else if (f.part == "own" && !some_suite_core) f.why = "no core of the lesson passed";
      else {
        f.counted = true;
        l.earned_weight += f.weight;
      }
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
        for (const auto& [key_, ref] : cases) {
          if (!ref.second) continue;
          if (sit == student.end() || !sit->second.count(key_) || !sit->second.at(key_).second) {
            wrong = true;
            continue;
          }
          log_sum += std::log(sit->second.at(key_).first / ref.first);
          ++n;
        }
        if (wrong) { l.perf_ratio = -1; l.perf_note = "a benchmark case is missing or failed validation"; }
        else if (n) l.perf_ratio = std::exp(log_sum / n);
      }
      // Performance only for a lesson whose correctness is complete.
      if (l.perf_points == 0) continue;
      if (l.not_started()) l.perf_note = "not started";
      else if (!l.broken.empty()) l.perf_note = "broken";
      else if (l.failed) l.perf_note = "needs every correctness test passing";
      else if (l.skipped || l.passed == 0) l.perf_note = "needs its GPU tests run and passing";
      else if (!l.all_correct()) l.perf_note = "needs every correctness test passing";
    }
  }

  if (progress) {  // one line per lesson, and what to do next
    std::printf("\n%-10s %s\n", "lesson", "status");
    for (const auto& [label, l] : lessons) std::printf("%-10s %s\n", label.c_str(), l.progress().c_str());
    std::printf("\nbuild and test one lesson: cmake --build --preset student --target check-lessonNN\n");
    return 0;
  }

  // The secrets never reach the students' reports.
  const char* seed_env = std::getenv("FA_TEST_SEED");
  const std::string seed = seed_env ? seed_env : "";
  const bool secret_seed = !seed.empty() && seed != kPublicSeed;
  std::vector<std::string> secrets = {key_hex};
  if (secret_seed) {
    secrets.push_back(seed);
    secrets.push_back(std::to_string(std::strtoull(seed.c_str(), nullptr, 0)));
  }
  const char* level_env = std::getenv("FA_TEST_LEVEL");
  const std::string level = level_env && *level_env ? level_env : "basic";

  double total = 0, max_total = 0, max_graded = 0;
  std::printf("\n%-10s %-30s %8s %6s %6s %7s %10s  %s\n", "lesson", "status", "features", "passed", "failed", "skipped", "score",
              "performance");
  std::ostringstream js;
  js << "{\n  \"seed\": \"" << (secret_seed ? "secret" : "public") << "\",\n  \"level\": \"" << json_escape(level)
     << "\",\n  \"lessons\": [";
  bool first = true;
  for (const auto& [label, l] : lessons) {
    const double perf = l.perf_score();
    total += l.score() + perf;
    max_total += l.points + (perf_student.empty() ? 0 : l.perf_points);
    max_graded += l.points * l.share_ran() + (perf_student.empty() ? 0 : l.perf_points);
    int features_counted = 0;
    for (const auto& [k, f] : l.features) features_counted += f.counted;
    char feat[32];
    std::snprintf(feat, sizeof feat, "%d/%zu", features_counted, l.features.size());
    std::printf("%-10s %-30s %8s %6d %6d %7d %5.1f/%-4.0f", label.c_str(), l.status().c_str(), feat, l.passed, l.failed, l.skipped,
                l.score(), l.points);
    if (perf_student.empty() || l.perf_points == 0) std::printf("  -");
    else if (l.perf_score() == 0 && (l.perf_ratio < 0 || !l.all_correct()))
      std::printf("  0.0/%-3.0f (%s)", l.perf_points, l.perf_note.empty() ? "not measured" : l.perf_note.c_str());
    else std::printf("  %4.1f/%-3.0f %.2fx", perf, l.perf_points, l.perf_ratio);
    std::printf("\n");
    if (l.unsigned_results)
      std::printf("           %d test(s) ended without the grader's signed result line: crashed, timed out, exited early or forged\n",
                  l.unsigned_results);
    if (!l.core_note.empty() && l.broken.empty() && !l.not_started())
      std::printf("           0 for the features of a part whose core failed: %s\n", l.core_note.c_str());
    js << (first ? "\n" : ",\n") << "    {\"lesson\": \"" << label << "\", \"status\": \"" << json_escape(l.status())
       << "\", \"passed\": " << l.passed << ", \"failed\": " << l.failed << ", \"skipped\": " << l.skipped
       << ", \"score\": " << l.score() << ", \"points\": " << l.points << ", \"graded_share\": " << l.share_ran()
       << ", \"perf_score\": " << perf << ", \"perf_points\": " << l.perf_points << ", \"perf_ratio\": " << l.perf_ratio
       << ", \"perf_note\": \"" << json_escape(l.perf_note) << "\", \"unsigned_results\": " << l.unsigned_results << ", \"features\": [";
    bool ff = true;
    for (const auto& [k, f] : l.features) {
      js << (ff ? "" : ", ") << "{\"part\": \"" << f.part << "\", \"feature\": \"" << json_escape(f.name) << "\", \"core\": " << (f.core ? "true" : "false")
         << ", \"state\": \"" << f.state() << "\", \"counted\": " << (f.counted ? "true" : "false") << ", \"weight\": " << f.weight
         << ", \"tests\": " << f.passed + f.failed + f.skipped << ", \"tests_passed\": " << f.passed << "}";
      ff = false;
    }
    js << "]}";
    first = false;
  }
  js << "\n  ],\n  \"total\": " << total << ",\n  \"max\": " << max_total << ",\n  \"max_graded_here\": " << max_graded << "\n}\n";
  std::ofstream(fs::path(out_dir) / "summary.json") << scrub(js.str(), secrets);

  // The students' JUnit: one suite per lesson, each failure with its first failing check.
  {
    std::ostringstream x;
    int n_tests = 0, n_fail = 0, n_skip = 0;
    for (const Test& t : tests) {
      ++n_tests;
      n_fail += t.verdict == "fail";
      n_skip += t.verdict == "skip";
    }
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fa-grade\" tests=\"" << n_tests << "\" failures=\"" << n_fail
      << "\" skipped=\"" << n_skip << "\">\n";
    for (const auto& [label, l] : lessons) {
      std::vector<const Test*> mine;
      double secs = 0;
      int f = 0, s = 0;
      for (const Test& t : tests)
        if (t.label == label) {
          mine.push_back(&t);
          secs += t.seconds;
          f += t.verdict == "fail";
          s += t.verdict == "skip";
        }
      char score[64];
      std::snprintf(score, sizeof score, "%.1f/%.0f", l.score(), l.points);
      x << "  <testsuite name=\"" << label << "\" tests=\"" << mine.size() << "\" failures=\"" << f << "\" errors=\"0\" skipped=\"" << s
        << "\" time=\"" << secs << "\">\n    <properties>\n      <property name=\"status\" value=\"" << xml_escape(l.status())
        << "\"/>\n      <property name=\"score\" value=\"" << score << "\"/>\n";
      if (!perf_student.empty() && l.perf_points > 0) {
        char p[64];
        std::snprintf(p, sizeof p, "%.1f/%.0f", l.perf_score(), l.perf_points);
        x << "      <property name=\"performance\" value=\"" << p << (l.perf_note.empty() ? "" : " (" + xml_escape(l.perf_note) + ")") << "\"/>\n";
      }
      x << "    </properties>\n";
      for (const Test* t : mine) {
        const std::string cls = label + (t->part == "model" ? ".model" : "");
        x << "    <testcase classname=\"" << cls << "\" name=\"" << xml_escape(t->kase) << "\" time=\"" << t->seconds << "\"";
        if (t->verdict == "pass") { x << "/>\n"; continue; }
        x << ">\n";
        if (t->verdict == "skip") {
          x << "      <skipped message=\"" << xml_escape(t->message.empty() ? "not run: needs a GPU" : scrub(t->message, secrets)) << "\"/>\n";
        } else {
          const std::string msg = scrub(l.not_started() && t->not_implemented ? "not started: " + t->message : t->message, secrets);
          x << "      <failure message=\"" << xml_escape(headline(msg)) << "\" type=\""
            << (t->unsigned_result ? "no valid result" : t->not_implemented ? "not implemented yet" : "check failed") << "\">"
            << xml_escape(msg) << "</failure>\n";
        }
        x << "    </testcase>\n";
      }
      x << "  </testsuite>\n";
    }
    x << "</testsuites>\n";
    std::ofstream(junit) << x.str();
  }
  // The instructor's copy of the seed, apart from the students' reports.
  {
    std::ofstream s(fs::path(instructor_dir) / "seed.txt");
    s << "FA_TEST_SEED=" << (seed.empty() ? std::string(kPublicSeed) + " (the public default)" : seed) << "\nFA_TEST_LEVEL=" << level
      << "\n# Reproduce one test of this grading (its inputs depend on the seed):\n#   FA_TEST_SEED="
      << (seed.empty() ? kPublicSeed : seed) << " FA_TEST_LEVEL=" << level << " ctest --test-dir " << build
      << " --output-on-failure -R '<test name>'\n";
  }
  std::printf("\ntotal %.1f / %.0f (%.0f%%)", total, max_total, max_total > 0 ? 100.0 * total / max_total : 0.0);
  if (max_graded + 1e-9 < max_total) std::printf("; the tests that ran here cover %.1f of the %.0f points", max_graded, max_total);
  std::printf("\nfor students (LMS): %s, %s\nfor the instructor: %s (seed.txt, ctest.log, ctest-junit.xml)\n",
              (fs::path(out_dir) / "summary.json").string().c_str(), junit.c_str(), instructor_dir.c_str());
  return 0;
}
