#!/usr/bin/env python3
"""Times PyTorch's attention backends on fa-bench's grid and appends rows in fa-bench's CSV schema.

    python3 plots/peers.py --csv plots/h200_peers.csv   # plots/plot.py reads plots/h200_*.csv

The peers are PyTorch's scaled_dot_product_attention backends (lesson column peer_fa2, peer_cudnn,
peer_efficient) and a naive matmul -> softmax -> matmul (peer_naive: lesson 01's algorithm). The
rest is fa-bench's (tools/fa_bench.cpp), so that a peer's row and a lesson's row are the same measurement:
the grid (batch * seqlen = --tokens, heads * head_dim = --width), the check of sampled rows of two
heads against an fp64 reference on the same rounded inputs with the course's tolerances, the L2
flushed before every repetition, two warm-up runs, the median of CUDA-event times, and 4 * head_dim
FLOPs per visible (query, key) pair. The ceiling columns stay empty: a peer is a bar, not a lesson
measured against a roof. A backend that cannot run a case (not built, not supported, out of
memory) gets a "skipped: ..." row. Exit 1 if any case is WRONG. Needs PyTorch 2.3 or later.

--rope eager|compiled times RoPE then attention (lesson 09's experiment): Q and K are rotated by
PyTorch (eager: the usual few elementwise ops; compiled: the same function through torch.compile,
one fused kernel), then the backend runs on the rotated tensors; the lesson column gets a
"_rope_eager" or "_rope_compiled" suffix and the check rotates in fp64 first.

--bwd times the backward (lessons 10-11's peers): the forward runs once, then each timed call is
torch.autograd.grad of the output with a random dO (the backend's backward kernels alone: no
gradient accumulation into .grad). The lesson column gets a "_bwd" suffix; dQ, dK and dV of head
(0, 0) are checked against fp64 autograd on the GPU with the course's gradient tolerance
(runtime/compare.cpp: 4u max|ref| + 2u |ref|); TFLOP/s count 2.5x the forward's FLOPs.
"""
import argparse
import contextlib
import math
import os
import random
import sys
import time
import warnings

LESSON = {"flash": "peer_fa2", "cudnn": "peer_cudnn", "efficient": "peer_efficient", "naive": "peer_naive"}
TOLERANCE = {"fp16": (1e-3, 2.0**-10), "bf16": (8e-3, 2.0**-7)}  # (atol, rtol): runtime/compare.cpp's
HEADER = ("gpu,lesson,dtype,head_dim,causal,batch,heads,seqlen,ms,tflops,ceiling_name,ceiling_tflops,"
          "pct_of_ceiling,max_abs_err,status")


def parse():
    ints = lambda s: [int(x) for x in s.split(",") if x]
    names = lambda s: [x for x in s.split(",") if x]
    ap = argparse.ArgumentParser(description="PyTorch's attention backends on fa-bench's grid, "
                                 "appended to a CSV in fa-bench's schema.")
    ap.add_argument("--csv", required=True, help="CSV to append to (the header is written when it is new)")
    ap.add_argument("--backends", type=names, default=list(LESSON),
                    help="default flash,cudnn,efficient,naive")
    ap.add_argument("--seqlens", type=ints, default=[512, 1024, 2048, 4096, 8192, 16384],
                    help="default 512,1024,2048,4096,8192,16384")
    ap.add_argument("--head-dims", type=ints, default=[64, 128], help="default 64,128")
    ap.add_argument("--causal", type=ints, default=[0, 1], help="default 0,1")
    ap.add_argument("--dtypes", type=names, default=["fp16"], help="fp16 and/or bf16 (default fp16)")
    ap.add_argument("--tokens", type=int, default=16384, help="batch * seqlen (default 16384)")
    ap.add_argument("--width", type=int, default=2048, help="heads * head_dim (default 2048)")
    ap.add_argument("--reps", type=int, default=20, help="timed repetitions per case (default 20)")
    ap.add_argument("--max-seconds", type=float, default=20, help="per case: stop timing after this long, "
                    "with at least 3 timed runs (default 20)")
    ap.add_argument("--pause-ms", type=int, default=0, help="per case: the GPU idle this long before its timed "
                    "runs, as fa-bench's --pause-ms (default 0)")
    ap.add_argument("--rope", choices=["eager", "compiled"], help="rotate Q and K with RoPE before attention")
    ap.add_argument("--bwd", action="store_true", help="time the backward (2.5x the forward's FLOPs)")
    ap.add_argument("--gqa", type=int, default=1, help="query heads per K/V head (fa-bench's --gqa; default 1): "
                    "K and V get heads / G heads, SDPA's enable_gqa shares them; the lesson column gets _gqaG")
    a = ap.parse_args()
    for b in a.backends:
        if b not in LESSON:
            ap.error(f"--backends takes {','.join(LESSON)}, got {b}")
    for t in a.dtypes:
        if t not in TOLERANCE:
            ap.error(f"--dtypes takes fp16 and/or bf16, got {t}")
    return a


args = parse()  # before importing torch, so that --help works without it
try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
except ImportError as e:
    sys.exit(f"plots/peers.py: needs PyTorch 2.3 or later with CUDA ({e})")

DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}


def attention(backend, q, k, v, causal, scale, qk=None):
    """The call to time, as a function of nothing. qk, if given, is called inside it for the (q, k)
    to attend with (RoPE's rotation, timed with the attention)."""
    qk = qk or (lambda: (q, k))
    if backend == "naive" and args.gqa > 1:
        raise RuntimeError("the naive backend takes no --gqa")
    if backend == "naive":
        # Lesson 01 in PyTorch: S and P written to and read back from HBM. S is kept in fp32, as
        # there: rounded to 16 bits it moves P by more than the course tolerance allows (a few rows
        # in 10^4 at head_dim 128). TF32 tensor cores compute it exactly, since fp16 and bf16 values
        # are TF32 values. The softmax runs in fp32, P is stored in the dtype for the PV matmul.
        torch.backends.cuda.matmul.allow_tf32 = True
        n = q.shape[-2]
        mask = torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1) if causal else None

        def naive():
            q1, k1 = qk()
            s = torch.matmul(q1.float(), k1.float().transpose(-2, -1)).mul_(scale)
            if mask is not None:
                s.masked_fill_(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)
            del s  # S (34 GB at 16k, head_dim 64) is gone before P is cast
            return torch.matmul(p.to(q.dtype), v)
        return naive, None
    which = dict(flash="FLASH_ATTENTION", cudnn="CUDNN_ATTENTION", efficient="EFFICIENT_ATTENTION")[backend]
    if not hasattr(SDPBackend, which):
        raise RuntimeError(f"this PyTorch ({torch.__version__}) has no SDPBackend.{which}")
    # The context pins the backend (no silent fallback to another one); entered once, outside the
    # timed region. seqlen_q == seqlen_k, so is_causal's top-left mask is also the bottom-right one.
    gqa = dict(enable_gqa=True) if args.gqa > 1 else {}  # K/V heads shared by groups of query heads
    return (lambda: F.scaled_dot_product_attention(*qk(), v, is_causal=bool(causal), scale=scale, **gqa)), \
        sdpa_kernel(getattr(SDPBackend, which))


def rope_tables(n, d, dev):
    """cos and sin of position * theta_i (fp64, stored fp32), as fa::rope_tables: (n, d / 2)."""
    theta = 10000.0 ** (-2.0 * torch.arange(d // 2, dtype=torch.float64) / d)
    angle = torch.arange(n, dtype=torch.float64)[:, None] * theta[None, :]
    return angle.cos().float().to(dev), angle.sin().float().to(dev)


def rotate(x, cos, sin):
    """Half-split RoPE of x (..., n, d) in fp32, rounded to x's dtype once."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h].float(), x[..., h:].float()
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)


def rotate_both(q, k, cos, sin):
    return rotate(q, cos, sin), rotate(k, cos, sin)


def check_head(o, q, k, v, b, h, causal, scale, dtype):
    """(max abs error, "" or what is wrong) for sampled rows of head (b, h), against fp64 on the CPU."""
    n = q.shape[-2]
    rows = sorted({0, 1, n // 2, n - 1} | set(random.Random(n).sample(range(n), min(n, 12))))
    qh = q[b, h].double().cpu()
    kh, vh = (x[b, h // args.gqa].double().cpu() for x in (k, v))  # the query head's K/V head
    if args.rope:  # rotated in fp64 and rounded to the dtype, as the course's reference does
        cos, sin = (t.double() for t in rope_tables(n, q.shape[-1], "cpu"))
        qh, kh = (rotate(x, cos, sin).to(DTYPE[dtype]).double() for x in (qh, kh))
    r = torch.tensor(rows)
    s = qh[r] @ kh.T * scale
    if causal:
        s.masked_fill_(torch.arange(n)[None, :] > r[:, None], float("-inf"))
    want = torch.softmax(s, dim=-1) @ vh
    got = o[b, h][r.to(o.device)].double().cpu()
    err = (got - want).abs()
    atol, rtol = TOLERANCE[dtype]
    allowed = atol + rtol * want.abs()
    bad = ~(err <= allowed)  # NaN is bad
    max_err = err.max().item()
    if not bad.any():
        return max_err, ""
    i = int(torch.nan_to_num(err / allowed, nan=math.inf).argmax())
    row, d = divmod(i, err.shape[1])
    return max_err, (f"head ({b}, {h}): {int(bad.sum())} of {bad.numel()} sampled O values off; worst at row "
                     f"{rows[row]} d {d}: got {got[row, d].item():.6g} want {want[row, d].item():.6g} "
                     f"(allowed {allowed[row, d].item():.3g})")


UNIT = {"fp16": 2.0**-11, "bf16": 2.0**-8}  # u, as runtime/compare.cpp's gradient_tolerance


def check_gradients(grads, q, k, v, dout, causal, scale, dtype):
    """(max abs error, "" or what is wrong) for dQ, dK, dV of head (0, 0) against fp64 autograd. With
    --gqa G, K/V head 0's gradients sum over query heads 0 .. G - 1, and those heads' dQ are checked."""
    k64, v64 = (x[0, 0].double().requires_grad_() for x in (k, v))
    dq, dk, dv = [], 0, 0
    for j in range(args.gqa):  # one query head at a time: S of 16k x 16k in fp64 is 2 GB
        q64 = q[0, j].double().requires_grad_()
        s = q64 @ k64.T * scale
        if causal:
            n = q.shape[-2]
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu_(1), float("-inf"))
        o = torch.softmax(s, dim=-1) @ v64
        gq, gk, gv = torch.autograd.grad(o, (q64, k64, v64), dout[0, j].double())
        dq.append(gq)
        dk, dv = dk + gk, dv + gv
        del s, o
    want = (torch.stack(dq), dk, dv)
    got = (grads[0][0, :args.gqa], grads[1][0, 0], grads[2][0, 0])
    u, worst, bad = UNIT[dtype], 0.0, []
    for name, g, w in zip(("dQ", "dK", "dV"), got, want):
        err = (g.double() - w).abs()
        allowed = 4 * u * w.abs().max() + 2 * u * w.abs()
        worst = max(worst, err.max().item())
        nbad = int((~(err <= allowed)).sum())
        if nbad:
            bad.append(f"{name}: {nbad} of {err.numel()} values off (max error {err.max().item():.3g})")
    return worst, "; ".join(bad)


def time_ms(fn, flush):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if args.pause_ms > 0:
        torch.cuda.synchronize()
        time.sleep(args.pause_ms / 1000)
    ms, wall0 = [], time.monotonic()
    for rep in range(args.reps + 2):
        flush.zero_()  # a cold L2 for every run, as fa-bench
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if rep >= 2:  # two warm-up runs
            ms.append(start.elapsed_time(stop))
        if rep >= 4 and time.monotonic() - wall0 > args.max_seconds:
            break
    return sorted(ms)[len(ms) // 2]  # fa-bench's median (the upper one for an even count)


def run_case(backend, dtype, d, causal, n, flush):
    lesson = LESSON[backend] + (f"_rope_{args.rope}" if args.rope else "") + (f"_gqa{args.gqa}" if args.gqa > 1 else "") + \
        ("_bwd" if args.bwd else "")
    row = dict(lesson=lesson, dtype=dtype, head_dim=d, causal=causal, batch=max(1, args.tokens // n),
               heads=args.width // d, seqlen=n, ms=None, tflops=None, max_abs_err=None, status="ok")
    caught = []
    try:
        # The same inputs for every backend at a shape: the peers are compared on the same numbers.
        g = torch.Generator(device="cuda").manual_seed(n * 1000 + d)
        shape = (row["batch"], row["heads"], n, d)
        if row["heads"] % args.gqa:
            raise ValueError(f"--gqa {args.gqa} does not divide the {row['heads']} heads")
        kv_shape = (row["batch"], row["heads"] // args.gqa, n, d)
        q, k, v = (torch.randn(sh, generator=g, device="cuda", dtype=DTYPE[dtype]) for sh in (shape, kv_shape, kv_shape))
        scale = 1.0 / math.sqrt(d)
        qk = None
        if args.rope:  # the timed call rotates Q and K first, then attends to the rotated ones
            cos, sin = rope_tables(n, d, "cuda")
            rot = torch.compile(rotate_both) if args.rope == "compiled" else rotate_both
            qk = lambda: rot(q, k, cos, sin)
        fn, ctx = attention(backend, q, k, v, causal, scale, qk)
        with ctx or contextlib.nullcontext():
            # A backend that cannot run a case says why in warnings and raises "No available kernel".
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                o = fn()
                torch.cuda.synchronize()
            errs = [check_head(o, q, k, v, b, h, causal, scale, dtype)
                    for b, h in ((0, 0), (row["batch"] - 1, row["heads"] - 1))]
            worst = [e for e, _ in errs]
            row["max_abs_err"] = math.nan if any(map(math.isnan, worst)) else max(worst)
            bad = [why for _, why in errs if why]
            if bad:
                row["status"] = "WRONG: " + bad[0]
                return row
            if args.bwd:
                del o
                for x in (q, k, v):
                    x.requires_grad_()
                out = fn()  # the forward once, with its graph; each timed call is its backward
                dout = torch.randn(shape, generator=g, device="cuda", dtype=DTYPE[dtype])
                bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                grads = bwd()
                torch.cuda.synchronize()
                err, why = check_gradients(grads, q.detach(), k.detach(), v.detach(), dout, causal, scale, dtype)
                row["max_abs_err"] = err
                if why:
                    row["status"] = "WRONG: " + why
                    return row
                del grads
                row["ms"] = time_ms(bwd, flush)
            else:
                row["ms"] = time_ms(fn, flush)
        pairs = n * n if not causal else n * (n + 1) // 2  # the course counts visible pairs only
        row["tflops"] = (2.5 if args.bwd else 1.0) * 4.0 * d * pairs * row["batch"] * row["heads"] / (row["ms"] * 1e-3) / 1e12
    except Exception as e:  # not supported, not built, out of memory: a row that says so
        why = [str(w.message).strip() for w in caught if not str(w.message).strip().endswith("because:")]
        reason = (why + str(e).strip().splitlines() + [type(e).__name__])[0]
        row.update(ms=None, tflops=None, max_abs_err=None, status="skipped: " + reason[:160])
    return row


def print_row(r):
    fmt = lambda x, f: "-" if x is None else format(x, f)
    bh = f"{r['batch']}x{r['heads']}"
    ms, tflops, err = fmt(r["ms"], ".3f"), fmt(r["tflops"], ".2f"), fmt(r["max_abs_err"], ".2e")
    print(f"{r['lesson']:<18} {r['dtype']:<5} {r['head_dim']:>4} {r['causal']:>6} {bh:>9} {r['seqlen']:>6} "
          f"{ms:>10} {tflops:>9} {err:>9}  {r['status']}", flush=True)


def csv_row(gpu, r):
    cell = lambda x: "" if x is None else f"{x:.6g}"
    status = r["status"].replace(",", ";").replace("\n", " ")
    # The ceiling columns (name, TFLOP/s, %) stay empty: the peers are not measured against one.
    return (f"{gpu},{r['lesson']},{r['dtype']},{r['head_dim']},{r['causal']},{r['batch']},{r['heads']},"
            f"{r['seqlen']},{cell(r['ms'])},{cell(r['tflops'])},,,,{cell(r['max_abs_err'])},{status}")


def main():
    if not torch.cuda.is_available():
        print("plots/peers.py: no usable CUDA GPU; the peers' timings need one.")
        return 2
    props = torch.cuda.get_device_properties(0)
    gpu = torch.cuda.get_device_name(0).replace(",", ";")
    l2 = getattr(props, "L2_cache_size", 0) or 0
    flush = torch.empty(max(4 * l2, 64 << 20), dtype=torch.uint8, device="cuda")
    print(f"peers on {gpu} (PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}): L2 flushed "
          f"({flush.numel() >> 20} MB) before every run; medians of CUDA-event times")
    print(f"{'lesson':<16} {'dtype':<5} {'d':>4} {'causal':>6} {'batch x h':>9} {'N':>6} {'ms':>10} "
          f"{'TFLOP/s':>9} {'max err':>9}  status")
    fresh = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
    wrong = 0
    with open(args.csv, "a") as csv:
        if fresh:
            csv.write(HEADER + "\n")
        for backend in args.backends:
            for dtype in args.dtypes:
                for d in args.head_dims:
                    for causal in args.causal:
                        for n in args.seqlens:
                            r = run_case(backend, dtype, d, causal, n, flush)
                            torch.cuda.empty_cache()  # this case's tensors (or an OOM's) back to the GPU
                            wrong += r["status"].startswith("WRONG")
                            print_row(r)
                            csv.write(csv_row(gpu, r) + "\n")
                            csv.flush()
    if wrong:
        print(f"{wrong} case(s) WRONG: see the status column")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
