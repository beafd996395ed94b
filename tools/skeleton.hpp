// The skeleton generator: solutions/NN_name/ is the source of truth, lessons/NN_name/ is made
// from it. In a solution file:
//   // TODO(n): what to write           the first line of each TODO is collected for the list below
//   // BEGIN SOLUTION ... // END SOLUTION     removed from the skeleton
//   // BEGIN SKELETON ... // END SKELETON     commented out in the solution, code in the skeleton
//                                             (stubs that keep the skeleton compiling)
//   // @todos-left                            replaced by the TODO list, as string literals, so the
//                                             skeleton's tests say "lesson NN not implemented yet: TODO(n): ..."
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace fa::skeleton {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Turns the text of a solution file into the text of its skeleton. `origin` (the solution's
// path, relative to the repository) names the file in errors and in the skeleton's first line.
std::string transform(const std::string& solution, const std::string& origin);

// Is this a source file the generator handles (.cu .cuh .cpp .hpp .h)?
bool is_source(const std::string& filename);

// A student's work is never overwritten by accident. lessons/.skeleton-hashes records, for each
// generated file ("NN_name/kernel.cu"), a hash of the text the generator last wrote there; a file
// whose text still has that hash is untouched, any other was edited (by a student).
constexpr const char* kHashFile = ".skeleton-hashes";
std::string hash_text(const std::string& text);  // 16 hex digits (FNV-1a, 64 bits)
std::map<std::string, std::string> read_hashes(const std::string& lessons_dir);
void write_hashes(const std::string& lessons_dir, const std::map<std::string, std::string>& hashes);

// What a lesson folder holds against what the generator wrote there.
struct LessonState {
  std::vector<std::string> edited;      // sources that differ from what the generator last wrote (or have no record)
  std::vector<std::string> todos_left;  // "TODO(n) in file: ..." still listed in a kTodosLeft
};
LessonState lesson_state(const std::string& lesson_dir, const std::map<std::string, std::string>& hashes);

}  // namespace fa::skeleton
