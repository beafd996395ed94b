// fa-mutate: makes a mutant, a deliberately wrong copy of a solution file, from a .mutant file:
//
//   lesson: 04_fa2
//   file: kernel.cu
//   hint: the id of the hint the suite's report must give (tests/hints.hpp), or none
//   why: one line on the bug and the test input that must catch it
//   --- find
//   <exact text, one or more lines>
//   --- replace
//   <its replacement>
//   (more find/replace pairs may follow)
//
// Each find text must occur exactly once in the solution file, so a mutant cannot silently stop
// applying when the solution changes.   usage: fa-mutate <file.mutant> <solutions-dir> <out-file>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

static std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: fa-mutate <file.mutant> <solutions-dir> <out-file>\n";
    return 2;
  }
  try {
    std::istringstream spec(slurp(argv[1]));
    std::string lesson, file, line, *target = nullptr;
    std::vector<std::pair<std::string, std::string>> edits;
    while (std::getline(spec, line)) {
      if (line.rfind("lesson: ", 0) == 0 && edits.empty()) lesson = line.substr(8);
      else if (line.rfind("file: ", 0) == 0 && edits.empty()) file = line.substr(6);
      else if (line == "--- find") {
        edits.emplace_back();
        target = &edits.back().first;
      } else if (line == "--- replace") {
        if (edits.empty()) throw std::runtime_error("'--- replace' before any '--- find'");
        target = &edits.back().second;
      } else if (target != nullptr) {
        *target += line + "\n";
      }
    }
    if (lesson.empty() || file.empty() || edits.empty())
      throw std::runtime_error(std::string(argv[1]) + ": needs 'lesson:', 'file:' and at least one find/replace");
    std::string text = slurp(fs::path(argv[2]) / lesson / file);
    for (const auto& [find, replace] : edits) {
      const size_t at = text.find(find);
      if (at == std::string::npos || text.find(find, at + 1) != std::string::npos)
        throw std::runtime_error(std::string(argv[1]) + ": this text must occur exactly once in " + lesson + "/" + file +
                                 ":\n" + find);
      text.replace(at, find.size(), replace);
    }
    const fs::path out = argv[3];
    fs::create_directories(out.parent_path());
    if (!fs::exists(out) || slurp(out) != text) std::ofstream(out, std::ios::binary) << text;
  } catch (const std::exception& e) {
    std::cerr << "fa-mutate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
