"""Paper 002 on MNIST and USPS (Tables 2–3, Fig. 2 settings): the error of NCM with a learned
metric by projection dimension d beside ℓ2 NCM, kNN and ridge; held-out classes added by their
means; the zero-shot prior from a class hierarchy by images per new class (the ``ncm-metric``
benchmark of :mod:`imgscale_reproductions.protocols`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from imgscale.pipeline.classify import MetricNearestClassMean, NearestClassMean

# Digits grouped by shape for the zero-shot prior: child → parent (leaves are the digits).
DIGIT_HIERARCHY = {
    "round": ["0", "6", "8", "9"],
    "straight": ["1", "4", "7"],
    "curved": ["2", "3", "5"],
}
SHOT_COUNTS = (0, 1, 2, 5, 10, 100)
PRIOR_WEIGHTS = (0.5, 1, 2, 5, 10, 20, 50)


def load_digits_npz(data_dir: Path | None, name: str):
    """Train and test rows of ``name``: "usps" or "mnist" from the data folder, or "digits"
    (scikit-learn's 8×8 digits, a fixed 1,200 / 597 split) for toy runs without data."""
    if name == "digits":
        from sklearn.datasets import load_digits

        X, y = load_digits(return_X_y=True)
        X = (X / 16).astype(np.float32)
        return X[:1200], y[:1200], X[1200:], y[1200:]
    with np.load(data_dir / f"{name}.npz", allow_pickle=False) as data:
        X, y = data["X_train"].astype(np.float32), data["y_train"].astype(np.int64)
        Xt, yt = data["X_test"].astype(np.float32), data["y_test"].astype(np.int64)
    if name == "mnist":
        X, Xt = X / 255, Xt / 255
    return X, y, Xt, yt


def real_data(
    data_dir: Path | None,
    log: Callable[[str], None],
    repeats: int = 5,
    datasets: tuple[str, ...] = ("usps", "mnist"),
    max_iter: int = 1000,
) -> dict:
    """Error table, held-out-class and zero-shot results on MNIST and USPS (+ a synthetic tree);
    ``max_iter`` caps every metric's SGD iterations (a toy run uses few)."""
    from imgscale.pipeline.classify import MetricKNeighborsClassifier, RidgeClassifier

    out: dict = {"table": {}, "held_out": {}, "zero_shot": {}, "sgd": {}}
    for name in datasets:
        X, y, Xt, yt = load_digits_npz(data_dir, name)
        rng = np.random.default_rng(0)
        val = rng.choice(len(X), len(X) // 10, replace=False)
        train = np.setdiff1d(np.arange(len(X)), val)
        Xtr, ytr, Xv, yv = X[train], y[train], X[val], y[val]
        table = out["table"][name] = {}

        def error(model, Xt=Xt, yt=yt) -> float:
            return float(np.mean(model.predict(Xt) != yt))

        table["NCM, l2"] = error(NearestClassMean().fit(Xtr, ytr))
        pca = MetricNearestClassMean(n_components=64, max_iter=0).fit(Xtr, ytr, Xv, yv)
        table["NCM, PCA(64) + l2"] = error(pca)
        for d in [d for d in (16, 32, 64, 128) if d <= X.shape[1]]:
            started = time.perf_counter()
            model = _learned_ncm(d, max_iter=max_iter).fit(Xtr, ytr, Xv, yv)
            table[f"NCM, learned metric d={d}"] = error(model)
            out["sgd"][f"{name} d={d}"] = {
                "seconds": time.perf_counter() - started,
                "iterations": model.validation_iterations_.tolist(),
                "validation_error": model.validation_error_.tolist(),
                "best_iteration": model.best_iteration_,
            }
            log(f"{name} NCM d={d}: {table[f'NCM, learned metric d={d}']:.4f}")
        plain = MetricKNeighborsClassifier(n_components=None, metric_learning=False)
        table["kNN, l2 (k validated)"] = error(plain.fit(Xtr, ytr, Xv, yv))
        learned = MetricKNeighborsClassifier(
            n_components=64, max_iter=min(500, max_iter), validate_every=50, random_state=0
        ).fit(Xtr, ytr, Xv, yv)
        table["kNN, learned metric d=64 (k validated)"] = error(learned)
        ridge = RidgeClassifier().fit(Xtr, ytr, X_val=Xv, y_val=yv)
        table["ridge (linear baseline, rho validated)"] = error(ridge)
        log(f"{name}: {table}")
        out["held_out"][name] = _held_out(Xtr, ytr, Xv, yv, Xt, yt, max_iter)
        out["zero_shot"][name] = _zero_shot(
            Xtr, ytr, Xv, yv, Xt, yt, repeats, _digit_tree(), min(300, max_iter)
        )
        log(f"{name} held-out/zero-shot done")
    out["zero_shot"]["synthetic tree"] = _zero_shot(
        *_synthetic_tree_data(), repeats, None, min(300, max_iter)
    )
    return out


def _learned_ncm(d: int, **kwargs) -> MetricNearestClassMean:
    params = {"max_iter": 1000, "validate_every": 50, "validation_k": 1, "random_state": 0}
    return MetricNearestClassMean(n_components=d, **{**params, **kwargs})


def _top_errors(model, X, y) -> tuple[float, float]:
    top = model.predict_top_k(X, k=5)
    return float(np.mean(top[:, 0] != y)), float(np.mean(~(top == y[:, None]).any(axis=1)))


def _held_out(Xtr, ytr, Xv, yv, Xt, yt, max_iter: int) -> dict:
    """W on 80% of the classes, the other 20% added by their means (Table 3's setting)."""
    classes = np.unique(ytr)
    held = np.random.default_rng(1).choice(classes, max(1, len(classes) // 5), replace=False)
    seen = ~np.isin(ytr, held)
    model = _learned_ncm(32, max_iter=max_iter).fit(
        Xtr[seen], ytr[seen], Xv[~np.isin(yv, held)], yv[~np.isin(yv, held)]
    )
    for c in held:
        model.add_class(Xtr[ytr == c], c)
    control = _learned_ncm(32, max_iter=max_iter).fit(Xtr, ytr, Xv, yv)
    rows = np.isin(yt, held)
    return {
        "held_out_classes": held.tolist(),
        "w_on_80pct": _top_errors(model, Xt[rows], yt[rows]),
        "w_on_all": _top_errors(control, Xt[rows], yt[rows]),
    }


def _digit_tree():
    children, parents = [], []
    for group, digits in DIGIT_HIERARCHY.items():
        children += [int(d) for d in digits] + [group]
        parents += [group] * len(digits) + ["root"]
    return children, parents


def _zero_shot(Xtr, ytr, Xv, yv, Xt, yt, repeats, tree, max_iter: int) -> dict:
    """Error on held-out classes vs n images per new class, with and without the prior (Fig. 2)."""
    from imgscale.pipeline.classify import prior_means

    classes = np.unique(ytr)
    children, parents = tree if tree is not None else _synthetic_tree()
    result = {"n": list(SHOT_COUNTS), "with_prior": [], "without_prior": [], "weights": []}
    rng = np.random.default_rng(2)
    per_repeat = {"with": [], "without": []}
    for _ in range(repeats):
        held = rng.choice(classes, max(2, len(classes) // 5), replace=False)
        seen = ~np.isin(ytr, held)
        base = _learned_ncm(32, max_iter=max_iter).fit(Xtr[seen], ytr[seen])
        priors = prior_means(base.classes_, base.means_, children, parents, held)
        pool = {c: rng.permutation(np.flatnonzero(ytr == c)) for c in held}
        rows, val_rows = np.isin(yt, held), np.isin(yv, held)
        with_prior, without_prior, weights = [], [], []
        for n in SHOT_COUNTS:

            def model_with(weight, n=n, base=base, held=held, priors=priors, pool=pool):
                model = _copy_metric(base, prior_weight=weight)
                for c, prior in zip(held, priors, strict=True):
                    model.add_class_prior(c, prior)
                    if n:
                        model.partial_fit(Xtr[pool[c][:n]], np.full(n, c))
                return model

            # m validated on the validation rows of the held-out classes.
            scores = [np.mean(model_with(w).predict(Xv[val_rows]) != yv[val_rows])
                      for w in PRIOR_WEIGHTS]  # fmt: skip
            weight = PRIOR_WEIGHTS[int(np.argmin(scores))] if n else 1.0
            weights.append(weight)
            with_prior.append(float(np.mean(model_with(weight).predict(Xt[rows]) != yt[rows])))
            if n == 0:
                without_prior.append(float("nan"))
                continue
            model = _copy_metric(base)
            for c in held:
                model.add_class(Xtr[pool[c][:n]], c)
            without_prior.append(float(np.mean(model.predict(Xt[rows]) != yt[rows])))
        per_repeat["with"].append(with_prior), per_repeat["without"].append(without_prior)
        result["weights"].append(weights)
    for key in ("with", "without"):
        values = np.asarray(per_repeat[key])
        result[f"{key}_prior"] = values.mean(axis=0).tolist()
        result[f"{key}_prior_std"] = values.std(axis=0).tolist()
    return result


def _copy_metric(model: MetricNearestClassMean, **params) -> MetricNearestClassMean:
    copy = MetricNearestClassMean(**{**model.get_params(), **params})
    for name, value in vars(model).items():
        if name.endswith("_"):
            setattr(copy, name, value.copy() if isinstance(value, np.ndarray) else value)
    return copy


_SYNTHETIC = {"parents": 10, "children": 10, "dim": 64, "per_class": 120}


def _synthetic_tree():
    children, parents = [], []
    for p in range(_SYNTHETIC["parents"]):
        for c in range(_SYNTHETIC["children"]):
            children.append(p * _SYNTHETIC["children"] + c)
            parents.append(f"p{p}")
        children.append(f"p{p}")
        parents.append("root")
    return children, parents


def _synthetic_tree_data():
    """Leaf centres = parent centre + smaller offset: siblings resemble each other."""
    rng = np.random.default_rng(3)
    n_p, n_c, dim, per = (_SYNTHETIC[k] for k in ("parents", "children", "dim", "per_class"))
    parent_centres = rng.normal(size=(n_p, dim)) * 1.0
    leaf = np.repeat(parent_centres, n_c, axis=0) + rng.normal(size=(n_p * n_c, dim)) * 0.4

    def draw(per_class):
        y = np.repeat(np.arange(n_p * n_c), per_class)
        return (leaf[y] + rng.normal(size=(len(y), dim)) * 1.5).astype(np.float32), y

    (Xtr, ytr), (Xv, yv), (Xt, yt) = draw(per), draw(20), draw(30)
    return Xtr, ytr, Xv, yv, Xt, yt


def plot(result: dict, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["zero_shot"])
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4))
    x = np.arange(len(SHOT_COUNTS))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        r = result["zero_shot"][name]
        for key, label in (("with_prior", "with zero-shot prior"), ("without_prior", "without")):
            ax.errorbar(x, r[key], yerr=r[f"{key}_std"], marker="o", capsize=3, label=label)
        ax.set_xticks(x, [str(n) for n in SHOT_COUNTS])
        ax.set_xlabel("images per new class (n)")
        ax.set_ylabel("top-1 error on new classes")
        ax.set_title(name)
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].legend()
    fig.suptitle("NCM, learned metric (d = 32): new classes from n images, ± 1 std over repeats")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
