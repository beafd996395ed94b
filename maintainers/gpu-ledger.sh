#!/usr/bin/env bash
# The GPU ledger (maintainers/gpu-ledger.md): every full GPU run of the solutions, with a hash of the
# sources a GPU run depends on. CI has no GPU, so it checks that the newest row's hash is the hash
# of the tree it tests: a kernel, test or runtime change cannot land without a recorded GPU run.
#   maintainers/gpu-ledger.sh hash                           print the hash of the GPU sources
#   maintainers/gpu-ledger.sh check                          exit 1 if they changed since the last run
#   maintainers/gpu-ledger.sh record "<GPU>" "<ctest line>"  append a row for the current tree, and
#                                                            rewrite the README's "last verified" line
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
ledger=maintainers/gpu-ledger.md
# What a GPU run depends on: kernels, runtime, tests, and the build that compiles them. Markdown
# (a solution's ANSWERS.md, notes) is read by people, never by the build or a test: it is left out,
# so an instructor's answers can follow a recorded run without another one. Of maintainers/, what
# the GPU suite runs: the mutants and their runner (not the ledger, nor the scripts
# that only CI runs: check-skeleton-tests.sh, test-student-edits.sh, test-grading.sh, cheats/).
paths=(solutions include runtime reference tests maintainers/mutants maintainers/run_mutant.sh
       tools/CMakeLists.txt CMakeLists.txt cmake)

sources_hash() {
  git ls-files --cached --others --exclude-standard -- "${paths[@]}" | grep -vx "$ledger" | grep -v '\.md$' | LC_ALL=C sort |
    while IFS= read -r f; do [ -f "$f" ] && printf '%s  %s\n' "$(sha256sum < "$f" | cut -c1-64)" "$f"; done |
    sha256sum | cut -c1-16
}

# The hash is a row's last cell (a row's text may hold escaped pipes, \|, in its cells).
last_hash() { grep -E '^\| 20' "$ledger" | tail -1 | awk -F'|' '{h = $(NF - 1); gsub(/[ `]/, "", h); print h}'; }

case "${1:-}" in
  hash) sources_hash ;;
  check)
    now=$(sources_hash)
    last=$(last_hash || true)
    if [ "$now" != "$last" ]; then
      echo "GPU ledger: the GPU sources changed since the last recorded GPU run (ledger ${last:-none}, tree $now)."
      echo "Run the suite on a GPU (tools/gpu-run.sh, README "Run on a GPU") and record it with maintainers/gpu-ledger.sh record."
      exit 1
    fi
    echo "GPU ledger: the tree matches the last recorded GPU run ($now)."
    ;;
  record)
    [ $# -eq 3 ] || { echo "usage: $0 record \"<GPU>\" \"<ctest summary line>\""; exit 2; }
    h=$(sources_hash)
    gpu=${2//|/\\|} text=${3//|/\\|}  # a pipe in a Markdown table's cell is written \|
    row="| $(date -u +%Y-%m-%d) | $(git rev-parse --short HEAD 2>/dev/null || echo none) | $gpu | $text | \`$h\` |"
    echo "$row" >> "$ledger"
    python3 - "$ledger" <<'PY'
import re, sys
# The README names the last row that ran on a GPU, and how many rows since had no GPU run.
rows = [re.split(r"(?<!\\)\|", l.rstrip("\n"))[1:-1] for l in open(sys.argv[1]) if l.startswith("| 20")]
rows = [[c.strip().replace("\\|", "|") for c in r] for r in rows]
ran = [i for i, r in enumerate(rows) if not r[2].startswith("none")]
date, _, gpu, text, h = rows[ran[-1]] if ran else rows[-1]
line = f"Last verified GPU run: {date}, {gpu}: {text} (sources {h}, see [maintainers/gpu-ledger.md](maintainers/gpu-ledger.md))."
since = len(rows) - 1 - ran[-1] if ran else 0
if since:
    line += (f" Since then, {since} change(s) recorded without a GPU run, each with its evidence in the ledger"
             " (the same SASS, or no GPU code changed).")
p = "README.md"
s = open(p).read()
s = re.sub(r"(<!-- gpu-ledger -->\n).*?(\n<!-- /gpu-ledger -->)", lambda m: m.group(1) + line + m.group(2), s, flags=re.S)
open(p, "w").write(s)
PY
    echo "recorded: $row"
    ;;
  *) echo "usage: $0 hash | check | record \"<GPU>\" \"<ctest summary line>\""; exit 2 ;;
esac
