"""Paper 001 on CIFAR-10 GIST: ALE (approximate Laplacian eigenmaps) with the semi-supervised
solve of eq. 3 and with eigenvalue ridge, against linear ridge and RFF ridge on the same
labelled sets, test per-class rate and MiAP by labelled images a class (random trials as
parallel tasks, mean ± std), every other train image unlabelled.

The split is ``natural-embeddings``' (the train images' last 5,000 rows validate ρ or λ, the
first `train_rows` are the training rows ALE is fitted on) and each trial draws the labelled
rows with the same seed, so the two benchmarks' figures are on the same labelled images; the
trial code is bench ``ale``'s (paper 001 on digits).
"""

from __future__ import annotations

from functools import partial

import numpy as np
from distributed import Client

from imgscale.bench import Context, benchmark, record
from imgscale.jobs.cluster import cluster_mapper
from imgscale.pipeline.embed import ALE, RandomFourierFeatures
from imgscale_reproductions.accuracy import _trial_rate
from imgscale_reproductions.ale_accuracy import ALE_COMPONENTS, ALE_DIRECTIONS, METHODS, _ale_trial
from imgscale_reproductions.cifar10_gist import TEST_FILE, TRAIN_FILE, VAL_ROWS, gist_arrays
from imgscale_reproductions.natural_embeddings import split


def plot(records: list[dict], path) -> None:
    """Per-class rate against labelled images a class, one line per method, with error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for method in dict.fromkeys(r["method"] for r in records):
        points = sorted((r["labelled_per_class"], r["value"], r["std"]) for r in records
                        if r["method"] == method and r["unit"] == "per-class rate")  # fmt: skip
        x, y, e = (np.array(v, dtype=float) for v in zip(*points, strict=True))
        ax.errorbar(x, 100 * y, yerr=100 * e, marker="o", capsize=3, label=method)
    ax.set_xscale("log")
    ax.set_xlabel("labelled images per class")
    ax.set_ylabel("test per-class rate (%)")
    ax.set_title("paper 001 on CIFAR-10 GIST")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@benchmark(
    "natural-ale",
    "paper 001 on CIFAR-10 GIST: ALE + eq.-3 solve and ALE + eigenvalue ridge vs linear and RFF "
    "ridge on the same labelled sets, per-class rate and MiAP, random trials",
    needs=(f"{TRAIN_FILE}, {TEST_FILE} (small and up; tiny uses sklearn's digits without them)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    train_rows, val_rows, per_class, trials, rff_dim = ctx.pick(
        tiny=(1_000, 300, (3, 30), 2, 256),
        small=(10_000, 2_000, (3, 30, 300), 3, 1000),
        medium=(20_000, VAL_ROWS, (1, 3, 10, 30, 100, 300, 1000), 5, 2000),
        large=(45_000, VAL_ROWS, (1, 3, 10, 30, 100, 300, 1000, 3000), 10, 4000),
    )  # fmt: skip
    data = split(gist_arrays(ctx), train_rows, val_rows)
    X, y, X_val, y_val = data["X_train"], data["y_train"], data["X_val"], data["y_val"]
    X_test, y_test = data["X_test"], data["y_test"]
    ale = ALE(n_directions=ALE_DIRECTIONS, n_components=ALE_COMPONENTS).fit(X)
    shared = (X, y, X_val, y_val, X_test, y_test, ale.transform(X), ale.transform(X_val),
              ale.transform(X_test), ale.eigenvalues_)  # fmt: skip
    rff = RandomFourierFeatures(rff_dim, random_state=0).fit(X)
    E = {k: rff.transform(v).astype(np.float32) for k, v in (("train", X), ("val", X_val),
                                                             ("test", X_test))}  # fmt: skip
    rff_shared = (E["train"], y, E["train"].astype(np.float64).mean(axis=0), E["val"], y_val,
                  E["test"], y_test, False)  # fmt: skip
    records = []
    with Client(ctx.scheduler) as client:
        mapper = cluster_mapper(client)
        for count in per_class:
            outcomes = mapper(partial(_ale_trial, per_class=count), shared,
                              [(t,) for t in range(trials)])  # fmt: skip
            rates = mapper(partial(_trial_rate, per_class=count), rff_shared,
                           [(t,) for t in range(trials)])  # fmt: skip
            found = {m: {k: [o[m][k] for o in outcomes] for k in ("miap", "rate")} for m in METHODS}
            found[f"RFF-{rff_dim} ridge"] = {"rate": rates}
            linear = np.mean(found["linear ridge"]["rate"])
            for method, metrics in found.items():
                for metric, values in metrics.items():
                    unit = "MiAP" if metric == "miap" else "per-class rate"
                    peer = {}
                    if method != "linear ridge" and metric == "rate":
                        peer = {"peer_value": linear, "peer": "linear ridge"}
                    records.append(
                        record(f"{method}, {count} labelled/class, {unit}", np.mean(values),
                               unit, peer.get("peer_value"), **({"peer": peer["peer"]} if peer
                               else {}), method=method, labelled_per_class=count,
                               std=float(np.std(values)), trials=trials)
                    )  # fmt: skip
            ctx.log(f"{count} a class: " + ", ".join(
                f"{m} {np.mean(v['rate']):.3f}" for m, v in found.items()))  # fmt: skip
    plot(records, ctx.plot("rates"))
    return records
