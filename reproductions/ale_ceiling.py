"""``imgscale bench ale-ceiling``: ALE against exact Laplacian eigenmaps, linear ridge and RFF.

Where ALE's accuracy goes (paper 001 §2; Fergus et al., NIPS 2009): on one pool of rows of each
data set (MNIST, USPS, 20 Newsgroups bag-of-words), the same two classifiers run on

- **ALE**: `pipeline.embed.ALE` with paper 001's configuration (all PCA directions, B = 50,
  C_D = 500, bandwidth 0.2, ε = 0.1), fitted on every row of the pool (labels never seen);
- **exact eigenmaps**: the C_D smallest non-constant eigenvectors of the pool's normalised
  graph Laplacian I − D^{-1/2} W D^{-1/2} (W: the symmetrised 10-nearest-neighbour graph with
  Gaussian weights, σ the mean distance to the 10th neighbour), from `scipy.sparse.linalg.eigsh`,
  as random-walk eigenvectors D^{-1/2}v scaled to unit mean square, eigenvalues as Σ;

and the anchors: linear ridge on the raw features and ridge on `RandomFourierFeatures(2000)`.
Classifiers: paper 001's eq. 3 (`SemiSupervisedEigenSolver`, λ validated) and ridge (ρ validated)
on each eigen-embedding. Exact eigenmaps are transductive (the test rows are in the graph), so
both embeddings see the same pool: train rows, a labelled validation split (20% of the train
rows, it chooses λ and ρ) and test rows. Labelled rows per class: 3, 10, 30 (mean ± std over
`FEW_TRIALS` random draws), 300 and all train rows (one draw). Every figure is the test mean
per-class rate beside linear ridge's for the same labelled rows (the ratio).

Also, on the validation split: ALE's choices (bandwidth 0.1/0.2/0.4, 50 PCA directions instead of
all, ε = 0.01) with eq. 3 at 30 labelled rows per class and with every train row labelled; how
many PCA directions the C_D kept eigenfunctions come from; and ridge on ALE concatenated with the
top 50 PCA coordinates (whitened), the linear term of the issue's option.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.sparse
import scipy.sparse.linalg
from sklearn.neighbors import kneighbors_graph

from imgscale.bench import Context, benchmark, record
from imgscale.pipeline.classify import RidgeClassifier, SemiSupervisedEigenSolver
from imgscale.pipeline.embed import ALE, PCA, RandomFourierFeatures
from imgscale.pipeline.metrics import per_class_rate
from imgscale_reproductions.accuracy import NEWSGROUPS_FILE, load_dataset

LABELLED_PER_CLASS = (3, 10, 30, 300, 0)  # 0: every train row labelled
FEW_TRIALS = 3
N_NEIGHBORS = 10
RFF_DIM = 2000
LINEAR_TERM_DIRECTIONS = 50
ALE_CHOICES = {
    "paper defaults": {},
    "bandwidth 0.1": {"bandwidth": 0.1},
    "bandwidth 0.4": {"bandwidth": 0.4},
    "50 PCA directions": {"n_directions": 50},
    "epsilon 0.01": {"epsilon": 0.01},
}
FILES = {"mnist": "mnist.npz", "usps": "usps.npz", "20news": NEWSGROUPS_FILE}


def pool(name: str, train_rows: int, test_rows: int, data_dir: Path | None, seed: int = 0):
    """Rows of the pool (train, validation, test, in that order) and their index ranges."""
    data = load_dataset(name, None, seed=seed, data_dir=data_dir)
    rng = np.random.default_rng(seed)
    n_val = min(len(data["y_val"]), train_rows // 5)
    parts = {}
    for split, cap in (("train", train_rows - n_val), ("val", n_val), ("test", test_rows)):
        X, y = data[f"X_{split}"], data[f"y_{split}"]
        keep = np.sort(rng.permutation(len(y))[: min(cap, len(y))])
        parts[split] = (X[keep], y[keep])
    X = np.concatenate([parts[s][0] for s in ("train", "val", "test")])
    y = np.concatenate([parts[s][1] for s in ("train", "val", "test")])
    bounds = np.cumsum([0] + [len(parts[s][1]) for s in ("train", "val", "test")])
    split = {s: slice(bounds[i], bounds[i + 1]) for i, s in enumerate(("train", "val", "test"))}
    return np.ascontiguousarray(X, dtype=np.float32), y, split


def exact_eigenmaps(
    X: np.ndarray, n_components: int, n_neighbors: int = N_NEIGHBORS
) -> tuple[np.ndarray, np.ndarray]:
    """(n, n_components) random-walk eigenvectors of the kNN graph's normalised Laplacian, unit
    mean square, and their eigenvalues (ascending, the constant eigenvector left out)."""
    graph = kneighbors_graph(X, n_neighbors, mode="distance", include_self=False)
    scale = graph.data.reshape(len(X), n_neighbors)[:, -1].mean()
    # Floored so that a far outlier keeps its edges (exp underflows beyond ≈ 38 scales).
    graph.data = np.maximum(np.exp(-0.5 * (graph.data / scale) ** 2), np.finfo(float).tiny)
    W = graph.maximum(graph.T).tocsr()
    inv_sqrt_degree = 1 / np.sqrt(np.asarray(W.sum(axis=1)).ravel())
    A = scipy.sparse.diags(inv_sqrt_degree) @ W @ scipy.sparse.diags(inv_sqrt_degree)
    mu, v = scipy.sparse.linalg.eigsh(A, k=n_components + 1, which="LA")
    order = np.argsort(-mu)[1:]  # μ = 1 − σ; the first is the constant eigenvector
    sigma, f = 1 - mu[order], inv_sqrt_degree[:, None] * v[:, order]
    f /= np.sqrt((f**2).mean(axis=0))
    # A disconnected graph has more than one σ = 0; eq. 3 needs Σ positive.
    return f.astype(np.float32), np.maximum(sigma, 1e-9)


def _labelled_sets(y_train: np.ndarray, count: int, trials: int, seed: int):
    classes = np.unique(y_train)
    if count == 0:
        yield np.arange(len(y_train))
        return
    for trial in range(trials):
        rng = np.random.default_rng(seed + 1000 * count + trial)
        yield np.concatenate(
            [
                rng.choice(np.flatnonzero(y_train == c), min(count, (y_train == c).sum()), False)
                for c in classes
            ]
        )


def _rate(model, X: np.ndarray, y: np.ndarray) -> float:
    scores = np.asarray(model.decision_function(X))
    return per_class_rate(y, model.classes_[scores.argmax(axis=1)])


def _whitened_top_directions(X: np.ndarray, k: int) -> np.ndarray:
    pca = PCA(n_components=min(k, X.shape[1]), whiten=True).fit(X)
    return pca.transform(X)


def run_dataset(
    name: str,
    train_rows: int,
    test_rows: int,
    n_components: int,
    data_dir: Path | None,
    *,
    trials: int = FEW_TRIALS,
    rff_dim: int = RFF_DIM,
    choices: bool = True,
    log: Callable[[str], None] = print,
) -> list[dict]:
    X, y, split = pool(name, train_rows, test_rows, data_dir)
    tr, va, te = split["train"], split["val"], split["test"]
    log(f"{name}: pool {X.shape}, test rows {te.stop - te.start}")
    ale = ALE(n_components=n_components).fit(X)
    U_ale = ale.transform(X)
    per_direction = np.bincount(ale.dims_)
    records = [
        record(f"{name}_ale_directions_used", (per_direction > 0).sum(), "directions",
               peer_value=ale.n_features_in_, dataset=name, kept=n_components),
        record(f"{name}_ale_most_functions_of_one_direction", per_direction.max(), "functions",
               dataset=name, kept=n_components),
    ]  # fmt: skip
    U_exact, sigma_exact = exact_eigenmaps(X, n_components)
    log(f"{name}: ALE from {(per_direction > 0).sum()} directions; exact σ {sigma_exact[[0, -1]]}")
    features = {
        "linear ridge": (X, None),
        f"RFF-{rff_dim} + ridge": (RandomFourierFeatures(rff_dim, random_state=0).fit_transform(X),
                                   None),
        "ALE + SSL": (U_ale, ale.eigenvalues_),
        "ALE + ridge": (U_ale, None),
        "ALE + PCA-50 + ridge": (
            np.hstack([U_ale, _whitened_top_directions(X, LINEAR_TERM_DIRECTIONS)]), None),
        "exact eigenmaps + SSL": (U_exact, sigma_exact),
        "exact eigenmaps + ridge": (U_exact, None),
    }  # fmt: skip
    y_train = y[tr]
    for count in LABELLED_PER_CLASS:
        rates: dict[str, list[float]] = {method: [] for method in features}
        for chosen in _labelled_sets(y_train, count, trials if 0 < count <= 30 else 1, seed=0):
            y_l = np.full(len(y), -1)
            y_l[chosen] = y_train[chosen]
            for method, (F, sigma) in features.items():
                if sigma is None:
                    model = RidgeClassifier().fit(
                        F[: va.start], y_l[: va.start], X_val=F[va], y_val=y[va]
                    )
                else:
                    model = SemiSupervisedEigenSolver(lam=None).fit(
                        F, y_l, sigma, X_val=F[va], y_val=y[va]
                    )
                rates[method].append(_rate(model, F[te], y[te]))
        anchor = float(np.mean(rates["linear ridge"]))
        for method, values in rates.items():
            records.append(record(
                f"{name}_{_slug(method)}_{count or 'all'}", np.mean(values), "per-class rate",
                peer_value=anchor, dataset=name, method=method,
                labelled_per_class=str(count or "all"), std=float(np.std(values)),
                trials=len(values),
            ))  # fmt: skip
        log(f"{name} {count or 'all'}/class: " + ", ".join(
            f"{m} {np.mean(v):.3f}" for m, v in rates.items()))  # fmt: skip
    if choices:
        records += _ale_choices(name, X, y, split, n_components, log)
    return records


def _ale_choices(name, X, y, split, n_components, log) -> list[dict]:
    """Validation rate of ALE + eq. 3 for each of `ALE_CHOICES`, 30/class and all labelled."""
    tr, va = split["train"], split["val"]
    records = []
    for label, params in ALE_CHOICES.items():
        ale = ALE(n_components=n_components, **params).fit(X)
        U = ale.transform(X)
        for count in (30, 0):
            chosen = next(_labelled_sets(y[tr], count, 1, seed=0))
            y_l = np.full(len(y), -1)
            y_l[chosen] = y[tr][chosen]
            model = SemiSupervisedEigenSolver(lam=None).fit(
                U, y_l, ale.eigenvalues_, X_val=U[va], y_val=y[va]
            )
            rate = _rate(model, U[va], y[va])
            records.append(record(
                f"{name}_ale_choice_{_slug(label)}_{count or 'all'}", rate, "validation rate",
                dataset=name, choice=label, labelled_per_class=str(count or "all"),
                directions_used=len(np.unique(ale.dims_)),
            ))  # fmt: skip
            log(f"{name} ALE {label}, {count or 'all'}/class: validation {rate:.3f}")
    return records


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text.lower()).strip("_").replace("__", "_")


@benchmark(
    "ale-ceiling",
    "ALE vs exact Laplacian eigenmaps (kNN graph, eigsh) vs linear ridge and RFF, "
    "eq. 3 and ridge, 3/10/30/300/all labelled rows per class",
    needs=("mnist.npz, usps.npz, 20news-bydate.tar.gz (small and up; tiny uses sklearn's digits)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    datasets, train_rows, test_rows, n_components = ctx.pick(
        tiny=(("digits",), 600, 200, 20),
        small=(("usps",), 4_000, 1_000, 200),
        medium=(("mnist", "usps", "20news"), 8_000, 2_000, 500),
        large=(("mnist", "usps", "20news"), 16_000, 4_000, 500),
    )
    records = []
    for name in datasets:
        data_dir = ctx.data(FILES[name]).parent if name in FILES else None
        records += run_dataset(
            name, train_rows, test_rows, n_components, data_dir,
            trials=ctx.pick(tiny=1, small=FEW_TRIALS, medium=FEW_TRIALS, large=FEW_TRIALS),
            rff_dim=ctx.pick(tiny=200, small=RFF_DIM, medium=RFF_DIM, large=RFF_DIM),
            choices=ctx.scale != "tiny", log=ctx.log,
        )  # fmt: skip
    return records
