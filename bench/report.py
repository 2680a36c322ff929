"""The Markdown report of one suite run, and the ratio plot every benchmark with a peer gets."""

from __future__ import annotations

from pathlib import Path


def number(value: float | None) -> str:
    """A figure with four significant digits; blank when absent."""
    if value is None or value != value:  # None or NaN
        return ""
    return f"{value:.4g}"


def spread(row: dict, key: str = "value", digits: str = ".4g") -> str:
    """``row[key]`` (the value or the ratio) as ``median (min–max)`` when the figure was measured
    more than once, else alone; blank when absent."""
    middle = row.get(key)
    if middle is None or middle != middle:
        return ""
    text = f"{middle:{digits}}"
    low, high = row.get(f"{key}_min"), row.get(f"{key}_max")
    if (row.get("repeats") or 1) > 1 and low is not None and high is not None:
        text += f" ({low:{digits}}–{high:{digits}})"
    return text


def table(table_rows: list[dict]) -> str:
    """figure | value | unit | peer | peer value | ratio, one line per row, a figure measured
    several times as ``median (min–max)``; a row without a peer says in the peer column what it
    is for (its ``purpose``, :mod:`imgscale.bench.peers`)."""
    lines = [
        "| figure | value | unit | peer | peer value | ratio |",
        "|---|---:|---|---|---:|---:|",
    ]
    for r in table_rows:
        lines.append(
            f"| {r['name']} | {spread(r)} | {r['unit']} | {_peer(r)} "
            f"| {number(r.get('peer_value'))} | {spread(r, 'ratio', '.3f')} |"
        )
    return "\n".join(lines) + "\n"


def _peer(row: dict) -> str:
    if row.get("peer"):
        return row["peer"]
    return f"*none — {row['purpose']}*" if row.get("purpose") else ""


def ratio_plot(table_rows: list[dict], path: Path, title: str) -> bool:
    """A bar per figure that has a peer or limit: ours over it, with the parity line; False (and
    no file) when no figure has one."""
    rated = [r for r in table_rows if r.get("ratio") is not None and r["ratio"] == r["ratio"]]
    if not rated:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(rated) + 1.2))
    names = [r["name"] for r in rated]
    ax.barh(range(len(rated)), [r["ratio"] for r in rated], color="tab:blue")
    ax.axvline(1.0, color="black", linewidth=1, linestyle="--", label="parity with peer/limit")
    ax.set_yticks(range(len(rated)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ours / peer or limit (same run)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def markdown(runs: list[dict], limits: list[dict], header: dict[str, str], out: Path) -> str:
    """The report: the run's provenance, the machine limits, then each benchmark's table, plots
    and Dask performance report (``runs``: dicts with name, summary, rows, plots, html, status)."""
    lines = [
        f"# imgscale benchmarks, scale {header['scale']}",
        "",
        f"Machine: {header['machine']}. imgscale {header['version']} at commit "
        f"{header['commit'] or 'unknown'}, {header['time']}.",
        f"Command: `{header['command']}`",
        "",
        "Every ratio is ours over a peer or a machine limit measured in the same run. A figure "
        "measured several times reads median (min–max), its ratio the median (min–max) of the "
        "ratios of each repetition. Under each benchmark, the machine around it: a benchmark is "
        "noisy when a probe of its short calibration moved from before to after it (its median by "
        "more than the limit, beyond the range of its shots) or other processes kept the cores "
        "busy while it ran.",
        "",
        "## Machine limits",
        "",
        table(limits),
    ]
    for run in runs:
        lines += [f"## {run['name']}: {run['summary']}", ""]
        if run["status"] != "ok":
            lines += [f"**{run['status']}**: {run['reason']}", ""]
            continue
        lines += [table(run["rows"]), run["conditions"], ""]
        for plot in run["plots"]:
            lines += [f"![{plot.stem}]({plot.relative_to(out)})", ""]
        if run.get("html"):
            lines += [f"Dask performance report: [{run['html'].name}]({run['html'].name})", ""]
    return "\n".join(lines)
