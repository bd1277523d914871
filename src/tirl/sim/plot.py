"""Engine-load timelines of simulated rollout steps, drawn like the rStar2-Agent report's Figure 7.

Covers turning :class:`~tirl.sim.simulator.SimResult` timelines into time-binned load series and a PNG with one
panel per policy and one row per engine (the row's fill is the engine's KV-cache use; grey marks time with
nothing to compute). It does not run simulations (see :mod:`tirl.sim.simulator`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tirl.sim.simulator import SimResult


def binned_load(
    timeline: Sequence[tuple[float, int, int]], capacity_tokens: int, t_end: float, bins: int = 600
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Time-weighted load of one engine over ``[0, t_end]`` in ``bins`` equal bins.

    ``timeline`` holds ``(t, running_sequences, kv_used_tokens)`` samples; each holds until the next.
    Returns ``(bin_starts_s, kv_fraction, busy_fraction)``: KV use as a share of ``capacity_tokens`` (may
    exceed 1 only if the input does) and the share of each bin with at least one running sequence.
    """
    edges = np.linspace(0.0, t_end, bins + 1)
    kv = np.zeros(bins)
    busy = np.zeros(bins)
    width = t_end / bins if t_end > 0 else 1.0
    samples = list(timeline) + [(t_end, 0, 0)]
    for (t0, running, used), (t1, _, _) in zip(samples, samples[1:]):
        t0, t1 = min(max(t0, 0.0), t_end), min(max(t1, 0.0), t_end)
        if t1 <= t0:
            continue
        first, last = int(t0 // width), min(int(np.ceil(t1 / width)), bins)
        for b in range(first, last):
            overlap = min(t1, edges[b + 1]) - max(t0, edges[b])
            if overlap > 0:
                kv[b] += overlap * used / capacity_tokens
                busy[b] += overlap * (1.0 if running else 0.0)
    return edges[:-1], kv / width, busy / width


def plot_timelines(results: Sequence[SimResult], path: str | Path, title: str = "", bins: int = 600) -> Path:
    """Write a PNG: one panel per result (policy), one row per engine, shared time axis. Returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t_end = max(r.makespan_s for r in results) * 1.02
    n_eng = max(r.engines for r in results)
    fig, axes = plt.subplots(len(results), 1, figsize=(11, 1.1 + 0.42 * n_eng * len(results)), sharex=True)
    axes = np.atleast_1d(axes)
    for ax, r in zip(axes, results):
        for e, timeline in enumerate(r.timelines):
            x, kv, busy = binned_load(timeline, r.capacity_tokens, t_end, bins)
            base = r.engines - 1 - e
            ax.fill_between(x, base, base + 0.85 * np.minimum(kv, 1.0), step="post", color="tab:blue", lw=0)
            idle = busy < 0.5
            ax.fill_between(x, base, base + 0.85, where=idle, step="post", color="0.85", lw=0)
        ax.axvline(r.makespan_s, color="tab:red", lw=1)
        label = r.policy if r.policy != "kv_aware" else f"kv_aware (coef {r.admission_coef:g})"
        ax.set_title(
            f"{label}: makespan {r.makespan_s:,.0f} s, {r.tokens_per_s:,.0f} tok/s, "
            f"idle {100 * r.idle_fraction:.1f}%, evicted {r.evicted_tokens:,} tok",
            fontsize=9,
            loc="left",
        )
        ax.set_yticks([r.engines - 1 - e + 0.42 for e in range(r.engines)])
        ax.set_yticklabels([f"engine {e}" for e in range(r.engines)], fontsize=7)
        ax.set_ylim(0, r.engines)
    axes[-1].set_xlabel("time (s, simulated)")
    fig.suptitle(title or "KV-cache use per engine (blue: share of capacity; grey: idle; red: makespan)", fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
