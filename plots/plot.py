#!/usr/bin/env python3
"""Turns fa-bench CSVs (and plots/peers.py's, same schema) into figures and results tables.

    python3 plots/plot.py              # the course's CSVs (plots/h200_*.csv): writes one figure per
                                       # (head_dim, causal), plots/<gpu>_d128_causal.png and so on,
                                       # and rewrites README.md's tables
    python3 plots/plot.py mine.csv     # your CSVs: writes mine_d128_causal.png and so on beside the
                                       # first one and prints the tables; README.md is left alone
    python3 plots/plot.py --rope plots/lesson09_rope_h200.csv
                                       # lesson 09's experiment (experiment.sh's CSV): time vs seqlen
                                       # per variant and head dim, beside the CSV as .png, and the
                                       # table of milliseconds for the lesson's README
    python3 plots/plot.py --phases plots/lesson14_timeline_h200.csv [trace.csv ...]
                                       # lesson 14's traced tile: one bar per trace, its phases in
                                       # order, products (tensor pipe fed) solid, the rest hatched;
                                       # a raw trace (fa-bench --bwd --trace FILE) is reduced to one
                                       # tile's phases first, and its rows printed
    python3 plots/plot.py --timeline trace.csv [more.csv ...]
                                       # lesson 13's traces (fa-bench --trace FILE): one timeline figure
                                       # per CSV, beside it as .png, and the table of cycles per key
                                       # tile by phase (README, "The step table")

The tables between <!-- results:begin --> and <!-- results:end --> in README.md are generated here,
never typed. Where a CSV holds a case twice, the later row wins. Only fp16 rows are drawn and
tabled. Each row carries its own ceiling (FP32 FMA for the CUDA-core lessons, a tensor-core peak
for the later ones); the peers' rows (lesson peer_*) carry none. Backward rows (lessons 10, 11 and 14, and
the peers' peer_*_bwd, from fa-bench --bwd and peers.py --bwd) get their own figures (..._bwd_d128_
causal.png) and tables. Needs matplotlib for the figures.
"""
import csv
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = {"peer_fa2": "PyTorch FA2", "peer_cudnn": "cuDNN", "peer_efficient": "mem-efficient",
         "peer_naive": "naive PyTorch"}
PEER_STYLE = {"peer_fa2": ("black", "s"), "peer_cudnn": ("dimgray", "D"), "peer_efficient": ("gray", "^"),
              "peer_naive": ("darkgray", "v")}


def load_rows(paths):
    latest = {}  # one row per case: the later one wins
    for path in paths:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                key = (r["gpu"], r["lesson"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
                latest[key] = r
    if not latest:
        sys.exit("plots/plot.py: no rows in " + ", ".join(paths) + " (run fa-bench --csv FILE first)")
    return list(latest.values())


def slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def num(r, key):
    """The column as a float, None where it is empty (the peers' ceiling columns)."""
    try:
        return float(r[key])
    except (KeyError, TypeError, ValueError):
        return None


def label(lesson):
    return PEERS.get(lesson, lesson)


def lesson_number(lesson):
    m = re.match(r"(\d+)_", lesson)
    return int(m.group(1)) if m else None


def ordered(lessons):
    """The lessons by name, then the peers in PEERS' order."""
    others = sorted(l for l in lessons if l.startswith("peer_") and l not in PEERS)
    return sorted(l for l in lessons if not l.startswith("peer_")) + [p for p in PEERS if p in lessons] + others


class Index:
    """The fp16 rows by (lesson, head_dim, causal, seqlen)."""

    def __init__(self, rows):
        self.rows = [r for r in rows if r["dtype"] == "fp16"]
        self.by = {(r["lesson"], int(r["head_dim"]), int(r["causal"]), int(r["seqlen"])): r
                   for r in self.rows}
        self.lessons = ordered({r["lesson"] for r in self.rows})

    def get(self, lesson, d, causal, n):
        return self.by.get((lesson, d, causal, n))

    def tflops(self, lesson, d, causal, n):
        r = self.get(lesson, d, causal, n)
        return num(r, "tflops") if r is not None and r["status"] == "ok" else None

    def ceilings(self):
        """{name: TFLOP/s}; a ceiling measured in several runs shows its highest value."""
        out = {}
        for r in self.rows:
            value = num(r, "ceiling_tflops")
            if r["ceiling_name"] and value:
                out[r["ceiling_name"]] = max(value, out.get(r["ceiling_name"], 0))
        return dict(sorted(out.items(), key=lambda kv: kv[1]))


def is_backward(lesson):
    """Backward rows: the backward-only lessons (10, 11, 14) and the peers' --bwd rows (lesson name + _bwd)."""
    return lesson.endswith("_bwd") or lesson_number(lesson) in (10, 11, 14)


def split(rows):
    """(forward rows, backward rows); the peers' backward rows lose their _bwd suffix, so that the
    backward figures and tables name and style them as the forward ones do."""
    fwd, bwd = [], []
    for r in rows:
        if is_backward(r["lesson"]):
            r = dict(r, lesson=r["lesson"][:-4] if r["lesson"].endswith("_bwd") else r["lesson"])
            bwd.append(r)
        else:
            fwd.append(r)
    return fwd, bwd


def plot(idx, gpu, prefix, what="Forward"):
    """One figure per (head_dim, causal): {(d, causal): path}."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ceilings = idx.ceilings()
    lessons = [l for l in idx.lessons if not l.startswith("peer_")]
    out = {}
    shapes = {(int(r["head_dim"]), int(r["causal"])) for r in idx.rows if r["status"] == "ok"}
    for d, causal in sorted(shapes):
        fig, ax = plt.subplots(figsize=(10, 6))
        seqlens = set()
        for lesson in idx.lessons:
            pts = sorted((n, t) for (l, dd, c, n) in idx.by if l == lesson and dd == d and c == causal
                         for t in [idx.tflops(l, dd, c, n)] if t)
            if not pts:
                continue
            seqlens |= {n for n, _ in pts}
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            if lesson.startswith("peer_"):  # the bars to reach: black and grey, dashed
                color, marker = PEER_STYLE.get(lesson, ("silver", "x"))
                ax.plot(xs, ys, linestyle="--", color=color, marker=marker, markerfacecolor="white",
                        linewidth=1.5, label=label(lesson))
            else:
                i = lessons.index(lesson)  # a lesson keeps its colour in every figure
                # tab10 without its grey (C7): grey is the peers' colour.
                ax.plot(xs, ys, marker="os^Dv"[i // 9 % 5], color=f"C{[0, 1, 2, 3, 4, 5, 6, 8, 9][i % 9]}", label=lesson)
        for j, (name, value) in enumerate(ceilings.items()):  # thin red, no markers; labels alternate sides
            ax.axhline(value, color="red", linestyle="--", linewidth=0.8,
                       label=f"{name} ceiling ({value:.0f})")
            ax.annotate(f"{name} {value:.0f}", xy=(0.01 + 0.98 * (j % 2), value),
                        xycoords=("axes fraction", "data"), ha="right" if j % 2 else "left", va="bottom",
                        fontsize=8, color="red")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(seqlens))
        ax.set_xticklabels([f"{n // 1024}k" if n >= 1024 else str(n) for n in sorted(seqlens)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N (batch x N = 16k tokens)")
        ax.set_ylabel("TFLOP/s (FLOPs = 4 x head_dim x visible pairs" + (", x 2.5)" if what == "Backward" else ")"))
        ax.set_title(f"{what} on {gpu}, fp16, head_dim {d}, {'causal' if causal else 'non-causal'}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        path = f"{prefix}_d{d}_{'causal' if causal else 'noncausal'}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out[(d, causal)] = path
    return out


def cell(r):
    if r is None:
        return ""
    if r["status"] != "ok":
        return "WRONG" if r["status"].startswith(("WRONG", "ERROR")) else "skipped"
    tflops, pct, ceiling = num(r, "tflops"), num(r, "pct_of_ceiling"), num(r, "ceiling_tflops")
    if pct is None and ceiling:
        pct = 100 * tflops / ceiling
    return f"{tflops:.2f}" + (f" ({pct:.0f}%)" if pct is not None else "")


def table(idx, gpu, source, what="Forward"):
    seqlens = [1024, 4096, 16384]
    lines = [f"{what}" + (" (FLOPs: 2.5x the forward's)" if what == "Backward" else "") + f", fp16, head_dim 128, 16k tokens x 2048 wide, on {gpu}: TFLOP/s (% of the row's "
             "own ceiling, named in the last column: the measured FP32 FMA peak for the CUDA-core lessons, "
             "the tensor-core peak for the later ones; PyTorch's backends have none). Generated by "
             f"`plots/plot.py` from {source}.", "",
             "| lesson | " + " | ".join(f"N={n // 1024}k" for n in seqlens) + " | " +
             " | ".join(f"N={n // 1024}k causal" for n in seqlens) + " | ceiling |",
             "|---" * (2 + 2 * len(seqlens)) + "|"]
    for lesson in idx.lessons:
        cells = [cell(idx.get(lesson, 128, causal, n)) for causal in (0, 1) for n in seqlens]
        names = {r["ceiling_name"] for r in idx.rows if r["lesson"] == lesson and r["ceiling_name"]}
        lines.append(f"| {label(lesson)} | " + " | ".join(cells) + " | " + ", ".join(sorted(names)) + " |")
    return lines


def ratio_table(idx):
    """Lessons 07 on (and cuDNN) over PyTorch FA2 at the same shape, or [] without FA2's rows."""
    if "peer_fa2" not in idx.lessons:
        return []
    rows = [(l, l) for l in idx.lessons if (lesson_number(l) or 0) >= 7]
    if "peer_cudnn" in idx.lessons:
        rows.append(("cuDNN / FA2", "peer_cudnn"))
    if not rows:
        return []
    cols = [(d, causal, n) for d in (64, 128) for causal in (0, 1) for n in (4096, 8192, 16384)]
    lines = ["Ratio to PyTorch FA2: each row's TFLOP/s over PyTorch FA2's at the same shape (fp16, 16k "
             "tokens x 2048 wide; above 1.00x is faster). Columns: head_dim, causal or not, N.", "",
             "| lesson | " + " | ".join(f"d{d}{' causal' if c else ''} {n // 1024}k" for d, c, n in cols)
             + " |",
             "|---" * (1 + len(cols)) + "|"]
    for name, lesson in rows:
        cells = []
        for d, causal, n in cols:
            mine, fa2 = idx.tflops(lesson, d, causal, n), idx.tflops("peer_fa2", d, causal, n)
            cells.append(f"{mine / fa2:.2f}x" if mine and fa2 else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def images(figures, rel_to):
    """The figures as a markdown grid: head_dim down, non-causal and causal across."""
    if not figures:
        return []
    lines = ["| | non-causal | causal |", "|---|---|---|"]
    for d in sorted({d for d, _ in figures}):
        cells = []
        for causal in (0, 1):
            path = figures.get((d, causal))
            what = f"TFLOP/s against N, head_dim {d}, {'causal' if causal else 'non-causal'}"
            cells.append(f"![{what}]({os.path.relpath(path, rel_to)})" if path else "")
        lines.append(f"| head_dim {d} | " + " | ".join(cells) + " |")
    return lines


def report(idx, gpu, source, figures, rel_to, what="Forward"):
    lines = table(idx, gpu, source, what)
    ratios = ratio_table(idx)
    if ratios:
        lines += [""] + ratios
    pics = images(figures, rel_to)
    if pics:
        lines += [""] + pics
    return "\n".join(lines)


ROPE_ORDER = ["09_attention", "09_fused", "09_outside", "09_fused_small_tiles", "peer_fa2_rope_eager",
              "peer_fa2_rope_compiled"]


def rope(path):
    """Lesson 09: milliseconds per variant (causal, fp16) by seqlen, a figure per head dim."""
    rows = [r for r in load_rows([path]) if r["dtype"] == "fp16" and r["status"] == "ok"]
    ms = {(r["lesson"], int(r["head_dim"]), int(r["seqlen"])): float(r["ms"]) for r in rows}
    variants = [v for v in ROPE_ORDER if any(k[0] == v for k in ms)]
    dims = sorted({k[1] for k in ms})
    seqlens = sorted({k[2] for k in ms})
    out = []
    for d in dims:
        out.append(f"\nhead_dim {d}, causal, fp16, ms (median; 16k tokens x 2048 wide):\n")
        out.append("| variant | " + " | ".join(str(n) for n in seqlens) + " |")
        out.append("|---|" + "---|" * len(seqlens))
        for v in variants:
            out.append(f"| {v} | " + " | ".join(f"{ms[(v, d, n)]:.3f}" if (v, d, n) in ms else "-" for n in seqlens) + " |")
        if all((v, d, n) in ms for v in ("09_fused", "09_outside") for n in seqlens):
            out.append("| fused / outside | " + " | ".join(f"{ms[('09_fused', d, n)] / ms[('09_outside', d, n)]:.2f}x"
                                                        for n in seqlens) + " |")
    print("\n".join(out))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots/plot.py: no matplotlib, so no figure (pip install matplotlib)")
        return
    fig, axes = plt.subplots(1, len(dims), figsize=(6 * len(dims), 4.5), squeeze=False)
    for ax, d in zip(axes[0], dims):
        for v in variants:
            xs = [n for n in seqlens if (v, d, n) in ms]
            ax.plot(xs, [ms[(v, d, n)] for n in xs], marker="o", label=v,
                    linestyle="--" if v.startswith("peer") else "-")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("seqlen (batch x seqlen = 16k tokens)")
        ax.set_ylabel("ms (median)")
        ax.set_title(f"RoPE + causal attention, head_dim {d}, fp16")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = os.path.splitext(path)[0] + ".png"
    fig.savefig(png, dpi=110)
    print(f"wrote {png}")


# ---- Lesson 13's timelines (fa-bench --trace CSVs: step,sm,block,role,clock,phase,key) --------
PHASE_STYLE = {  # colour, and the row's label in the legend
    "setup": ("black", "set-up"), "rendezvous": ("silver", "rendezvous"), "wait_q": ("firebrick", "wait Q"),
    "wait_kv": ("red", "wait K/V"), "wait_turn": ("plum", "wait turn"), "issue": ("navy", "issue wgmma"),
    "wait_s": ("cornflowerblue", "wait S (tensor core)"), "softmax": ("darkorange", "softmax"),
    "wait_pv": ("lightsteelblue", "wait P V (tensor core)"), "rescale": ("gold", "rescale O, pack P"),
    "epilogue": ("green", "epilogue"), "copy_q": ("darkgreen", "copy Q"), "wait_empty": ("gainsboro", "wait empty stage"),
    "copy_kv": ("mediumseagreen", "copy K/V"),
}
ROLES = ("producer", "warpgroup 1", "warpgroup 2")


def trace_lanes(path):
    """{(sm, role): [(clock, phase, key), ...]} over the blocks of each SM, in clock order."""
    lanes, step = {}, None
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            step = r["step"]
            lanes.setdefault((int(r["sm"]), int(r["role"])), []).append((int(r["clock"]), r["phase"], int(r["key"])))
    if not lanes:
        sys.exit(f"plots/plot.py: no trace records in {path} (run fa-bench --trace FILE)")
    for ev in lanes.values():
        ev.sort()
    return step, lanes


def intervals(ev):
    """(start, end, phase, key) for each record: a phase lasts until the lane's next record."""
    return [(c, ev[i + 1][0], p, k) for i, (c, p, k) in enumerate(ev[:-1]) if p != "exit"]


def per_key_tile(lanes):
    """Cycles per key tile by consumer phase, over every consumer lane: {phase: cycles}, key tiles."""
    total, tiles = {}, 0
    for (sm, role), ev in lanes.items():
        if role == 0:
            continue
        tiles += sum(1 for _, p, _ in ev if p == "softmax")
        for a, b, p, _ in intervals(ev):
            total[p] = total.get(p, 0) + (b - a)
    return {p: t / max(tiles, 1) for p, t in total.items()}, tiles


def windows(lanes):
    """Two windows of warpgroup 1's records on the first SM: mid-tile (four key tiles from the
    middle of its second work tile, or its first if it has one) and the boundary into its next work tile."""
    sm = min(s for s, _ in lanes)
    ev = lanes[(sm, 1)]
    starts = [i for i, (_, p, _) in enumerate(ev) if p == "wait_q"]
    t = starts[1] if len(starts) > 2 else starts[0]
    end = starts[starts.index(t) + 1] if starts.index(t) + 1 < len(starts) else len(ev) - 1
    soft = [i for i in range(t, end) if ev[i][1] == "softmax"]
    mid = soft[len(soft) // 2:len(soft) // 2 + 5]
    w_mid = (ev[mid[0]][0], ev[mid[-1]][0]) if len(mid) > 1 else (ev[t][0], ev[end][0])
    nxt = [i for i in range(end, len(ev)) if ev[i][1] == "softmax"]
    a = ev[soft[-3]][0] if len(soft) >= 3 else ev[t][0]
    b = ev[nxt[2]][0] if len(nxt) > 2 else ev[-1][0]
    return sm, w_mid, (a, b)


def timeline(paths):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    rows = []  # for the table: (path, cycles per key tile by phase, key tiles)
    for path in paths:
        step, lanes = trace_lanes(path)
        rows.append((path,) + per_key_tile(lanes))
        sm, w_mid, w_edge = windows(lanes)
        fig, axes = plt.subplots(2, 1, figsize=(12, 4.6))
        used = set()
        for ax, (a, b), title in ((axes[0], w_mid, "inside a work tile"), (axes[1], w_edge, "from one work tile to the next")):
            for role in range(3):
                for s0, s1, p, _ in intervals(lanes.get((sm, role), [])):
                    if s1 < a or s0 > b or p not in PHASE_STYLE:
                        continue
                    ax.broken_barh([((s0 - a) / 1e3, max(s1 - s0, 1) / 1e3)], (2 - role - 0.4, 0.8),
                                   facecolors=PHASE_STYLE[p][0], edgecolor="none")
                    used.add(p)
            ax.set_yticks([2, 1, 0], ROLES)
            ax.set_xlim(0, (b - a) / 1e3)
            ax.set_title(f"step {step}, SM {sm}: {title}", fontsize=10, loc="left")
        axes[1].set_xlabel("SM clock, thousands of cycles (each row: thread 0 of the warpgroup)")
        order = [p for p in PHASE_STYLE if p in used]
        fig.legend([Patch(color=PHASE_STYLE[p][0]) for p in order], [PHASE_STYLE[p][1] for p in order],
                   loc="center right", fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0, 0.83, 1))
        out = os.path.splitext(path)[0] + ".png"
        fig.savefig(out, dpi=110)
        plt.close(fig)
        print(f"wrote {out}")
    print("\nCycles per key tile, consumer warpgroups (thread 0 of each), by phase:\n")
    phases = [p for p in PHASE_STYLE if any(p in r[1] for r in rows)]
    print("| trace | key tiles | " + " | ".join(PHASE_STYLE[p][1] for p in phases) + " | all |")
    print("|---|--:|" + "--:|" * (len(phases) + 1))
    for path, cyc, tiles in rows:
        print(f"| {os.path.basename(path)} | {tiles} | " + " | ".join(f"{cyc.get(p, 0):.0f}" for p in phases)
              + f" | {sum(cyc.values()):.0f} |")


# Lesson 14's trace phases (solutions/14_hopper_backward/trace.hpp) as the README's table names
# them, and whether the tensor pipe is fed during each (a product issued or running).
L14_PHASES = {"wait_tile": ("wait for the tile", 0), "issue_s_dp": ("issue S^T and dP^T", 1),
              "wait_s": ("wait for S^T", 0), "exp": ("exponentials", 0), "wait_dp": ("wait for dP^T", 0),
              "ds": ("dS^T and packing", 0), "issue_dv_store_ds": ("issue dV; store dS^T", 1),
              "barrier": ("proxy fence and barrier", 0), "issue_dq_dk": ("issue dQ and dK", 1),
              "wait_dv_dq": ("wait for dV and dQ", 0), "dq_out": ("dQ share out", 1), "wait_dk": ("wait for dK", 1)}


def reduce_trace14(path):
    """A lesson 14 trace (fa-bench --bwd --trace: head_dim,sm,block,role,clock,phase,key) as one tile's
    phases: thread 0 of consumer warpgroup 1 (role 1) in every traced block, each tile from its
    wait_tile record to the next tile's (or the epilogue), cycles averaged over the tiles."""
    lanes, d = {}, "?"
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            d = r["head_dim"]
            if r["role"] == "1":
                lanes.setdefault((r["sm"], r["block"]), []).append((int(r["clock"]), r["phase"]))
    total, tiles = {}, 0
    for ev in lanes.values():
        ev.sort()
        inside = False
        for (c0, p), (c1, _) in zip(ev, ev[1:]):
            if p == "wait_tile":
                inside, tiles = True, tiles + 1
            elif p in ("epilogue", "exit"):
                inside = False
            if inside and p in L14_PHASES:
                total[p] = total.get(p, 0) + (c1 - c0)
    if tiles == 0:
        sys.exit(f"plots/plot.py: no consumer tiles in {path} (run fa-bench --bwd --trace FILE)")
    label = f"{os.path.splitext(os.path.basename(path))[0]}, d {d}"
    return [{"trace": label, "phase": L14_PHASES[p][0], "cycles": f"{total.get(p, 0) / tiles:.0f}",
             "tensor": str(L14_PHASES[p][1])} for p in L14_PHASES], tiles


def phases(paths):
    """Lesson 14's traced tile (README, section 8), drawn as one horizontal bar per trace, beside
    the first CSV as .png. A CSV is either the table (trace, phase, cycles, tensor: 1 where the
    tensor pipe is fed) or a raw trace of fa-bench --bwd --trace, reduced here to one tile's phases
    (the rows are printed in the table's form, to add to it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = []
    for path in paths:
        with open(path, newline="") as f:
            first = f.readline()
        if first.startswith("head_dim,"):
            reduced, tiles = reduce_trace14(path)
            print(f"{path}: {tiles} tiles of consumer warpgroup 1; one tile's phases:")
            for r in reduced:
                print(f'"{r["trace"]}",{r["phase"]},{r["cycles"]},{r["tensor"]}')
            rows += reduced
        else:
            with open(path, newline="") as f:
                rows += list(csv.DictReader(f))
    traces = list(dict.fromkeys(r["trace"] for r in rows))
    names = list(dict.fromkeys(r["phase"] for r in rows))
    colors = plt.get_cmap("tab20")(range(len(names)))
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.7 * len(traces)))
    for y, t in enumerate(traces):
        x = 0.0
        for r in (r for r in rows if r["trace"] == t):
            c = float(r["cycles"])
            ax.barh(len(traces) - 1 - y, c, left=x, color=colors[names.index(r["phase"])],
                    hatch=None if r["tensor"] == "1" else "//", edgecolor="white", linewidth=0.5)
            x += c
        ax.text(x + 40, len(traces) - 1 - y, f"{x:,.0f}", va="center", fontsize=8)
    ax.set_yticks(range(len(traces)), list(reversed(traces)))
    ax.set_xlabel("SM cycles of one query tile (warpgroup 1, thread 0); solid: the tensor pipe is fed")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colors[i]) for i in range(len(names))]
    fig.legend(handles, names, loc="center right", fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    out = os.path.splitext(paths[0])[0] + ".png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")


def main():
    if sys.argv[1:2] == ["--timeline"]:
        if len(sys.argv) < 3:
            sys.exit("usage: plots/plot.py --timeline TRACE.csv [TRACE.csv ...]")
        timeline(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--phases"]:
        if len(sys.argv) < 3:
            sys.exit("usage: plots/plot.py --phases FILE.csv [FILE.csv ...]")
        phases(sys.argv[2:])
        return
    if sys.argv[1:2] == ["--rope"]:
        if len(sys.argv) != 3:
            sys.exit("usage: plots/plot.py --rope FILE.csv")
        rope(sys.argv[2])
        return
    mine = sys.argv[1:]
    paths = mine or sorted(glob.glob(os.path.join(HERE, "h200_*.csv")))
    rows = load_rows(paths)
    gpu = rows[0]["gpu"]
    fwd, bwd = split([r for r in rows if r["gpu"] == gpu])
    idx, idx_b = Index(fwd), Index(bwd)
    if mine:
        prefix = os.path.splitext(os.path.abspath(mine[0]))[0]
        source = ", ".join(f"`{p}`" for p in mine)
        for ix, what, suffix in ((idx, "Forward", ""), (idx_b, "Backward", "_bwd")):
            if not ix.rows:
                continue
            try:
                figures = plot(ix, gpu, prefix + suffix, what)
            except ImportError:
                print("plots/plot.py: no matplotlib, so no figures (pip install matplotlib); the tables:\n")
                figures = {}
            print(report(ix, gpu, source, figures, os.getcwd(), what) + "\n")
        return
    figures = plot(idx, gpu, os.path.join(HERE, slug(gpu)))
    readme = os.path.join(ROOT, "README.md")
    text = open(readme).read()
    if "<!-- results:begin -->" not in text:
        sys.exit("README.md has no <!-- results:begin --> ... <!-- results:end --> markers")
    body = report(idx, gpu, "`plots/h200_*.csv`", figures, ROOT)
    if idx_b.rows:
        figures_b = plot(idx_b, gpu, os.path.join(HERE, slug(gpu) + "_bwd"), "Backward")
        body += "\n\n" + report(idx_b, gpu, "`plots/h200_*.csv`", figures_b, ROOT, "Backward")
        figures = {**{("f",) + k: v for k, v in figures.items()}, **{("b",) + k: v for k, v in figures_b.items()}}
    new = re.sub(r"<!-- results:begin -->.*?<!-- results:end -->",
                 lambda m: "<!-- results:begin -->\n" + body + "\n<!-- results:end -->", text, flags=re.S)
    open(readme, "w").write(new)
    wrote = ", ".join(os.path.relpath(p, ROOT) for p in figures.values())
    print(f"wrote {wrote} and the README results tables")


if __name__ == "__main__":
    main()
