"""Paper 004 (predicted neighbourhoods for lazy local learning) on binary tasks whose classes are
multi-modal, in the protocol of §4: accuracy against Global (B/U), Local (B/U) and Local+ML,
per-query latency, and the offline time on 1 and 2 workers. Beside ours (indicators regressed
directly) stand the paper's compressed indicators (D = 15% of M) on the same neighbourhoods,
and an oracle: inference on each query's own §3.1 target neighbourhood, found with its label,
which bounds what any prediction of the targets can give.

Tasks: MNIST and USPS "even vs odd" and "closed loop (0, 6, 8, 9) vs rest"; 20 Newsgroups
"comp.* vs rest" and "rec.* vs rest" (bag-of-words histograms of `accuracy.newsgroups_histograms`).
Each task pools the official train and test rows, draws a test set of 100 queries balanced
between the two labels (§4), and takes the M training rows from the rest (at most `max_rows`).
Every method sees the same features: the rows projected on the 100 leading principal components
of the training rows (§4 reduces aPascal's features to 200 the same way).
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
from distributed import Client
from sklearn.decomposition import PCA

from imgscale.bench import Context, benchmark, record
from imgscale.jobs.cluster import cluster_mapper, connect
from imgscale.pipeline.classify import PredictedNeighbourhoodClassifier, RidgeClassifier
from imgscale.pipeline.classify.local import (
    predict_from_confidences,
    recover,
    training_neighbourhoods,
)
from imgscale_reproductions.accuracy import NEWSGROUPS_FILE, newsgroups_histograms

# The 20 "bydate" newsgroups in sorted order: `newsgroups_histograms`' label i is NEWSGROUPS[i].
NEWSGROUPS = (
    "alt.atheism", "comp.graphics", "comp.os.ms-windows.misc", "comp.sys.ibm.pc.hardware",
    "comp.sys.mac.hardware", "comp.windows.x", "misc.forsale", "rec.autos", "rec.motorcycles",
    "rec.sport.baseball", "rec.sport.hockey", "sci.crypt", "sci.electronics", "sci.med",
    "sci.space", "soc.religion.christian", "talk.politics.guns", "talk.politics.mideast",
    "talk.politics.misc", "talk.religion.misc",
)  # fmt: skip
CLOSED_LOOP = (0, 6, 8, 9)
TASKS = {
    "digits": ("even", "closed-loop"),
    "usps": ("even", "closed-loop"),
    "mnist": ("even", "closed-loop"),
    "20news": ("comp", "rec"),
}
QUERIES_PER_LABEL = 50
PCA_DIM = 100
# Local+ML's metric steps at tiny scale (the default is 1,000): the toy run exercises the path.
TINY_METRIC_ITER = 20
GLOBAL_B_DRAWS = 10
RECOVERY_INSTANCES = 20
PAPER_COMPRESSION = 0.15
METHODS = ("ours", "ours compressed", "local b", "local u", "local ml", "global b", "global u")


def load_rows(dataset: str, data_dir: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """All rows (train and test pooled) as float32 in [0, 1] (or histograms) and int labels."""
    if dataset == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        return (X / 16.0).astype(np.float32), y
    if dataset == "20news":
        X_train, y_train, X_test, y_test = newsgroups_histograms(data_dir / NEWSGROUPS_FILE)
        if int(max(y_train.max(), y_test.max())) + 1 != len(NEWSGROUPS):
            raise ValueError(f"{NEWSGROUPS_FILE}: expected {len(NEWSGROUPS)} newsgroups")
        return np.vstack([X_train, X_test]), np.concatenate([y_train, y_test])
    with np.load(data_dir / f"{dataset}.npz", allow_pickle=False) as data:
        X = np.vstack([data["X_train"], data["X_test"]]).astype(np.float32)
        y = np.concatenate([data["y_train"], data["y_test"]]).astype(np.int64)
    return X / np.float32(255.0 if X.max() > 1 else 1.0), y


def binary_labels(dataset: str, task: str, y: np.ndarray) -> np.ndarray:
    """1 for the task's positive class (even digits, closed loops, comp.* or rec.*), else 0."""
    if dataset == "20news":
        prefix = f"{task}."
        positive = [i for i, name in enumerate(NEWSGROUPS) if name.startswith(prefix)]
    else:
        positive = [d for d in range(10) if d % 2 == 0] if task == "even" else list(CLOSED_LOOP)
    return np.isin(y, positive).astype(np.int64)


def split_task(y: np.ndarray, max_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train rows, test rows): 50 test queries of each label, then ≤ max_rows from the rest."""
    rng = np.random.default_rng(seed)
    test = np.concatenate(
        [rng.choice(np.flatnonzero(y == c), QUERIES_PER_LABEL, replace=False) for c in (0, 1)]
    )
    rest = np.setdiff1d(np.arange(len(y)), test)
    train = np.sort(rng.choice(rest, min(max_rows, len(rest)), replace=False))
    return train, test


def global_balanced(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray, seed):
    """Global B (§4): the larger label downsampled to the smaller; mean over draws."""
    rng = np.random.default_rng(seed)
    smaller = np.bincount(y).min()
    rates = []
    for _ in range(GLOBAL_B_DRAWS):
        rows = np.concatenate(
            [rng.choice(np.flatnonzero(y == c), smaller, replace=False) for c in (0, 1)]
        )
        model = RidgeClassifier().fit(X[rows], y[rows])
        rates.append(np.mean(model.predict(X_test) == y_test))
    return float(np.mean(rates))


def latencies(model, X_test: np.ndarray) -> np.ndarray:
    """Seconds to answer each query alone, in-process (a numpy row: no cluster round trip)."""
    out = []
    for row in X_test:
        started = time.perf_counter()
        model.predict_proba(row[None, :])
        out.append(time.perf_counter() - started)
    return np.asarray(out)


def recovery_precision(model, X: np.ndarray, method: str | None) -> tuple[float, float]:
    """Mean precision of the |y| most confident rows against the target neighbourhood y of the
    first training instances (from their predicted indicators, or compressed indicators
    recovered by `method`), and the median seconds per recovery."""
    signs = model.sensing_matrix()
    bounds = model.neighbourhood_indptr_
    precisions, seconds = [], []
    for n, instance in enumerate(model.neighbourhood_instances_[:RECOVERY_INSTANCES]):
        members = model.neighbourhood_members_[bounds[n] : bounds[n + 1]]
        z = (X[instance] - model.regression_mean_) @ model.regression_coef_ + model.target_mean_
        started = time.perf_counter()
        if signs is None:
            confidences = z
        else:
            phi = signs.astype(np.float32) / np.float32(np.sqrt(len(signs)))
            confidences = recover(z, phi, len(members), method)[0]
        seconds.append(time.perf_counter() - started)
        top = np.argsort(-confidences, kind="stable")[: len(members)]
        precisions.append(np.isin(top, members).mean())
    return float(np.mean(precisions)), float(np.median(seconds))


def own_targets(model, X_test: np.ndarray, y_test: np.ndarray) -> list[np.ndarray]:
    """Each test query's own §3.1 target neighbourhood among the training rows, found with its
    true label: what a perfect predictor of targets would give (it knows the label)."""
    X, y_index = model.training_rows_, model.training_index_
    labels = np.searchsorted(model.classes_, y_test)
    targets = []
    for row, label in zip(X_test, labels, strict=True):
        rows = np.vstack([X, row[None, :]])
        members, _, _ = training_neighbourhoods(
            rows, np.append(y_index, label), rows, len(model.classes_), model.sizes,
            model.n_samples, model.alpha, 0, model.balanced, model.label_weights(),
            model.prior(), np.array([len(X)]),
        )  # fmt: skip
        targets.append(members[0])
    return targets


def oracle_records(model, X_test, y_test, name: str, tag: dict) -> list[dict]:
    """Inference on each query's own target neighbourhood (`own_targets`) against ours, and the
    precision of ours' |y| most confident rows and of the |y| nearest rows against that target:
    whether ours loses in predicting the targets or in the targets themselves."""
    X, y_index = model.training_rows_, model.training_index_
    targets = own_targets(model, X_test, y_test)
    indicators = np.zeros((len(X_test), len(X)))
    for q, members in enumerate(targets):
        indicators[q, members] = 1.0
    posteriors, _ = predict_from_confidences(
        X, y_index, len(model.classes_), X_test, indicators, model.sizes, model.alpha,
        model.balanced, model.label_weights(), model.prior(),
    )  # fmt: skip
    oracle = float(np.mean(model.classes_[posteriors.argmax(axis=1)] == y_test))
    confidences = (X_test - model.regression_mean_) @ model.regression_coef_ + model.target_mean_
    distances = (X.astype(np.float64) ** 2).sum(axis=1) - 2.0 * X_test @ X.T
    ours, nearest = [], []
    for q, members in enumerate(targets):
        ours.append(np.isin(np.argsort(-confidences[q])[: len(members)], members).mean())
        nearest.append(np.isin(np.argsort(distances[q])[: len(members)], members).mean())
    return [
        record(f"{name} accuracy oracle", oracle, "fraction", float(np.mean(model.predict(X_test)
               == y_test)), peer="ours", **tag),
        record(f"{name} target precision ours", np.mean(ours), "fraction", np.mean(nearest),
               peer="k nearest", **tag),
    ]  # fmt: skip


def run_task(
    dataset, task, X_all, y_digits, params, max_rows, client, log, seed=0, repeats=3
) -> list[dict]:
    y_all = binary_labels(dataset, task, y_digits)
    train, test = split_task(y_all, max_rows, seed)
    pca = PCA(min(PCA_DIM, X_all.shape[1]), random_state=seed).fit(X_all[train])
    X, X_test = (pca.transform(X_all[rows]).astype(np.float32) for rows in (train, test))
    y, y_test = y_all[train], y_all[test]
    name = f"{dataset} {task}"
    tag = {"dataset": dataset, "task": task, "rows": len(train)}

    def rate(model) -> float:
        return float(np.mean(model.predict(X_test) == y_test))

    started = time.perf_counter()
    ours = PredictedNeighbourhoodClassifier(**params, random_state=seed)
    ours.fit(X, y, cluster_mapper(client))
    offline = time.perf_counter() - started
    # The paper's §3.2 on the same target neighbourhoods: indicators compressed to D = 15% of M.
    compressed = copy.deepcopy(ours).set_params(compression=PAPER_COMPRESSION).fit_regression()
    fixed = {k: v for k, v in params.items() if k in ("sizes", "alpha", "metric_max_iter")}
    local_b = PredictedNeighbourhoodClassifier(neighbourhood="nearest", **fixed).fit(X, y)
    local_u = PredictedNeighbourhoodClassifier(
        neighbourhood="nearest", balanced=False, **fixed
    ).fit(X, y)
    local_ml = PredictedNeighbourhoodClassifier(
        neighbourhood="nearest", metric="learned", **fixed, random_state=seed
    ).fit(X, y)
    rates = {
        "ours": rate(ours),
        "ours_compressed": rate(compressed),
        "local_b": rate(local_b),
        "local_u": rate(local_u),
        "local_ml": rate(local_ml),
        "global_u": rate(RidgeClassifier().fit(X, y)),
        "global_b": global_balanced(X, y, X_test, y_test, seed),
    }
    from imgscale.bench import interleaved

    # Each round times every query of ours, then of Local B: its median and 95th percentile.
    ours_seconds, local_seconds = interleaved(
        lambda: latencies(ours, X_test), lambda: latencies(local_b, X_test), repeats=repeats
    )
    log(f"{name}: {rates}; offline {offline:.0f} s")
    records = [
        record(f"{name} accuracy ours", rates["ours"], "fraction", rates["local_b"],
               peer="Local B", **tag),
        record(f"{name} accuracy ours compressed", rates["ours_compressed"], "fraction",
               rates["ours"], peer="ours", **tag),
        *(record(f"{name} accuracy {m.replace('_', ' ')}", rates[m], "fraction", **tag)
          for m in ("local_b", "local_u", "local_ml", "global_b", "global_u")),
        record(f"{name} latency median ours", [np.median(s) for s in ours_seconds], "s",
               [np.median(s) for s in local_seconds], peer="Local B", **tag),
        record(f"{name} latency p95 ours", [np.percentile(s, 95) for s in ours_seconds], "s",
               [np.percentile(s, 95) for s in local_seconds], peer="Local B", **tag),
        record(f"{name} offline fit ours", offline, "s", **tag,
               why_once="the fit of the model every other figure measures"),
        *oracle_records(ours, X_test, y_test, name, tag),
    ]  # fmt: skip
    return records, compressed, X


def recovery_records(compressed, X, name: str, repeats: int = 3) -> list[dict]:
    """Precision on the training instances' own neighbourhoods: one-step correlation against
    OMP recovery of the compressed indicators (in turn, ``repeats`` rounds), and the
    uncompressed regression against both."""
    from imgscale.bench import interleaved

    omp, correlation = interleaved(
        lambda: recovery_precision(compressed, X, "omp"),
        lambda: recovery_precision(compressed, X, "correlation"),
        repeats=repeats,
    )
    uncompressed = copy.deepcopy(compressed).set_params(compression=None).fit_regression()
    direct = recovery_precision(uncompressed, X, None)
    return [
        record(f"{name} recovery precision correlation", correlation[0][0], "fraction",
               omp[0][0], peer="OMP"),
        record(f"{name} recovery seconds correlation", [c[1] for c in correlation], "s",
               [o[1] for o in omp], peer="OMP"),
        record(f"{name} recovery precision uncompressed", direct[0], "fraction",
               correlation[0][0], peer="correlation"),
    ]  # fmt: skip


def offline_scaling(X, y, params, seed, name: str, repeats: int = 3) -> list[dict]:
    """The offline fit (N × K × S local classifiers) on a fresh 1-worker and 2-worker cluster,
    ``repeats`` times on each; the i-th fits paired."""
    seconds = {}
    for workers in (1, 2):
        seconds[workers] = []
        with connect(n_workers=workers, quiet=True) as client:
            for _ in range(repeats):
                started = time.perf_counter()
                PredictedNeighbourhoodClassifier(**params, random_state=seed).fit(
                    X, y, cluster_mapper(client)
                )
                seconds[workers].append(time.perf_counter() - started)
    return [
        record(f"{name} offline fit 2 workers", seconds[2], "s", seconds[1], peer="1 worker"),
    ]


@benchmark(
    "local",
    "paper 004 section 4: predicted neighbourhoods vs Global B/U, Local B/U and Local+ML on "
    "binary multi-modal tasks (100 balanced queries), per-query latency, offline 1 vs 2 workers",
    needs=("usps.npz, mnist.npz, 20news-bydate.tar.gz (small and up; tiny uses sklearn's digits)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    # tiny: one task and no 1 -> 2 worker fits, so the whole suite's toy run stays in minutes.
    datasets, max_rows, params, tasks, scaling = ctx.pick(
        tiny=(("digits",), 2000,
              {"n_neighbourhoods": 100, "sizes": (20, 40), "n_samples": 2,
               "metric_max_iter": TINY_METRIC_ITER}, 1, False),
        small=(("usps",), 10_000,
               {"n_neighbourhoods": 500, "sizes": (50, 100, 200, 400), "n_samples": 5}, 2, True),
        medium=(("mnist", "usps", "20news"), 10_000,
                {"n_neighbourhoods": 2000, "sizes": (50, 100, 200, 400), "n_samples": 5}, 2,
                True),
        large=(("mnist", "usps", "20news"), 10_000,
               {"n_neighbourhoods": 2000, "sizes": (50, 100, 200, 400), "n_samples": 10}, 2,
               True),
    )  # fmt: skip
    from imgscale.bench import repetitions

    records = []
    first = None
    with Client(ctx.scheduler) as client:
        for dataset in datasets:
            data_dir = None
            if dataset != "digits":
                filename = NEWSGROUPS_FILE if dataset == "20news" else f"{dataset}.npz"
                data_dir = ctx.data(filename).parent
            X_all, y_all = load_rows(dataset, data_dir)
            for task in TASKS[dataset][:tasks]:
                task_records, model, X = run_task(
                    dataset,
                    task,
                    X_all,
                    y_all,
                    params,
                    max_rows,
                    client,
                    ctx.log,
                    repeats=repetitions(ctx),
                )
                records += task_records
                if first is None:
                    first = (dataset, task, model, X, binary_labels(dataset, task, y_all))
    dataset, task, model, X, _ = first
    records += recovery_records(model, X, f"{dataset} {task}", repetitions(ctx))
    y = model.classes_[model.training_index_]
    if scaling:
        records += offline_scaling(X, y, params, 0, f"{dataset} {task}", repetitions(ctx))
    for method in METHODS:
        values = [r["value"] for r in records if r["name"].endswith(f"accuracy {method}")]
        records.append(record(f"mean accuracy {method}", np.mean(values), "fraction"))
    return records
