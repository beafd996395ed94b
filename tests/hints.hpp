// Hints: when a lesson's output is wrong, say which classic bug its error looks like. A hint is
// read off the error alone: which rows are wrong and how, the LSE against O, and above all which
// alternative computation the wrong rows match exactly (the diagonal key hidden, keys past
// seqlen_k taken in, K read from another head, an accumulator never rescaled, ...). It never
// knows which code produced the output. Each hint carries an id ("hint [mask-hides-diagonal]: ...")
// so the mutant tests can check that a deliberate bug gets the hint that names it, and no other
// (maintainers/run_mutant.sh).
#pragma once

#include <string>
#include <vector>

#include "fa/compare.hpp"
#include "fa/rope.hpp"
#include "reference.hpp"
#include "support.hpp"

namespace fa::test {

struct Hint {
  std::string id, text;
};
// "\n  hint [id]: text" for each hint; "" for none.
std::string format_hints(const std::vector<Hint>& hints);

// One checked forward run. Rows are in the LSE's order: (batch, head, row) dense (only the
// sampled rows when the case samples), (head, token) varlen; o holds them in that order too.
struct ForwardRun {
  const Case& c;
  const ref::Inputs& values;   // the rounded inputs (before RoPE)
  const ref::Inputs& rotated;  // what the reference multiplied (the same as values without RoPE)
  const RopeTables* rope;      // the tables, for RoPE cases
  const std::vector<double>&o, &lse, &want_o, &want_lse;
  Tolerance otol, ltol;
};
std::vector<Hint> forward_hints(const ForwardRun& r);

// One checked backward run: the inputs it was given (O rounded to the storage type, the LSE in
// fp32, dO), what it wrote, the reference's gradients and the sizes of their terms (the
// tolerance's mag). `failed` names the gradients that failed their checks.
struct BackwardRun {
  const Case& c;
  const ref::Inputs& values;
  const std::vector<double>& dout;
  const std::vector<double>& o;
  const std::vector<float>& lse;
  const ref::Gradients &got, &want, &mag;
  bool failed_dq, failed_dk, failed_dv, failed_dg;
};
std::vector<Hint> backward_hints(const BackwardRun& r);

}  // namespace fa::test
