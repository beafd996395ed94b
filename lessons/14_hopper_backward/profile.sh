#!/usr/bin/env bash
# Lesson 14's profiling exercise: where the Hopper backward's time goes, per kernel, for both ways
# of adding dQ's shares, the lesson's variants (N = 16384 unless FA_PROFILE_SEQLEN says otherwise:
# 16 heads x head_dim 128 and 32 x 64, fp16, non-causal):
#   writers: the default: the consumers stage each share in shared memory, and a dQ writer warp
#            adds it with one TMA bulk reduce-add (cp.reduce.async.bulk);
#   atomic:  16-byte fp32 atomics (atomicAdd on float4) from every consumer thread, each warp's
#            on 512 contiguous bytes of the accumulator (part 1's way).
# Each run has three kernels: preprocess_kernel (D, LSE2, the accumulator zeroed), backward_kernel
# (dK, dV and dQ's shares) and postprocess_kernel (dQ gathered from the threads' order, scaled and
# rounded). Per kernel: time; the tensor pipe's busy fraction (wgmma's HGMMA is counted by the
# hmma/hgmma/qgmma counter, the one lesson 13 measured) and its wgmma instructions; the exponential
# unit's (XU) share; the shared-memory pipe's load and bank conflicts on loads and stores; the L2's
# reduction sectors (what the atomics and the bulk reduce-adds write); and the stall reasons (as %
# of active warp cycles) of the README's profiles, plus gmma and mio_throttle. Predict first
# (README, "How to profile").
#   FA_PROFILE_VARIANTS  the variants profiled, in turn (default "writers atomic"; the sweep's builds
#                        too: "writers stages2" compares four ring stages with two at head dim 64)
#   FA_PROFILE_HEAD_DIMS the head dims (default 128,64)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
# Newer Nsight Compute versions may also list sm__pipe_tensor_op_gmma_cycles_active (wgmma alone);
# the counter below covers mma.sync and wgmma together and is the one the course has measured on
# the H200 (lesson 13). `ncu --query-metrics | grep gmma` lists what your version has.
stall=smsp__warp_issue_stalled
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
metrics=$metrics,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed
metrics=$metrics,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
metrics=$metrics,lts__t_sectors_op_red.sum
metrics=$metrics,${stall}_long_scoreboard_per_warp_active.pct,${stall}_wait_per_warp_active.pct
metrics=$metrics,${stall}_short_scoreboard_per_warp_active.pct,${stall}_selected_per_warp_active.pct
metrics=$metrics,${stall}_lg_throttle_per_warp_active.pct,${stall}_barrier_per_warp_active.pct
metrics=$metrics,${stall}_branch_resolving_per_warp_active.pct,${stall}_gmma_per_warp_active.pct
metrics=$metrics,${stall}_mio_throttle_per_warp_active.pct
n=${FA_PROFILE_SEQLEN:-16384}
dims=${FA_PROFILE_HEAD_DIMS:-128,64}
echo "fa-bench --bwd takes O and the LSE from lesson 08's forward in $FA_BUILD: if your lesson 08 is"
echo "not done, run FA_BUILD=$root/build/solutions $0 (the course's lessons)."
for v in ${FA_PROFILE_VARIANTS:-writers atomic}; do
  case $v in
    writers) how="dQ by the writer warps' bulk reduce-adds" ;;
    atomic) how="dQ by 16-byte fp32 atomics from the consumers" ;;
    *) how="the sweep's build" ;;
  esac
  echo "== $how (variant $v), N = $n, head_dim $dims (non-causal, fp16)"
  "$root/tools/ncu-profile.sh" lesson14_${v}_n$n "$metrics" "preprocess_kernel|backward_kernel|postprocess_kernel" \
    --bwd --lessons 14 --variant "$v" --seqlens "$n" --tokens "$n" --head-dims "$dims" --causal 0
done
echo "Read it: the three kernels' times add up to the backward's; backward_kernel is nearly all of it."
echo "The tensor pipe's busy fraction is the share of the wgmma ceiling the kernel reaches; the rest"
echo "is in the stalls: long scoreboard (waits on memory and the ring's mbarriers), wait (fixed-latency"
echo "dependencies), short scoreboard (shared-memory loads), lg_throttle (the queue of global-memory"
echo "instructions: the atomics), barrier (the consumers meeting on dS^T), gmma (waiting for wgmma)."
echo "Compare head_dim 128 with the README's profiles (section 8). The shared-memory pipe's load is"
echo "mostly wgmma's operand reads. The L2 reduction sectors are the same bytes added both ways; at"
echo "head_dim 64 dQ is split by keys, so each tile adds two whole partials."
