"""The entropy report as one PNG (matplotlib, headless): distribution, reflection comparison, forking tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_entropy(report: dict[str, Any], out: str | Path) -> Path:
    """Draw :func:`tirl.analysis.entropy.entropy_report`'s result into ``out`` (PNG) and return the path.

    Panels: (1) the distribution of generated-token entropy per label (share of tokens per bin, log scale);
    (2) mean entropy of the first k model tokens after a tool response versus all other model tokens, per
    label; (3) the most frequent high-entropy tokens of the first label, with their count.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = report["labels"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    ax = axes[0]
    for st in labels:
        edges, counts = st["histogram"]["edges"], st["histogram"]["counts"]
        total = sum(counts) or 1.0
        ax.stairs([c / total for c in counts], edges, label=f"{st['label']} (mean {st['mean']:.2f})")
    ax.set_yscale("log")
    ax.set_xlabel("token entropy (nats)")
    ax.set_ylabel("share of generated tokens")
    ax.set_title(f"entropy of generated tokens ({report['trajectories']} trajectories)")
    ax.legend(fontsize=8)

    ax = axes[1]
    width = 0.8 / max(1, len(labels))
    for n, st in enumerate(labels):
        pt = st["post_tool"]
        for g, (v, cnt) in enumerate(((pt["mean_post"], pt["n_post"]), (pt["mean_other"], pt["n_other"]))):
            x = g + n * width
            if v is None:  # no such tokens: say so instead of drawing a zero bar
                ax.text(x, 0.02 * ax.get_ylim()[1], "none in\nthese runs", ha="center", va="bottom", fontsize=8)
                continue
            ax.bar([x], [v], width=width, color=f"C{n}", label=st["label"] if g == 1 else None)
            ax.text(x, v, f"{v:.2f}\nn={cnt}", ha="center", va="bottom", fontsize=8)
    ax.margins(y=0.2)
    k = labels[0]["post_tool"]["first_k"] if labels else 0
    ax.set_xticks([g + width * (len(labels) - 1) / 2 for g in (0, 1)])
    ax.set_xticklabels([f"first {k} tokens after a tool response", "all other generated tokens"], fontsize=8)
    ax.set_ylabel("mean entropy (nats)")
    ax.set_title("reacting to tool feedback")
    ax.legend(fontsize=8)

    ax = axes[2]
    if labels and labels[0]["forking"]:
        fk = labels[0]["forking"][:15][::-1]
        ax.barh(range(len(fk)), [f["count"] for f in fk])
        ax.set_yticks(range(len(fk)))
        ax.set_yticklabels([repr(f["token"])[:24] for f in fk], fontsize=8)
    ax.set_xlabel("count among high-entropy tokens")
    ax.set_title(
        f"top high-entropy tokens ({labels[0]['label'] if labels else ''}, >= p80 = "
        f"{labels[0]['high_threshold']:.2f} nats)"
        if labels
        else "top high-entropy tokens",
        fontsize=9,
    )
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
