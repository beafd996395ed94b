#!/usr/bin/env bash
# Lesson 09's experiment: does fusing RoPE pay, and from which sequence length? One run, causal,
# fp16, head dims 64 and 128, seqlen 512 .. 16k (fa-bench's grid: 16k tokens x 2048 wide):
#   09_attention  the attention kernel alone, no RoPE (the floor both paths sit on)
#   09_fused      RoPE fused into the attention kernel
#   09_outside    rope_kernel, then the same attention kernel with the same tiles
#   09_fused_small_tiles  the fused kernel with smaller tiles (the pitfall: compare that with
#                 09_outside and you measure the tiles, not the fusion)
#   peer_fa2_rope_eager / _compiled  PyTorch rotates (eager ops, or one torch.compile kernel),
#                 then SDPA's FlashAttention-2 backend (plots/peers.py, where PyTorch is installed)
# TFLOP/s count the attention's FLOPs only, so every row is comparable: time is what differs.
#   usage: experiment.sh [out.csv]     (default $FA_BUILD/lesson09_rope.csv)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FA_BUILD:-$root/build/student}
csv=${1:-$build/lesson09_rope.csv}
[ -x "$build/bin/fa-bench" ] || cmake --build "$build" --target fa-bench > /dev/null
bench=("$build/bin/fa-bench" --lessons 09 --seqlens "${FA_SEQLENS:-512,1024,2048,4096,8192,16384}" --causal 1 --csv "$csv")
"${bench[@]}" --head-dims 64,128 --label 09_attention
"${bench[@]}" --head-dims 64,128 --rope --label 09_fused
"${bench[@]}" --head-dims 64,128 --rope --variant outside --label 09_outside
# Smaller tiles for the fused kernel only (the variant small-tiles: lesson 08's configurations 2,
# 64 x 64 at d = 64, and 4, 128 x 32 at d = 128).
"${bench[@]}" --head-dims 64,128 --rope --variant small-tiles --label 09_fused_small_tiles
if python3 -c "import torch" 2> /dev/null; then
  for how in eager compiled; do
    python3 "$root/plots/peers.py" --csv "$csv" --backends flash --rope "$how" --causal 1 --head-dims 64,128 \
      --seqlens "${FA_SEQLENS:-512,1024,2048,4096,8192,16384}"
  done
else
  echo "PyTorch is not installed: the peer rows are left out"
fi
echo "wrote $csv"
