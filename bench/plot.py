#!/usr/bin/env python3
"""Plots uvcuda-bench's CSV: latency.png and scaling.png.

usage: plot.py BENCH_CSV OUT_DIR

latency.png: p50 submit -> callback latency against the workload's duration
(log-log), one line per method, and below it each method's p50 minus
raw-spin's (the cost of awaiting on the loop over spinning on the stream).
scaling.png: p50 of one timed future against the number N of other pending
futures (uvcuda) or idle uv_async_t handles (hostfn-async).

Needs only python3 and matplotlib. Rows from the simulated driver are
titled as such: they are not GPU measurements.
"""
import csv
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIM_TAG = "simulation-not-a-GPU-measurement"
# Where the zero-length workloads sit on the log axis.
ZERO_X = {"memset4": 1.0, "empty": 2.0}
BASE = "raw-spin"


def num(text):
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            r["param_v"] = num(r.get("param"))
            r["p50_v"] = num(r.get("p50_us"))
            r["p99_v"] = num(r.get("p99_us"))
            try:
                r["n"] = int(r.get("samples") or 0)
            except ValueError:
                r["n"] = 0
            rows.append(r)
    return rows


def is_sim(rows):
    return any(SIM_TAG in (r.get("extra") or "") for r in rows)


def title(text, sim):
    if sim:
        return text + "\nSIMULATED driver: not a GPU measurement"
    return text


def colors(methods):
    cmap = plt.get_cmap("tab10" if len(methods) <= 10 else "tab20")
    return {m: cmap(i % cmap.N) for i, m in enumerate(methods)}


def workload_x(r):
    w = r["workload"]
    if w in ZERO_X:
        return ZERO_X[w]
    p = r["param_v"]
    return p if p and p > 0 else None


def plot_latency(rows, out, sim):
    lat = [r for r in rows if r["section"] == "latency" and r["n"] > 0
           and r["p50_v"] is not None and workload_x(r) is not None]
    if not lat:
        print("plot.py: no latency rows: latency.png not written")
        return False
    methods = []
    for r in lat:
        if r["method"] not in methods:
            methods.append(r["method"])
    base = {r["workload"]: r["p50_v"] for r in lat if r["method"] == BASE}
    ticks = {}
    for r in lat:
        ticks[workload_x(r)] = r["workload"]

    col = colors(methods)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(10, 10), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})
    for m in methods:
        pts = sorted((workload_x(r), r["p50_v"], r["workload"])
                     for r in lat if r["method"] == m)
        xs = [p[0] for p in pts]
        style = "--" if m == BASE else "-"
        ax.plot(xs, [p[1] for p in pts], style, marker="o", label=m,
                color=col[m])
        over = [(p[0], p[1] - base[p[2]]) for p in pts if p[2] in base]
        if over and m != BASE:
            ax2.plot([o[0] for o in over], [o[1] for o in over], style,
                     marker="o", label=m, color=col[m])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel("p50 submit -> callback, us")
    ax.set_title(title("uvcuda-bench: latency by workload", sim))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax2.set_xscale("log")
    ax2.set_yscale("symlog", linthresh=1.0)
    ax2.axhline(0, color="black", linewidth=0.8)
    ax2.set_ylabel("p50 minus %s p50, us" % BASE)
    ax2.grid(True, which="both", alpha=0.3)
    xs = sorted(ticks)
    ax2.set_xticks(xs)
    ax2.set_xticklabels([ticks[x] for x in xs], rotation=30, ha="right")
    ax2.minorticks_off()
    ax2.set_xlabel("workload (kernels at their nominal duration; memset4 "
                   "and empty placed left)")
    fig.tight_layout()
    path = os.path.join(out, "latency.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("plot.py: wrote " + path)
    return True


def plot_scaling(rows, out, sim):
    sc = [r for r in rows if r["section"] == "scaling"
          and r["param_v"] is not None]
    if not sc:
        print("plot.py: no scaling rows: scaling.png not written")
        return False
    fig, ax = plt.subplots(figsize=(9, 6))
    methods = []
    for r in sc:
        if r["method"] not in methods:
            methods.append(r["method"])
    col = colors(methods)
    for m in methods:
        pts = sorted((r["param_v"], r["p50_v"], r["p99_v"]) for r in sc
                     if r["method"] == m and r["n"] > 0 and r["p50_v"])
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                    color=col[m], label=m + " p50")
            p99 = [p for p in pts if p[2]]
            if p99:
                ax.plot([p[0] for p in p99], [p[2] for p in p99], ":",
                        marker=".", color=col[m], label=m + " p99")
        for r in sc:
            extra = r.get("extra") or ""
            if r["method"] == m and r["n"] == 0 and "blocked" in extra:
                ax.axvline(r["param_v"], color=col[m], alpha=0.5,
                           linestyle="--")
                ax.text(r["param_v"], 0.02, " %s: blocked at N=%d (GPU "
                        "queue full)" % (m, r["param_v"]), rotation=90,
                        va="bottom", fontsize=8, color=col[m],
                        transform=ax.get_xaxis_transform())
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("N other pending futures (uvcuda) / idle uv_async_t "
                  "handles (hostfn-async)")
    ax.set_ylabel("latency of one timed `empty` future, us")
    ax.set_title(title("uvcuda-bench: scaling", sim))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = os.path.join(out, "scaling.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print("plot.py: wrote " + path)
    return True


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    rows = load(argv[1])
    os.makedirs(argv[2], exist_ok=True)
    sim = is_sim(rows)
    ok = plot_latency(rows, argv[2], sim)
    ok = plot_scaling(rows, argv[2], sim) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
