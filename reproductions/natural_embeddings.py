"""Paper 000's Figs. 3a and 4a on CIFAR-10 GIST: ridge on the raw GIST (linear) against
data-independent (RFF) and data-dependent embeddings (Nyström, PCALap, RPLap, AddKPCA), per-class
rate on the 10,000 test images by labelled images a class, in the few-label regime (1 … 50 a
class, `trials` random labelled sets as parallel tasks, mean ± std) and the many-label one
(100 … all train rows).

Protocol as bench ``accuracy`` (paper 000 §4.1, its trial and ridge code): gist-tiny rows from
`imgscale ingest` (as ``cifar10-gist``); the train images' last 5,000 rows are the labelled
validation set that chooses ρ on the grid, `train_rows` of the others the training rows every
embedding is fitted on (as unlabelled data) and the labelled sets are drawn from; ridge is
centred on the mean of all training rows (§3.3). Nyström keeps 50 eigenvectors with few labels
and 500 with many (as §4.1); RFF, PCALap, RPLap and AddKPCA are fitted once for both regimes.

The paper's findings tested: with few labels no data-dependent embedding beats the
data-independent ones; with many labels the nonlinear embeddings beat linear clearly.
"""

from __future__ import annotations

from functools import partial

import numpy as np
from distributed import Client

from imgscale.bench import Context, benchmark, record
from imgscale.jobs.cluster import cluster_mapper
from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.embed import AddKPCA, Nystrom, PCALap, RandomFourierFeatures, RPLap
from imgscale.pipeline.metrics import per_class_rate
from imgscale_reproductions.accuracy import _record, _trial_rate, plot
from imgscale_reproductions.cifar10_gist import TEST_FILE, TRAIN_FILE, VAL_ROWS, gist_arrays

NYSTROM_FEW, NYSTROM_MANY = 50, 500
DATA_INDEPENDENT = ("linear", "RFF")


def embeddings(n_features: int, rff_dim: int) -> dict[str, object]:
    """Label → the unfitted embedding (None: the raw rows); Nyström is fitted per regime."""
    return {
        "linear": None,
        f"RFF-{rff_dim}": RandomFourierFeatures(rff_dim, random_state=0),
        f"Nystrom-{NYSTROM_FEW}": Nystrom(NYSTROM_FEW, random_state=0),
        f"Nystrom-{NYSTROM_MANY}": Nystrom(NYSTROM_MANY, random_state=0),
        "PCALap": PCALap(),
        "RPLap": RPLap(random_state=0),
        f"AddKPCA-{2 * n_features}": AddKPCA(random_state=0),
    }


def split(data: dict, train_rows: int, val_rows: int) -> dict[str, np.ndarray]:
    """Train (the first `train_rows`), val (the last `val_rows` of the train images) and test."""
    X, y = data["X_train"], data["y_train"]
    n = min(train_rows, len(y) - val_rows)
    return {
        "X_train": X[:n], "y_train": y[:n], "X_val": X[-val_rows:], "y_val": y[-val_rows:],
        "X_test": data["X_test"], "y_test": data["y_test"],
    }  # fmt: skip


def run(data, few, many, trials_few, trials_many, rff_dim, mapper, log) -> list[dict]:
    """Records for every embedding: each few-label size over `trials_few` labelled sets, each
    many-label size over `trials_many`, and every training row labelled (one fit)."""
    y_train = data["y_train"]
    smallest = int(np.bincount(y_train).min())
    records = []
    for label, embedding in embeddings(data["X_train"].shape[1], rff_dim).items():
        if embedding is None:
            E = {k: data[f"X_{k}"] for k in ("train", "val", "test")}
        else:
            embedding.fit(data["X_train"])
            E = {k: embedding.transform(data[f"X_{k}"]).astype(np.float32)
                 for k in ("train", "val", "test")}  # fmt: skip
        mean = E["train"].astype(np.float64).mean(axis=0)
        shared = (E["train"], y_train, mean, E["val"], data["y_val"], E["test"], data["y_test"],
                  False)  # fmt: skip
        regimes = {"few": (few, trials_few), "many": (many, trials_many)}
        if label.startswith("Nystrom"):
            regimes = {"few": regimes["few"]} if label.endswith(f"-{NYSTROM_FEW}") else {
                "many": regimes["many"]}  # fmt: skip
        for regime, (sizes, trials) in regimes.items():
            dataset = f"CIFAR-10 GIST, {regime} labels"
            for count in (s for s in sizes if s < smallest):
                rates = mapper(partial(_trial_rate, per_class=count), shared,
                               [(t,) for t in range(trials)])  # fmt: skip
                records.append(_record(dataset, label, E["train"].shape[1], count, rates,
                                       family=label.split("-")[0]))  # fmt: skip
                log(f"{label} {count} a class: {np.mean(rates):.4f} ± {np.std(rates):.4f}")
            if regime == "many":
                model = RidgeClassifier().fit(E["train"], y_train, X_val=E["val"],
                                              y_val=data["y_val"])  # fmt: skip
                rate = per_class_rate(data["y_test"], model.predict(E["test"]))
                records.append(_record(dataset, label, E["train"].shape[1], "all", [rate],
                                       per_class_mean=int(np.bincount(y_train).mean()),
                                       family=label.split("-")[0]))  # fmt: skip
                log(f"{label} all rows: {rate:.4f}")
    return records


def findings(records: list[dict]) -> list[dict]:
    """Paper 000's two claims as figures: per few-label size, the best data-dependent embedding
    against the best data-independent one; per many-label size, the best nonlinear against
    linear."""
    out = []
    by = {}
    for r in records:
        by.setdefault((r["dataset"], r["labelled_per_class"]), {})[r["family"]] = r["value"]
    for (dataset, count), rates in by.items():
        independent = max(rates[f] for f in rates if f in DATA_INDEPENDENT)
        dependent = max(rates[f] for f in rates if f not in DATA_INDEPENDENT)
        if dataset.endswith("few labels"):
            out.append(
                record(
                    f"{count} labelled/class: best data-dependent",
                    dependent,
                    "per-class rate",
                    independent,
                    peer="best data-independent",
                )
            )
        else:
            nonlinear = max(v for f, v in rates.items() if f != "linear")
            out.append(
                record(
                    f"{count} labelled/class: best nonlinear",
                    nonlinear,
                    "per-class rate",
                    rates["linear"],
                    peer="linear",
                )
            )
    return out  # fmt: skip


@benchmark(
    "natural-embeddings",
    "paper 000 Figs. 3a/4a on CIFAR-10 GIST: linear, RFF, Nystrom, PCALap, RPLap and AddKPCA "
    "ridge at 1-50 labelled images a class (random trials, mean +- std) and 100 to all",
    needs=(f"{TRAIN_FILE}, {TEST_FILE} (small and up; tiny uses sklearn's digits without them)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    train_rows, val_rows, few, many, trials_few, trials_many, rff_dim = ctx.pick(
        tiny=(1_000, 300, (1, 3), (30,), 2, 1, 256),
        small=(10_000, 2_000, (1, 5, 20, 50), (100, 300), 5, 2, 1000),
        medium=(20_000, VAL_ROWS, (1, 2, 3, 5, 10, 20, 50), (100, 300, 1000), 10, 3, 2000),
        large=(45_000, VAL_ROWS, (1, 2, 3, 5, 10, 20, 50), (100, 300, 1000, 3000), 10, 5, 4000),
    )  # fmt: skip
    data = split(gist_arrays(ctx), train_rows, val_rows)
    with Client(ctx.scheduler) as client:
        records = run(data, few, many, trials_few, trials_many, rff_dim,
                      cluster_mapper(client), ctx.log)  # fmt: skip
    plot(records, ctx.plot("rates"))
    return records + findings(records)
