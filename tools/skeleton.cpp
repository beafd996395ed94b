#include "skeleton.hpp"

#include <algorithm>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

namespace fa::skeleton {
namespace {

std::string trim_left(const std::string& s) { return s.substr(std::min(s.find_first_not_of(" \t"), s.size())); }

bool is_marker(const std::string& line, const char* marker) { return trim_left(line).rfind(marker, 0) == 0; }

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// "    // Mat S = ...;" -> "    Mat S = ...;"
std::string uncomment(const std::string& line) {
  const size_t at = line.find("//");
  if (at == std::string::npos || line.find_first_not_of(" \t") != at) return line;
  std::string rest = line.substr(at + 2);
  if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  return line.substr(0, at) + rest;
}

}  // namespace

bool is_source(const std::string& f) {
  for (const char* ext : {".cu", ".cuh", ".cpp", ".hpp", ".h"}) {
    const std::string e(ext);
    if (f.size() > e.size() && f.compare(f.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

std::string transform(const std::string& solution, const std::string& origin) {
  std::vector<std::string> lines;
  {
    std::istringstream in(solution);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
  }
  const std::regex todo_re(R"(^\s*// (TODO\(\d+\): .*\S)\s*$)");
  std::vector<std::string> todos;
  for (const std::string& l : lines) {
    std::smatch m;
    if (std::regex_match(l, m, todo_re)) todos.push_back(m[1]);
  }

  enum class State { kShared, kSolution, kSkeleton } state = State::kShared;
  int opened_at = 0;
  bool list_placed = false, any_block = false;
  std::ostringstream out;
  out << "// Your copy of this lesson, generated from " << origin << " by fa-skeleton.\n";
  auto fail = [&](int line, const std::string& what) {
    throw Error(origin + ":" + std::to_string(line) + ": " + what);
  };
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    const int n = static_cast<int>(i) + 1;
    if (is_marker(l, "// BEGIN SOLUTION") || is_marker(l, "// BEGIN SKELETON")) {
      if (state != State::kShared) fail(n, "a block opened inside the block opened at line " + std::to_string(opened_at));
      state = is_marker(l, "// BEGIN SOLUTION") ? State::kSolution : State::kSkeleton;
      opened_at = n;
      any_block = true;
      continue;
    }
    if (is_marker(l, "// END SOLUTION") || is_marker(l, "// END SKELETON")) {
      const State closes = is_marker(l, "// END SOLUTION") ? State::kSolution : State::kSkeleton;
      if (state != closes) fail(n, "an END marker without its BEGIN");
      state = State::kShared;
      continue;
    }
    if (l.find("// @todos-left") != std::string::npos) {
      const std::string indent = l.substr(0, l.find_first_not_of(" \t"));
      const std::string file = origin.substr(origin.find_last_of('/') + 1);
      for (const std::string& t : todos) {  // "TODO(1): x" -> "TODO(1) in kernel.cu: x"
        const size_t colon = t.find(':');
        out << indent << '"' << escape(t.substr(0, colon) + " in " + file + t.substr(colon)) << "\",\n";
      }
      list_placed = true;
      continue;
    }
    if (state == State::kSolution) continue;
    out << (state == State::kSkeleton ? uncomment(l) : l) << '\n';
  }
  if (state != State::kShared) fail(opened_at, "block never closed");
  if (any_block && !list_placed)
    fail(1, "the file has solution blocks but no '// @todos-left' line, so its skeleton could not report them");
  if (any_block && todos.empty()) fail(1, "the file has solution blocks but no '// TODO(n): ...' line naming them");
  return out.str();
}

std::string hash_text(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::map<std::string, std::string> read_hashes(const std::string& lessons_dir) {
  std::map<std::string, std::string> out;
  std::ifstream in(std::filesystem::path(lessons_dir) / kHashFile);
  std::string file, hash;
  while (in >> file >> hash) out[file] = hash;
  return out;
}

void write_hashes(const std::string& lessons_dir, const std::map<std::string, std::string>& hashes) {
  std::ofstream out(std::filesystem::path(lessons_dir) / kHashFile, std::ios::binary);
  for (const auto& [file, hash] : hashes) out << file << " " << hash << "\n";
  if (!out) throw Error("cannot write " + (std::filesystem::path(lessons_dir) / kHashFile).string());
}

LessonState lesson_state(const std::string& lesson_dir, const std::map<std::string, std::string>& hashes) {
  namespace fs = std::filesystem;
  LessonState st;
  const std::string lesson = fs::path(lesson_dir).filename().string();
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(lesson_dir))
    if (f.is_regular_file() && is_source(f.path().filename().string())) files.push_back(f.path());
  std::sort(files.begin(), files.end());
  const std::regex todo_re(R"re(^\s*"(TODO\(\d+\) in [^"]*)",\s*$)re");
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    const auto it = hashes.find(lesson + "/" + f.filename().string());
    if (it == hashes.end() || it->second != hash_text(text.str())) st.edited.push_back(f.filename().string());
    std::istringstream lines(text.str());
    bool in_list = false;
    for (std::string l; std::getline(lines, l);) {
      if (l.find("kTodosLeft") != std::string::npos) in_list = true;
      if (!in_list) continue;
      std::smatch m;
      if (std::regex_match(l, m, todo_re)) st.todos_left.push_back(m[1]);
      if (l.find("};") != std::string::npos) in_list = false;
    }
  }
  return st;
}

}  // namespace fa::skeleton
