"""``imgscale bench accuracy``: paper 000's labelled-per-class protocol on real digits data.

For each data set (MNIST, USPS, 20 Newsgroups from the data folder, scikit-learn's digits) and
each embedding (raw features, RFF, Nyström, SQRT, HIKE, AddKPCA, plus scikit-learn's
``RBFSampler`` with the same d and γ as a peer), the per-class rate of ridge on the test rows:

- **split** (§4.1): the official train/test split (digits: a random 60/20/20 split); a random 20%
  of the train rows is held out as the labelled validation set that chooses ρ on the grid.
- **embedding**: fitted once per data set on *all* the remaining training rows (as unlabelled
  data; §4.2's semi-supervised setting); every trial reuses it, so the spread across trials
  is that of the labelled sample.
- **labelled sets**: 3 … 30 and 100 … 3000 labelled rows per class (as many as the smallest
  class allows) drawn at random from the training rows, repeated trials, mean ± std; the trials
  are independent tasks, run in parallel on the Dask cluster (``cluster_mapper``). Ridge is
  centred on the mean of all training rows (§3.3) and, while there are fewer labelled rows than
  dimensions, solved in its dual form Xᵀ(XXᵀ + ρI)⁻¹Y, the same W as ``RidgeClassifier``.
- **many labels**: every training row labelled, ``pipeline.classify.RidgeClassifier`` with ρ
  validated on the grid (one trial: nothing is random but the embedding).
- The peer ``RBFSampler(γ/2, d)`` + scikit-learn ``RidgeClassifier(alpha=ρ)`` (its own
  intercept) with ρ chosen on the same grid and validation rows. scikit-learn's RBF kernel is
  exp(−g‖x−y‖²), ours exp(−γ‖x−y‖²/2), hence g = γ/2.

The embeddings are fitted in this process on numpy (the data sets fit in memory); MNIST's train
rows are subsampled (``mnist_rows``) to keep the 6,272-D HIKE many-label fit feasible on 2
cores. 20 Newsgroups (raw text) is vectorised to bag-of-words histograms (`newsgroups_histograms`).
"""

from __future__ import annotations

import tarfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import scipy.linalg

from imgscale.bench import Context, benchmark, record
from imgscale.jobs.cluster import cluster_mapper
from imgscale.pipeline.classify import RidgeClassifier
from imgscale.pipeline.compute import Mapper, run_in_process
from imgscale.pipeline.embed import (
    AddKPCA,
    HistogramIntersection,
    Nystrom,
    RandomFourierFeatures,
    SquareRoot,
)
from imgscale.pipeline.metrics import per_class_rate

LABELLED_PER_CLASS = (3, 10, 30)
TRIALS = 5
RFF_DIM = 2000
# Nyström eigenvectors: 50 with few labels, 500 with many (paper 000 §4.1).
NYSTROM_FEW, NYSTROM_MANY = 50, 500
RBF_PEER = "sklearn RBFSampler"
DATASETS = ("digits", "usps", "mnist", "20news")
NEWSGROUPS_FILE = "20news-bydate.tar.gz"
# Words kept for 20 Newsgroups histograms: HIKE-8 then has 8,000 dimensions (MNIST's has 6,272).
NEWSGROUPS_VOCABULARY = 1000
# The ρ values the ridge classifier validates by default, which the sklearn peer searches too.
RHO_GRID = RidgeClassifier().get_params()["rho_grid"]


def load_dataset(
    name: str, mnist_rows: int | None, seed: int = 0, data_dir: Path | None = None
) -> dict[str, np.ndarray]:
    """Train/val/test float32 rows and int labels (val = 20% of the train rows).

    Images are scaled to [0, 1]; 20 Newsgroups messages are bag-of-words histograms
    (`newsgroups_histograms`).
    """
    rng = np.random.default_rng(seed)
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = (X / 16.0).astype(np.float32)
        order = rng.permutation(len(y))
        n_train, n_val = int(0.6 * len(y)), int(0.2 * len(y))
        tr, va, te = np.split(order, [n_train, n_train + n_val])
        return {"X_train": X[tr], "y_train": y[tr], "X_val": X[va], "y_val": y[va],
                "X_test": X[te], "y_test": y[te]}  # fmt: skip
    if data_dir is None:
        raise ValueError(f"data set {name!r} needs the data folder (--data-dir or IMGSCALE_DATA)")
    if name == "20news":
        X_train, y_train, X_test, y_test = newsgroups_histograms(Path(data_dir) / NEWSGROUPS_FILE)
    else:
        with np.load(Path(data_dir) / f"{name}.npz", allow_pickle=False) as data:
            X_train, y_train = data["X_train"], data["y_train"].astype(np.int64)
            X_test, y_test = data["X_test"], data["y_test"].astype(np.int64)
        scale = 255.0 if X_train.dtype == np.uint8 else 1.0
        X_train = (X_train / scale).astype(np.float32)
        X_test = (X_test / scale).astype(np.float32)
    order = rng.permutation(len(y_train))
    if name == "mnist" and mnist_rows is not None:
        order = order[:mnist_rows]
    n_val = len(order) // 5
    va, tr = order[:n_val], order[n_val:]
    return {"X_train": X_train[tr], "y_train": y_train[tr], "X_val": X_train[va],
            "y_val": y_train[va], "X_test": X_test, "y_test": y_test}  # fmt: skip


def newsgroups_histograms(
    archive: Path, vocabulary: int = NEWSGROUPS_VOCABULARY
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """20 Newsgroups "bydate" as L1-normalised bag-of-words histograms: X_train, y_train, X_test,
    y_test.

    Read straight from the tar.gz (``20news-bydate-{train,test}/<group>/<id>``, latin-1). Each
    message's header block (up to the first blank line) is dropped: it names the newsgroup. The
    vocabulary is the `vocabulary` most frequent words of the train messages without English stop
    words, so histograms suit SQRT/HIKE/AddKPCA as paper 000's visual-word histograms do (§4.1).
    """
    from sklearn.feature_extraction.text import CountVectorizer

    texts: dict[str, list[str]] = {"train": [], "test": []}
    groups: dict[str, list[str]] = {"train": [], "test": []}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or not parts[0].startswith("20news-bydate-"):
                continue
            split = parts[0].removeprefix("20news-bydate-")
            text = tar.extractfile(member).read().decode("latin-1")
            texts[split].append(text.partition("\n\n")[2])
            groups[split].append(parts[1])
    names = sorted(set(groups["train"]))
    vectorizer = CountVectorizer(max_features=vocabulary, stop_words="english")
    counts = {"train": vectorizer.fit_transform(texts["train"])}
    counts["test"] = vectorizer.transform(texts["test"])
    out = []
    for split in ("train", "test"):
        totals = np.asarray(counts[split].sum(axis=1), dtype=np.float64).clip(min=1)
        out.append((counts[split].toarray() / totals).astype(np.float32))
        out.append(np.searchsorted(names, groups[split]).astype(np.int64))
    return tuple(out)


def _embeddings(n_features: int, regime: str, rff_dim: int = RFF_DIM) -> dict[str, object]:
    nystrom_dim = NYSTROM_FEW if regime == "few" else NYSTROM_MANY
    return {
        "linear": None,
        f"RFF-{rff_dim}": RandomFourierFeatures(rff_dim, random_state=0),
        "Nystrom": Nystrom(nystrom_dim, random_state=0),
        "SQRT": SquareRoot(),
        "HIKE-8": HistogramIntersection(8),
        f"AddKPCA-{2 * n_features}": AddKPCA(random_state=0),
    }


def dual_ridge_rates(
    mean: np.ndarray,
    X_l: np.ndarray,
    y_l: np.ndarray,
    X_val: np.ndarray,
    y_val: np.ndarray,
    X_test: np.ndarray,
    y_test: np.ndarray,
    grid=RHO_GRID,
) -> tuple[float, float]:
    """Test per-class rate at the ρ with the best validation rate; (rate, ρ).

    Ridge without bias on rows centred at `mean`: W = X̃ᵀ(X̃X̃ᵀ + ρI)⁻¹Y with one eigendecomposition
    of the l × l Gram matrix for the whole grid (equal to the primal (X̃ᵀX̃ + ρI)⁻¹X̃ᵀY).
    """
    classes = np.unique(y_l)
    Y = (y_l[:, None] == classes[None, :]).astype(np.float64)
    centred = X_l.astype(np.float64) - mean
    s, Q = scipy.linalg.eigh(centred @ centred.T)
    s = s.clip(min=0)
    QtY = Q.T @ Y
    centred32 = centred.astype(np.float32)
    cross_val = _centred(X_val, mean) @ centred32.T
    cross_test = _centred(X_test, mean) @ centred32.T
    best = (-1.0, None)
    for rho in grid:
        alpha = Q @ (QtY / (s + rho)[:, None])
        rate = per_class_rate(y_val, classes[np.argmax(cross_val @ alpha, axis=1)])
        if rate > best[0]:
            best = (rate, rho)
    rho = best[1]
    alpha = Q @ (QtY / (s + rho)[:, None])
    return per_class_rate(y_test, classes[np.argmax(cross_test @ alpha, axis=1)]), float(rho)


def _centred(X: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return (X - mean).astype(np.float32)


def _sklearn_ridge_rate(E_l, y_l, E_val, y_val, E_test, y_test, grid=RHO_GRID) -> float:
    from sklearn.linear_model import RidgeClassifier as SklearnRidge

    best = (-1.0, None)
    for rho in grid:
        model = SklearnRidge(alpha=rho).fit(E_l, y_l)
        rate = per_class_rate(y_val, model.predict(E_val))
        if rate > best[0]:
            best = (rate, model)
    return per_class_rate(y_test, best[1].predict(E_test))


def _sample_labelled(y: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    return np.concatenate(
        [rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in np.unique(y)]
    )


def run_dataset(
    name: str,
    mnist_rows: int | None,
    data_dir: Path | None,
    log=print,
    *,
    per_class: tuple[int, ...] = LABELLED_PER_CLASS,
    trials: int = TRIALS,
    rff_dim: int = RFF_DIM,
    mapper: Mapper = run_in_process,
):
    """Records (mean and std of the test per-class rate) for every embedding and regime.

    The trials of each (embedding, labelled rows per class) run through ``mapper`` (default: one
    after the other here; ``imgscale.jobs.cluster.cluster_mapper`` runs them as parallel tasks on
    a Dask cluster with the embedded rows sent to every worker once).
    """
    data = load_dataset(name, mnist_rows, data_dir=data_dir)
    X_train, y_train = data["X_train"], data["y_train"]
    n_features = X_train.shape[1]
    smallest_class = int(np.bincount(y_train).min())
    records = []
    rff_gamma = None
    for regime in ("few", "many"):
        embeddings = _embeddings(n_features, regime, rff_dim)
        for label, embedding in [*embeddings.items(), (RBF_PEER, "peer")]:
            started = time.perf_counter()
            if embedding == "peer":
                from sklearn.kernel_approximation import RBFSampler

                embedding = RBFSampler(gamma=rff_gamma / 2, n_components=rff_dim, random_state=0)
                label = f"{RBF_PEER}-{rff_dim}"
            E = {}
            if embedding is None:
                E = {k: data[f"X_{k}"] for k in ("train", "val", "test")}
            else:
                embedding.fit(X_train)
                E = {k: embedding.transform(data[f"X_{k}"]).astype(np.float32) for k in
                     ("train", "val", "test")}  # fmt: skip
            if isinstance(embedding, RandomFourierFeatures):
                rff_gamma = embedding.gamma_
            fit_seconds = time.perf_counter() - started
            dim = E["train"].shape[1]
            peer = label.startswith(RBF_PEER)
            if regime == "few":
                mean = E["train"].astype(np.float64).mean(axis=0)
                shared = (
                    E["train"], y_train, mean, E["val"], data["y_val"], E["test"],
                    data["y_test"], peer,
                )  # fmt: skip
                for count in per_class:
                    if count > smallest_class:
                        log(f"{name}: {count} labelled rows per class skipped (a class has "
                            f"{smallest_class})")  # fmt: skip
                        continue
                    trial_rate = partial(_trial_rate, per_class=count)
                    rates = mapper(trial_rate, shared, [(t,) for t in range(trials)])
                    records.append(_record(name, label, dim, count, rates))
            else:
                args = (E["train"], y_train, E["val"], data["y_val"], E["test"], data["y_test"])
                if peer:
                    rate = _sklearn_ridge_rate(*args)
                else:
                    model = RidgeClassifier().fit(
                        E["train"], y_train, X_val=E["val"], y_val=data["y_val"]
                    )
                    rate = per_class_rate(data["y_test"], model.predict(E["test"]))
                count = int(np.bincount(y_train).mean())
                records.append(_record(name, label, dim, "all", [rate], per_class_mean=count))
            log(f"{name} {regime:<4} {label:<28} d={dim:<5} {time.perf_counter() - started:6.1f} s"
                f" (embedding fit+transform {fit_seconds:.1f} s)")  # fmt: skip
    return records


def _trial_rate(
    E_train, y_train, mean, E_val, y_val, E_test, y_test, peer, trial: int, *, per_class: int
) -> float:
    """One random labelled set's test per-class rate; ρ chosen on the validation rows.

    Ours: the dual solve while there are fewer labelled rows than dimensions, else
    ``RidgeClassifier`` on the labelled rows, centred on all training rows either way (§3.3).
    """
    rng = np.random.default_rng(1000 * per_class + trial)
    index = _sample_labelled(y_train, per_class, rng)
    if peer:
        return _sklearn_ridge_rate(E_train[index], y_train[index], E_val, y_val, E_test, y_test)
    if len(index) < E_train.shape[1]:
        args = (E_val, y_val, E_test, y_test)
        return dual_ridge_rates(mean, E_train[index], y_train[index], *args)[0]
    y_partial = np.full(len(y_train), -1, dtype=np.int64)
    y_partial[index] = y_train[index]
    model = RidgeClassifier().fit(E_train, y_partial, X_val=E_val, y_val=y_val)
    return per_class_rate(y_test, model.predict(E_test))


def _record(dataset, embedding, dim, labelled, rates, **extra) -> dict:
    return record(
        f"{dataset} {embedding} {labelled} labelled/class",
        float(np.mean(rates)),
        "per-class rate",
        std=float(np.std(rates)),
        trials=len(rates),
        dataset=dataset,
        embedding=embedding,
        dim=int(dim),
        labelled_per_class=labelled,
        **extra,
    )


def run(
    datasets=DATASETS,
    mnist_rows: int | None = 20_000,
    data_dir: Path | None = None,
    log=print,
    **settings,
) -> list[dict]:
    """Every data set's records; ``settings`` go to :func:`run_dataset` (per_class, trials, …)."""
    records = []
    for name in datasets:
        records += run_dataset(name, mnist_rows, data_dir=data_dir, log=log, **settings)
    return records


def plot(records: list[dict], path: Path) -> None:
    """Rate vs labelled rows per class, one panel per data set, one line per embedding."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in records))
    fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 4.2), squeeze=False)
    for ax, dataset in zip(axes[0], datasets, strict=True):
        rows = [r for r in records if r["dataset"] == dataset]
        families = dict.fromkeys(r["embedding"].split("-")[0] for r in rows)
        for family in families:
            points = sorted(
                (
                    r["per_class_mean"] if r["labelled_per_class"] == "all"
                    else r["labelled_per_class"],
                    r["value"],
                    r["std"],
                )
                for r in rows
                if r["embedding"].split("-")[0] == family
            )  # fmt: skip
            x, y, e = (np.array(v, dtype=float) for v in zip(*points, strict=True))
            ax.errorbar(x, 100 * y, yerr=100 * e, marker="o", capsize=3, label=family)
        ax.set_xscale("log")
        ax.set_xlabel("labelled rows per class (last point: all training rows)")
        ax.set_ylabel("test per-class rate (%)")
        ax.set_title(dataset)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_FILES = {"usps": "usps.npz", "mnist": "mnist.npz", "20news": NEWSGROUPS_FILE}


@benchmark(
    "accuracy",
    "paper 000 section 4.1: per-class rate of ridge on raw features vs RFF, Nystrom, SQRT, HIKE, "
    "AddKPCA and scikit-learn's RBFSampler by labelled rows per class, trials as parallel tasks",
    needs=("usps.npz, mnist.npz, 20news-bydate.tar.gz (small and up; tiny uses sklearn's digits)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    from distributed import Client

    datasets, mnist_rows, per_class, trials, rff_dim = ctx.pick(
        tiny=(("digits",), None, (3, 30), 2, 256),
        small=(("digits", "usps"), None, (3, 10, 30, 100, 300), 5, 2000),
        medium=(DATASETS, 20_000, (3, 10, 30, 100, 300, 1000, 3000), 5, 2000),
        large=(DATASETS, 20_000, (3, 10, 30, 100, 300, 1000, 3000), 10, 2000),
    )
    data_dir = None
    for name in datasets:
        if name in _FILES:
            data_dir = ctx.data(_FILES[name]).parent
    with Client(ctx.scheduler) as client:
        records = run(
            datasets, mnist_rows, data_dir=data_dir, log=ctx.log, per_class=per_class,
            trials=trials, rff_dim=rff_dim, mapper=cluster_mapper(client),
        )  # fmt: skip
    plot(records, ctx.plot("rates"))
    return records
