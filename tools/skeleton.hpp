// The skeleton generator: solutions/NN_name/ is the source of truth, lessons/NN_name/ is made
// from it. In a solution file:
//   // TODO(n): what to write           the first line of each TODO is collected for the list below
//   // BEGIN SOLUTION ... // END SOLUTION     removed from the skeleton
//   // BEGIN SKELETON ... // END SKELETON     commented out in the solution, code in the skeleton
//                                             (stubs that keep the skeleton compiling)
//   // @todos-left                            replaced by the TODO list, as string literals, so the
//                                             skeleton's tests say "lesson NN not implemented yet: TODO(n): ..."
#pragma once

#include <stdexcept>
#include <string>

namespace fa::skeleton {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Turns the text of a solution file into the text of its skeleton. `origin` (the solution's
// path, relative to the repository) names the file in errors and in the skeleton's first line.
std::string transform(const std::string& solution, const std::string& origin);

// Is this a source file the generator handles (.cu .cuh .cpp .hpp .h)?
bool is_source(const std::string& filename);

}  // namespace fa::skeleton
