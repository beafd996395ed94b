// The forward's verdicts: a case run and compared with the fp64 reference (with the hints for a
// failure), determinism, the clear rejections, and the tiles a work tile visits.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "fa/compare.hpp"
#include "fa/cuda_check.hpp"
#include "fa/half.hpp"
#include "fa/random.hpp"
#include "hints.hpp"
#include "run.hpp"

namespace fa::test {
namespace {

// A varlen O, (total, heads, dim), as (heads, total, dim): the order of its LSE, for hints().
std::vector<double> heads_first(const Case& c, const std::vector<double>& o) {
  const int heads = c.heads_q, d = c.head_dim, total = static_cast<int>(o.size() / (size_t(heads) * d));
  std::vector<double> out(o.size());
  for (int t = 0; t < total; ++t)
    for (int h = 0; h < heads; ++h)
      for (int x = 0; x < d; ++x) out[(size_t(h) * total + t) * d + x] = o[(size_t(t) * heads + h) * d + x];
  return out;
}

// The key tiles of `keys` that query rows first .. first + rows - 1 of a sequence of len_q
// queries and len_k keys see (lesson 06's bounds).
int key_tiles_seen(bool causal, int first, int rows, int len_q, int len_k, int keys) {
  const int last = std::min(first + rows, len_q) - 1;
  const int k_end = first >= len_q ? 0 : causal ? std::min(len_k, last + len_k - len_q + 1) : len_k;
  return k_end > 0 ? (k_end + keys - 1) / keys : 0;
}
// The query tiles of `rows` that see any of keys first, first + 1, ... (from the first that sees
// key `first`, causal), for one query head.
int query_tiles_seen(bool causal, int first, int len_q, int len_k, int rows) {
  const int q_first = causal ? std::max(0, first - (len_k - len_q)) : 0, n_qtiles = (len_q + rows - 1) / rows;
  return first >= len_k || q_first >= len_q ? 0 : n_qtiles - q_first / rows;
}

// The failures of a tile count: no record at all (the build does not count), and the hint for
// tiles visited past the ones seen, `where` saying where the loop should stop or start.
Outcome none_recorded(const Case& c) {
  return fail(c, "MISMATCH: no work tile recorded its tiles: is the lesson built with FA_COUNT_TILES (cmake: TILE_COUNTS), "
                 "and does it call fa::tile_count_begin?");
}
std::string extra_tiles_hint(const std::string& where) {
  return format_hints({{"extra-tiles", "the output can be right and the kernel still slow: it visits tiles that hold no pair its "
                                       "rows see; " + where}});
}

// A packed batch (lesson 12): block x of head h takes entry x of a tile map (the forward's query
// tiles for each query head, the backward's key tiles for each K/V head), so the records, in
// order, are the map's tiles head after head. Each head's must be every tile of the batch, each
// visiting exactly the tiles it sees (compared as (first row or key, count) pairs: the records
// do not name the sequence), heaviest first: in the order of the map, no record visits more
// tiles than the one before it. Past kOrderCap - 1 tiles (a query head's) a plan may order tiles
// alike (lesson 12's 1,024 buckets), so counts are compared up to that there.
constexpr int kOrderCap = 1024;
Outcome packed_tile_counts(const Case& c, const std::vector<int>& rec, int64_t records, Direction dir) {
  const bool fwd = dir == Direction::kForward;
  const int heads = fwd ? c.heads_q : c.heads_kv, group = c.heads_q / c.heads_kv;
  const std::string own = fwd ? " rows" : " keys", other = fwd ? " keys" : " query rows";
  std::vector<std::pair<int, int>> got;  // (tiles visited, first row or key), in the records' order
  int length = 0, tile = 0;
  for (int64_t w = 0; w < records; ++w) {
    const int* x = &rec[size_t(w) * kTileRecord];
    if (x[2] <= 0) continue;
    const bool owned = x[3] >= kKeysOwned;
    const int t = owned ? x[3] - kKeysOwned : x[3];
    if (t <= 0 || owned == fwd || (length > 0 && (x[2] != length || t != tile)))
      return fail(c, "test error: tile record " + std::to_string(w) + " (" + std::to_string(x[2]) + own + ", tiles of " +
                         std::to_string(t) + other + ") is not like the others, or not of this pass");
    got.emplace_back(x[0], x[1]);
    length = x[2];
    tile = t;
  }
  if (got.empty()) return none_recorded(c);
  std::vector<std::pair<int, int>> want;  // one head's tiles, heaviest first
  for (int b = 0; b < c.sequences(); ++b) {
    const int lq = c.len_q(b), lk = c.len_k(b);
    for (int first = 0; first < (fwd ? lq : lk); first += length)
      want.emplace_back(fwd ? key_tiles_seen(c.causal, first, length, lq, lk, tile) : query_tiles_seen(c.causal, first, lq, lk, tile) * group,
                        first);
  }
  std::sort(want.rbegin(), want.rend());
  const size_t n = want.size();
  const auto sum = [](const std::vector<std::pair<int, int>>& v) {
    int64_t t = 0;
    for (const auto& e : v) t += e.first;
    return t;
  };
  const std::string tiles = " tiles of " + std::to_string(length) + own;
  const int cap = (kOrderCap - 1) * (fwd ? 1 : group);
  if (got.size() != n * heads)
    return fail(c, "MISMATCH: " + std::to_string(got.size()) + " work tiles recorded their tiles; the batch has " +
                       std::to_string(n) + tiles + " a head, " + std::to_string(n * heads) + " in all");
  for (int h = 0; h < heads; ++h) {
    const std::vector<std::pair<int, int>> head(got.begin() + h * n, got.begin() + (h + 1) * n);
    std::vector<std::pair<int, int>> sorted = head;
    std::sort(sorted.rbegin(), sorted.rend());
    if (sorted != want) {
      std::string text = "MISMATCH: " + std::string(fwd ? "" : "K/V ") + "head " + std::to_string(h) + "'s" + tiles +
                         " visited " + std::to_string(sum(head)) + " tiles of " + std::to_string(tile) + other +
                         "; the ones they see are " + std::to_string(sum(want));
      if (sum(head) > sum(want))
        text += extra_tiles_hint(fwd ? "stop at the last key of the tile's last row in its own sequence"
                                     : "start at the first query tile that sees the block's first key, in its own sequence");
      return fail(c, text);
    }
    for (size_t at = 1; at < n; ++at)
      if (std::min(head[at].first, cap) > std::min(head[at - 1].first, cap))
        return fail(c, "MISMATCH: " + std::string(fwd ? "" : "K/V ") + "head " + std::to_string(h) + "'s tiles visit the tiles " +
                           "they see, but not heaviest first: map entry " + std::to_string(at) + " visits " +
                           std::to_string(head[at].first) + ", the one before it " + std::to_string(head[at - 1].first) +
                           format_hints({{"not-heaviest-first", "the output is right and the kernel slower: the last blocks to "
                                                                "start should be the lightest, so that none of them ends long "
                                                                "after the others; the plan sorts the tiles by the tiles each "
                                                                "visits"}}));
  }
  return {true, false, c.describe() + ": " + std::to_string(got.size()) + " work tiles visited exactly the " +
                           std::to_string(sum(want) * heads) + " tiles they see, heaviest first"};
}

}  // namespace

int& failures_in_test_case() {
  static int failures = 0;
  return failures;
}

Outcome check_forward(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    execute(lesson, r);
    const std::string changed = changed_input(c, r, in);
    if (!changed.empty()) return fail(c, "the lesson modified its input " + changed);
    std::vector<double> o = read_values(c, r.o, true);
    const std::vector<float> lse32 = r.lse.to_host<float>();
    std::vector<double> lse(lse32.begin(), lse32.end());

    const Tolerance otol = output_tolerance(c.dtype), ltol = lse_tolerance();
    Shape so = tensor_shape(c, true), sl = vector_shape(c, true);
    if (!c.sample_rows.empty()) {
      // Large problems: every element must be written (no NaN left from the poison), and the
      // sampled rows must match the reference.
      size_t nan_o = 0, nan_l = 0;
      for (double x : o) nan_o += std::isnan(x);
      for (double x : lse) nan_l += std::isnan(x);
      if (nan_o || nan_l)
        return fail(c, "MISMATCH: " + std::to_string(nan_o) + " elements of O and " + std::to_string(nan_l) +
                           " of LSE are NaN (unwritten: outputs are poisoned with NaN before the run)");
      const int n = static_cast<int>(c.sample_rows.size());
      std::vector<double> os, ls;
      for (int bh = 0; bh < c.batch * c.heads_q; ++bh)
        for (int r2 : c.sample_rows) {
          ls.push_back(lse[size_t(bh) * c.seqlen_q + r2]);
          for (int d = 0; d < c.head_dim; ++d) os.push_back(o[(size_t(bh) * c.seqlen_q + r2) * c.head_dim + d]);
        }
      o.swap(os);
      lse.swap(ls);
      so.dims[2] = sl.dims[2] = n;
      so.names[2] = sl.names[2] = "sampled row";
    }
    const ForwardCheck check = compare_forward(c.reference_problem(), reference_inputs(c, in, r.rope),
                                               c.sample_rows.empty() ? nullptr : &c.sample_rows, o, lse, so.dims, so.names, sl.dims, sl.names);
    const ref::Forward& want = check.want;
    const CompareReport &ro = check.o, &rl = check.lse;
    const bool ok = check.ok();
    std::string why;
    if (!ok && hints_wanted()) {
      const ref::Inputs rotated = reference_inputs(c, in, r.rope);
      const std::vector<double> o_rows = c.varlen() ? heads_first(c, o) : o, want_rows = c.varlen() ? heads_first(c, want.o) : want.o;
      why = format_hints(forward_hints({c, in.values, rotated, c.rope() ? &r.rope : nullptr, o_rows, lse, want_rows, want.lse, otol, ltol}));
    }
    return Outcome{ok, false, c.describe() + "\n  " + ro.text + "\n  " + rl.text + why, ro.max_abs_err,
                   c.describe() + ": " + (ro.ok ? "" : ro.brief) + (ro.ok || rl.ok ? "" : "; ") + (rl.ok ? "" : rl.brief)};
  });
}

Outcome check_deterministic(const LessonInfo& lesson, const Case& c) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = prepare(lesson, c, in);
    execute(lesson, r);
    const std::vector<uint8_t> o1 = r.o.to_host<uint8_t>(), l1 = r.lse.to_host<uint8_t>();
    execute(lesson, r);
    const std::vector<uint8_t> o2 = r.o.to_host<uint8_t>(), l2 = r.lse.to_host<uint8_t>();
    if (o1 != o2 || l1 != l2)
      return fail(c, std::string("MISMATCH: two runs on the same inputs differ bitwise in ") + (o1 != o2 ? "O" : "") +
                         (o1 != o2 && l1 != l2 ? " and " : "") + (l1 != l2 ? "LSE" : ""));
    return {true, false, c.describe() + " bitwise identical across two runs"};
  });
}

Outcome check_rejected(const LessonInfo& lesson, const Case& c, const std::function<void(AttnParams&)>& break_it,
                       const std::string& expect, Direction dir) {
  try {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, c, in) : prepare_backward(lesson, c, in, BackwardInputs(c, in));
    const std::vector<Buffer*> written = outputs(r, dir);
    for (Buffer* b : written) b->poison();
    break_it(r.p);
    try {
      if (dir == Direction::kForward) run_forward(lesson, r.p);
      else run_backward(lesson, r.p);
      sync(lesson);
    } catch (const InvalidArgument& e) {
      const std::string msg = e.what();
      sync(lesson);
      if (msg.find(lesson.id) == std::string::npos || msg.find(expect) == std::string::npos)
        return fail(c, "rejected, but the message should name the lesson and say '" + expect + "': " + msg);
      bool untouched = true;
      for (const Buffer* b : written) untouched = untouched && all_bytes(*b, Buffer::kPoisonByte);
      if (!untouched)
        return fail(c, "rejected, but only after writing the outputs (validate before any launch): " + msg);
      return {true, false, "rejected: " + msg};
    }
    return fail(c, "a bad call was accepted; expected an error saying '" + expect + "'");
  } catch (const NotImplemented& e) {
    return {false, true, e.what()};
  } catch (const std::exception& e) {
    return fail(c, std::string("a bad call failed with the wrong kind of error: ") + e.what());
  }
}

Outcome check_feature_rejected(const LessonInfo& lesson, const Case& c, const std::string& expect, Direction dir) {
  Case plain;
  plain.seqlen_q = plain.seqlen_k = 17;
  plain.head_dim = c.head_dim;
  plain.dtype = c.dtype;
  plain.causal = c.causal;
  const Outcome ran = guarded(plain, [&]() -> Outcome {
    const Inputs in = make_inputs(plain, seed_for(plain.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, plain, in) : prepare_backward(lesson, plain, in, BackwardInputs(plain, in));
    execute(lesson, r, dir);
    return {true, false, ""};
  });
  if (!ran.ok) return ran.not_implemented ? ran : fail(c, "its plain neighbour failed first: " + ran.text);
  return check_rejected(lesson, c, [](AttnParams&) {}, expect, dir);
}

Outcome check_tile_counts(const LessonInfo& lesson, const Case& c, Direction dir) {
  return guarded(c, [&]() -> Outcome {
    const Inputs in = make_inputs(c, seed_for(c.describe()));
    Run r = dir == Direction::kForward ? prepare(lesson, c, in) : prepare_backward(lesson, c, in, BackwardInputs(c, in));
    // A packed batch's grid is its map's bound (total / tile + batch entries, tiles of 16 rows at
    // least) for each head.
    const int64_t records = c.varlen() ? (int64_t(std::max(c.total_q(), c.total_k())) / 16 + c.batch + 2) * c.heads_q
                                       : (int64_t(std::max(c.seqlen_q, c.seqlen_k)) / 16 + 2) * c.batch * c.heads_q;
    Buffer counts(lesson.memory, size_t(records) * kTileRecord * 4, "tile_counts");
    const std::vector<int> zeros(size_t(records) * kTileRecord, 0);
    counts.upload(zeros.data(), counts.bytes());
    r.p.tile_counts = static_cast<int*>(counts.data());
    execute(lesson, r, dir);
    counts.check_guards();
    const std::vector<int> rec = counts.to_host<int>();
    if (c.varlen()) return packed_tile_counts(c, rec, records, dir);
    const int sq = c.seqlen_q, sk = c.seqlen_k, group = c.heads_q / c.heads_kv;
    int64_t written = 0, visited = 0, needed = 0;
    std::string first_bad;
    for (int64_t w = 0; w < records; ++w) {
      const int* x = &rec[size_t(w) * kTileRecord];
      if (x[2] <= 0) continue;  // no work tile of this number
      ++written;
      const bool keys_owned = x[3] >= kKeysOwned;
      const int tile = keys_owned ? x[3] - kKeysOwned : x[3], first = x[1], length = x[2];
      if (tile <= 0) return fail(c, "test error: tile record " + std::to_string(w) + " has tile size " + std::to_string(tile));
      int want = 0;
      if (!keys_owned) {  // rows first .. first + length - 1 visit key tiles of `tile` keys
        want = key_tiles_seen(c.causal, first, length, sq, sk, tile);
      } else {  // keys first .. first + length - 1 visit query tiles of `tile` rows, for each head of the group
        want = query_tiles_seen(c.causal, first, sq, sk, tile) * group;
      }
      visited += x[0];
      needed += want;
      if (x[0] != want && first_bad.empty())
        first_bad = std::string("work tile ") + std::to_string(w) + (keys_owned ? " (keys " : " (rows ") + std::to_string(first) +
                    " .. " + std::to_string(first + length - 1) + ") visited " + std::to_string(x[0]) + " tiles of " +
                    std::to_string(tile) + (keys_owned ? " query rows" : " keys") + "; the ones its " +
                    (keys_owned ? "keys are seen from" : "rows see") + " are " + std::to_string(want);
    }
    if (written == 0) return none_recorded(c);
    if (!first_bad.empty()) {
      std::string text = "MISMATCH: " + first_bad + " (all work tiles: " + std::to_string(visited) + " tiles visited, " +
                         std::to_string(needed) + " needed)";
      if (visited > needed)
        text += extra_tiles_hint("stop at the last key the block's last row sees (j <= i + seqlen_k - seqlen_q), or start at "
                                 "the first query tile that sees the block's first key");
      return fail(c, text);
    }
    return {true, false, c.describe() + ": " + std::to_string(written) + " work tiles visited exactly the " +
                             std::to_string(needed) + " tiles their rows see"};
  });
}

}  // namespace fa::test
