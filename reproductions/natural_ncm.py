"""Paper 002 (distance-based classification, new classes at near-zero cost) on CIFAR-10 GIST:
nearest class mean with the ℓ2 metric and with a learned metric, metric kNN and ridge (linear and
RFF) by per-class rate and flat top-1 / top-5 error; two held-back classes added to a metric
learned without them (`imgscale add-class`) against the metric learned on all ten; and zero-shot
class means from a two-level hierarchy (vehicles, animals) as §4.4 does with ImageNet's.

Protocol: gist-tiny rows (320-D, from `imgscale ingest` as in ``cifar10-gist``). The train
images' last `val_rows` are split ``val`` (which chooses W's iteration, k and ρ), `train_rows`
of the others split ``train``, the 10,000 test images split ``test``; the rows go into a store by
`imgscale ingest` of vectors, every method is trained by `imgscale train` and scored from the
top-5 labels `imgscale predict --split test` writes for each test image. The protocol takes any
descriptor's rows (`findings`): ``imgscale bench cifar10-cnn`` runs it on the CNN's.

- **held back**: a second store holds the same train and validation rows but cat and truck
  (one animal, one vehicle) only in split ``held``; NCM (ℓ2 and learned metric) is trained on
  its eight other classes, the two are added from their ``held`` rows by `imgscale add-class`
  (their means; W and the other classes unchanged), and the model is scored on all ten
  classes beside the same method trained on all ten; the cost is the two add-class commands
  against the training on the eight (and on all ten).
- **zero-shot** (no command does it; in-process, `pipeline.classify.zero_shot`): the held-back
  classes get no rows, only a prior mean from the means of the eight trained classes — the mean
  of their superclass's other classes, or §4.4's rule, the average of the means of every
  ancestor (superclass and root) — added to the metric learned on the eight
  (`add_class_prior`); scored on the held-back classes' test images against their means from
  their own rows and against chance. With the ℓ2 metric nothing is learned, so every class in
  turn is made the zero-shot one.

Paper 002's figures are ILSVRC'10 (1,000 classes, 4K-D Fisher vectors, top-5 flat error; Tables
2-3, Fig. 2): their level is not comparable with ten classes, where five guesses of ten say
little; what can be compared is each method's rank and the relative gaps, and the records carry
the paper's figure beside the measured one for that.

Tiny scale runs NCM and learned-metric NCM (classes added to the learned metric only) on
sklearn's digits written as JPEGs (held back: digits 6 and 7, in a hierarchy of round, straight
and curved digits): 14 commands.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from sklearn.neighbors import NearestCentroid

from imgscale.bench import Context, benchmark, record
from imgscale.jobs import models
from imgscale.pipeline.classify import prior_means
from imgscale.pipeline.metrics import evaluate_top_k
from imgscale.storage import open_store
from imgscale_reproductions.cifar10_gist import (
    TEST_FILE,
    TRAIN_FILE,
    VAL_ROWS,
    CommandRunner,
    gist_arrays,
)
from imgscale_reproductions.natural_embeddings import split
from imgscale_reproductions.ncm_accuracy import DIGIT_HIERARCHY

CIFAR_GROUPS = {
    "vehicles": ("airplane", "automobile", "ship", "truck"),
    "animals": ("bird", "cat", "deer", "dog", "frog", "horse"),
}
DIGIT_GROUPS = {group: tuple(f"digit{d}" for d in digits)
                for group, digits in DIGIT_HIERARCHY.items()}  # fmt: skip
CIFAR_HELD = ("cat", "truck")
DIGIT_HELD = ("digit6", "digit7")
TOP_K = 5
PAPER = "paper 002, ILSVRC'10 (1,000 classes, 4K-D Fisher vectors), top-5 flat error"
# Paper 002 Table 2 (4K-D features, top-5 flat error): NCM with ℓ2 on the full features, NCM and
# dynamic-target kNN with a learned 64-row metric, ridge on the full features.
PAPER_TOP5 = {"ncm": 0.680, "ncm-metric": 0.427, "knn": 0.422, "ridge": 0.546}
# Table 3 (4K-D, d = 128, test images of the 200 held-out classes in a 1,000-way choice): W learned
# on 800 classes with the 200 added by their means, against W learned on all 1,000.
PAPER_HELD_OUT = (0.425, 0.386)
# Fig. 2 (64K-D, d = 512): zero-shot prior means of the 200 held-out classes, 200-way top-5 error,
# against [5]'s 65.2 and chance 0.975.
PAPER_ZERO_SHOT = 0.643
ZERO_SHOT_RULES = {"superclass": False, "ancestors (paper rule)": True}


def method_options(metric_dim: int, max_iter: int, knn_iter: int, rff_dim: int):
    """Label → (method, `imgscale train` options) of every method this benchmark can run."""
    metric = ["--metric-dim", str(metric_dim)]
    return {
        "NCM, l2": ("ncm", ["--method", "ncm"]),
        f"NCM, learned metric d={metric_dim}": (
            "ncm-metric", ["--method", "ncm-metric", *metric, "--max-iter", str(max_iter)]),
        f"kNN, learned metric d={metric_dim}": (
            "knn", ["--method", "knn", *metric, "--max-iter", str(knn_iter)]),
        "ridge, linear": ("ridge", ["--method", "ridge"]),
        f"ridge, RFF-{rff_dim}": ("ridge-rff", [
            "--method", "ridge", "--embedding", "rff", "--n-components", str(rff_dim)]),
    }  # fmt: skip


# Each method's peer measured in the same run (by method): paper 002 sets NCM against ridge (§3.2,
# Table 2) and kNN against NCM (§4.3).
PEERS = {"ncm-metric": "ridge", "knn": "ncm-metric", "ridge": "ncm-metric", "ridge-rff": "ridge"}


def hierarchy(groups: dict[str, tuple[str, ...]], root: bool) -> tuple[list[str], list[str]]:
    """The child → parent edges of a two-level tree: each class under its group, and with
    ``root`` each group under one root (without it the groups are the roots)."""
    children, parents = [], []
    for group, classes in groups.items():
        children += list(classes)
        parents += [group] * len(classes)
        if root:
            children.append(group)
            parents.append("root")
    return children, parents


def nearest_mean_top_k(X: np.ndarray, means: np.ndarray, k: int) -> np.ndarray:
    """(n, k) indices of the k class means nearest each row in ℓ2, nearest first."""
    distances = (means.astype(np.float64) ** 2).sum(axis=1) - 2.0 * X @ means.T.astype(np.float64)
    return np.argsort(distances, axis=1, kind="stable")[:, :k]


def scores(y: np.ndarray, top: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
    """Per-class rate and flat top-1 / top-5 error of the top-k labels (of ``rows`` only)."""
    if rows is not None:
        y, top = y[rows], top[rows]
    return evaluate_top_k(y, top)


def superclass_rate(y: np.ndarray, predicted: np.ndarray, group_of: np.ndarray) -> float:
    """Share of rows predicted as a class of their own class's group."""
    return float(np.mean(group_of[predicted] == group_of[y]))


def placement(y: np.ndarray, top: np.ndarray, classes: list[int], group_of: np.ndarray) -> dict:
    """Where the rows of ``classes`` go and what those classes draw from the other rows: the
    share of their rows predicted inside their group (``superclass_rate``), and the share of
    the other rows that have one of them first (``others_top1_share``) or in their top 5
    (``others_top5_share``). A mean in the middle of the data is in most rows' top 5."""
    rows = np.isin(y, classes)
    return {
        "superclass_rate": superclass_rate(y[rows], top[rows, 0], group_of),
        "others_top1_share": float(np.mean(np.isin(top[~rows, 0], classes))),
        "others_top5_share": float(np.mean(np.isin(top[~rows], classes).any(axis=1))),
    }


class Run:
    """The stores, models and commands of one run, and what they measured."""

    def __init__(self, ctx: Context, names: list[str], folder: Path):
        self.ctx, self.names, self.folder = ctx, names, folder
        self.cli = CommandRunner(ctx)
        self.class_file = folder / "class-names.txt"
        self.class_file.write_text("".join(f"{name}\n" for name in names))

    def store(self, name: str, splits: dict[str, tuple[np.ndarray, np.ndarray]]) -> Path:
        """A new store ``name`` holding each split's (X, y) rows, by `imgscale ingest`."""
        path = self.folder / f"{name}.zarr"
        shutil.rmtree(path, ignore_errors=True)
        for split_name, (X, y) in splits.items():
            rows = self.folder / f"{name}-{split_name}.npz"
            np.savez(rows, X=X.astype(np.float32), y=y.astype(np.int64))
            self.cli.json("ingest", rows, path, "--x-key", "X", "--y-key", "y",
                          "--class-names", self.class_file, "--split", split_name)  # fmt: skip
            rows.unlink()
        return path

    def train(self, store: Path, model: str, options: list[str]) -> tuple[Path, dict, float]:
        """`imgscale train`: the model's path, the command's summary and its wall seconds."""
        path = self.folder / f"{model}.model"
        shutil.rmtree(path, ignore_errors=True)
        summary, wall = self.cli.json("train", store, path, *options)
        return path, summary, wall

    def add_classes(self, model: Path, store: Path, held: tuple[str, ...]) -> tuple[Path, float]:
        """``model`` with the ``held`` classes added from split ``held`` of ``store`` by one
        `imgscale add-class` each, saved beside it; the commands' own seconds summed."""
        out = model.with_name(f"{model.stem}-added.model")
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(model, out)
        seconds = 0.0
        for label in held:
            summary, _ = self.cli.json("add-class", out, store, "--label", label, "--split", "held")
            seconds += summary["seconds"]
        return out, seconds

    def predict(self, model: Path, store: Path) -> tuple[np.ndarray, np.ndarray]:
        """Class indices of the test rows and of their top-5 labels, by `imgscale predict`."""
        out = model.with_suffix(".parquet")
        self.cli.json("predict", model, store, out, "--split", "test", "--top-k", str(TOP_K))
        table = pq.read_table(out)
        out.unlink()
        index = {name: i for i, name in enumerate(self.names)}
        y = np.array([index[name] for name in table.column("true_label").to_pylist()])
        top = np.array([[index[name] for name in row] for row in table.column("top_k").to_pylist()])
        return y, top


@benchmark(
    "natural-ncm",
    "paper 002 on CIFAR-10 GIST: NCM (l2 and learned metric), metric kNN and ridge; two classes "
    "added by imgscale add-class vs training on all ten; zero-shot class means from a "
    "vehicles/animals hierarchy",
    needs=(f"{TRAIN_FILE}, {TEST_FILE} (small and up; tiny uses sklearn's digits without them)",),
    kind="accuracy",
)
def suite(ctx: Context) -> list[dict]:
    train_rows, val_rows = ctx.pick(
        tiny=(1_000, 300), small=(10_000, 2_000), medium=(45_000, VAL_ROWS),
        large=(45_000, VAL_ROWS),
    )  # fmt: skip
    data = gist_arrays(ctx)
    names = [str(name) for name in data["class_names"]]
    return findings(ctx, split(data, train_rows, val_rows), names, "gist-tiny",
                    ctx.scratch("natural-ncm"))  # fmt: skip


def findings(ctx: Context, parts: dict[str, np.ndarray], names: list[str], features: str,
             folder: Path) -> list[dict]:  # fmt: skip
    """Paper 002's protocol (the module's docstring) on the rows of ``parts`` (``X_train``,
    ``y_train``, ``X_val``, ``y_val``, ``X_test``, ``y_test``; labels index ``names``) of the
    descriptor ``features``, its stores and models in ``folder``: the records of every method,
    of the held-back classes added by add-class, and of zero-shot means. CIFAR-10's classes
    are held back and grouped as vehicles and animals, any other (sklearn's digits) as digits.
    ``imgscale bench cifar10-cnn`` runs it on the CNN's rows."""
    metric_dim, max_iter, knn_iter, rff_dim = ctx.pick(
        tiny=(16, 200, 100, 256), small=(64, 4_000, 1_000, 1_000),
        medium=(64, 4_000, 1_000, 4_000), large=(64, 4_000, 1_000, 4_000),
    )  # fmt: skip
    # Tiny is the CI run: it runs the fewest commands that cover each part (no kNN, no ridge;
    # classes added to the learned metric only).
    chosen, adding = ctx.pick(
        tiny=(("ncm", "ncm-metric"), ("ncm-metric",)),
        small=(None, ("ncm", "ncm-metric")),
        medium=(None, ("ncm", "ncm-metric")),
        large=(None, ("ncm", "ncm-metric")),
    )
    groups, held = (CIFAR_GROUPS, CIFAR_HELD) if "cat" in names else (DIGIT_GROUPS, DIGIT_HELD)
    run = Run(ctx, names, folder)
    held_ids = [names.index(name) for name in held]
    every = run.store("every-class", {s: (parts[f"X_{s}"], parts[f"y_{s}"])
                                      for s in ("train", "val", "test")})  # fmt: skip
    seen = {s: ~np.isin(parts[f"y_{s}"], held_ids) for s in ("train", "val")}
    held_back = run.store("held-back", {
        "train": (parts["X_train"][seen["train"]], parts["y_train"][seen["train"]]),
        "val": (parts["X_val"][seen["val"]], parts["y_val"][seen["val"]]),
        "held": (parts["X_train"][~seen["train"]], parts["y_train"][~seen["train"]]),
    })  # fmt: skip
    methods = {label: spec for label, spec in
               method_options(metric_dim, max_iter, knn_iter, rff_dim).items()
               if chosen is None or spec[0] in chosen}  # fmt: skip
    tag = {"train_rows": len(parts["y_train"]), "val_rows": len(parts["y_val"]),
           "test_rows": len(parts["y_test"]), "features": features}  # fmt: skip

    # 1. Every method on all ten classes.
    measured, trained = {}, {}
    for label, (method, options) in methods.items():
        model, summary, wall = run.train(every, method, options)
        y, top = run.predict(model, every)
        measured[method] = {"label": label, "y": y, "top": top, "all": scores(y, top),
                            "seconds": summary["seconds"], "wall": wall}  # fmt: skip
        trained[method] = model
        detail = _model_detail(model)
        measured[method]["detail"] = detail
        ctx.log(f"{label}: {measured[method]['all']} ({summary['seconds']:.1f} s) {detail}")
    records = _method_records(measured, parts, tag)

    # 2. The held-back classes added by their means to NCM trained on the other classes.
    held_rows = np.isin(measured["ncm"]["y"], held_ids)
    added = {}
    for label, (method, options) in methods.items():
        if method not in adding:
            continue
        from imgscale.bench import repetitions

        model, summary, _ = run.train(held_back, f"{method}-held-back", options)
        # Adding is cheap beside training: repeated, each time to a fresh copy of the model, and
        # each time beside the one training that every accuracy here measures.
        adds = [run.add_classes(model, held_back, held) for _ in range(repetitions(ctx))]
        plus, add_seconds = adds[-1][0], [seconds for _, seconds in adds]
        y, top = run.predict(plus, every)
        added[method] = {"base": model, "y": y, "top": top}
        records += _added_records(label, measured[method], y, top, held_rows, held,
                                  add_seconds, summary["seconds"], tag)  # fmt: skip

    # 3. Zero-shot class means.
    store = open_store(every)
    X_test = np.asarray(store.features("test").compute())
    y_test = store.labels("test").astype(np.int64)
    if not np.array_equal(y_test, measured["ncm"]["y"]):
        raise RuntimeError("the test rows read in-process differ from those imgscale predict read")
    group_of = np.array([next(g for g, members in enumerate(groups.values()) if name in members)
                         for name in names])  # fmt: skip
    records += _zero_shot_metric(added["ncm-metric"], X_test, y_test, held_ids, groups, group_of,
                                 names, tag)  # fmt: skip
    records += _zero_shot_l2(trained["ncm"], X_test, y_test, held_ids, groups, group_of, names,
                             tag)  # fmt: skip
    return records


def _model_detail(model: Path) -> dict:
    """What the training chose: ρ (ridge), W's iteration (learned metric), k (kNN)."""
    fitted, _ = models.load(model)
    classifier = models.model_steps(fitted)[-1]
    detail = {}
    for name, key in (("rho_", "rho"), ("best_iteration_", "best_iteration"),
                      ("n_neighbors_", "k")):  # fmt: skip
        if hasattr(classifier, name):
            detail[key] = float(getattr(classifier, name))
    return detail


def _method_records(measured: dict, parts: dict, tag: dict) -> list[dict]:
    """Per-class rate, top-1 and top-5 error and training time of each method, beside its peer
    (NCM-ℓ2 beside scikit-learn's NearestCentroid on the same rows) and paper 002's figure."""
    centroid = NearestCentroid().fit(parts["X_train"], parts["y_train"])
    predicted = centroid.predict(parts["X_test"])
    sklearn = scores(parts["y_test"], predicted[:, None])
    records = []
    for method, m in measured.items():
        s, label = m["all"], m["label"]
        peer = measured.get(PEERS.get(method, "ridge"))
        if method == "ncm":
            rate_peer, rate_peer_name = sklearn, "scikit-learn NearestCentroid, same rows"
        else:
            rate_peer, rate_peer_name = (peer or {}).get("all"), (peer or {}).get("label")
        paper = {}
        if method in PAPER_TOP5:
            paper = {"paper": PAPER, "paper_top5_error": PAPER_TOP5[method]}
            if PEERS.get(method, "ridge") in PAPER_TOP5:
                paper["paper_ratio"] = PAPER_TOP5[method] / PAPER_TOP5[PEERS.get(method, "ridge")]
        common = {"method": method, **tag, **m["detail"]}
        records += [
            record(f"{label}: per-class rate", s["per_class_rate"], "fraction",
                   rate_peer and rate_peer["per_class_rate"], peer=rate_peer_name, **common),
            record(f"{label}: top-1 error", s["top1_error"], "fraction",
                   rate_peer and rate_peer["top1_error"], peer=rate_peer_name, **common),
            record(f"{label}: top-5 error", s["top5_error"], "fraction",
                   peer and peer["all"]["top5_error"], peer=peer and peer["label"], **common,
                   **paper),
            record(f"{label}: train, wall", m["wall"], "s", in_command_s=m["seconds"], **common,
                   why_once="the one training whose model every accuracy here measures"),
        ]  # fmt: skip
    return [{k: v for k, v in r.items() if v is not None} for r in records]


def _added_records(label, trained_all, y, top, held_rows, held, add_seconds, train_seconds,
                   tag) -> list[dict]:  # fmt: skip
    """The model trained without ``held`` and given their means by add-class, beside the same
    method trained on all classes: on every test image, on the held classes' images, and the
    cost of adding them against that training."""
    name = f"{label}, {' and '.join(held)} added by add-class"
    peer = "the same method trained on every class"
    every, held_scores = scores(y, top), scores(y, top, held_rows)
    control = scores(trained_all["y"], trained_all["top"], held_rows)
    paper = {}
    if label.startswith("NCM, learned"):
        paper = {"paper": "paper 002 Table 3 (d = 128; 800 classes + 200 added vs 1,000)",
                 "paper_top5_error": PAPER_HELD_OUT[0], "paper_peer_top5_error": PAPER_HELD_OUT[1],
                 "paper_ratio": PAPER_HELD_OUT[0] / PAPER_HELD_OUT[1]}  # fmt: skip
    common = {"held_back": ", ".join(held), **tag}
    return [
        record(f"{name}: per-class rate", every["per_class_rate"], "fraction",
               trained_all["all"]["per_class_rate"], peer=peer, **common),
        record(f"{name}: top-1 error", every["top1_error"], "fraction",
               trained_all["all"]["top1_error"], peer=peer, **common),
        record(f"{name}: top-1 error on the added classes' images", held_scores["top1_error"],
               "fraction", control["top1_error"], peer=peer, **common),
        record(f"{name}: top-5 error on the added classes' images", held_scores["top5_error"],
               "fraction", control["top5_error"], peer=peer, **common, **paper),
        record(f"{name}: add-class of {len(held)} classes, in-command", add_seconds, "s",
               train_seconds, peer="training without them (in-command)",
               retrain_all_s=trained_all["seconds"], **common),
    ]  # fmt: skip


def _zero_shot_metric(added, X_test, y_test, held_ids, groups, group_of, names, tag) -> list[dict]:
    """The learned metric of the model trained without the held classes, given zero-shot prior
    means for them (no rows), beside the same model given their means from their own rows."""
    fitted, _ = models.load(added["base"])
    base = models.model_steps(fitted)[-1]
    labels = [names[int(c)] for c in base.classes_]
    held_rows = np.isin(y_test, held_ids)
    own = scores(added["y"], added["top"], np.isin(added["y"], held_ids))
    own_all = scores(added["y"], added["top"])
    own_placement = {f"own_{k}": v for k, v in
                     placement(added["y"], added["top"], held_ids, group_of).items()}  # fmt: skip
    chance = 1.0 / len(names)
    held_names = ", ".join(names[i] for i in held_ids)
    records = []
    for rule, root in ZERO_SHOT_RULES.items():
        priors = prior_means(labels, base.means_, *hierarchy(groups, root),
                             [names[i] for i in held_ids])  # fmt: skip
        model = copy.deepcopy(base)
        for class_id, prior in zip(held_ids, priors, strict=True):
            model.add_class_prior(base.classes_.dtype.type(class_id), prior)
        top = np.asarray(model.predict_top_k(X_test, k=TOP_K)).astype(np.int64)
        held_scores, every = scores(y_test, top, held_rows), scores(y_test, top)
        detail = {"held_back": held_names, "rule": rule, "chance": chance,
                  "top5_error": held_scores["top5_error"], "own_top5_error": own["top5_error"],
                  **placement(y_test, top, held_ids, group_of), **own_placement,
                  **tag}  # fmt: skip
        name = f"zero-shot {rule} means, learned metric"
        records += [
            record(f"{name}: the held classes' rate", held_scores["per_class_rate"], "fraction",
                   own["per_class_rate"], peer="their means from their own rows (add-class)",
                   **detail),
            record(f"{name}: the held classes' rate over chance", held_scores["per_class_rate"],
                   "fraction", chance, peer=f"chance (1 in {len(names)})", **detail),
            record(f"{name}: per-class rate, every class", every["per_class_rate"], "fraction",
                   own_all["per_class_rate"], peer="the held classes' means from their own rows",
                   **detail),
        ]  # fmt: skip
        if root:
            records[-3]["paper"] = "paper 002 Fig. 2 (64K-D, d = 512, 200-way top-5 error)"
            records[-3]["paper_top5_error"] = PAPER_ZERO_SHOT
    return records


def _zero_shot_l2(model_path, X_test, y_test, held_ids, groups, group_of, names, tag) -> list:
    """Zero-shot prior means with the ℓ2 metric (nothing learned): the held classes at once, and
    every class in turn; each beside the class's mean from its own rows."""
    fitted, _ = models.load(model_path)
    ncm = models.model_steps(fitted)[-1]
    if [int(c) for c in ncm.classes_] != list(range(len(names))):
        raise RuntimeError(f"{model_path}: expected the classes 0..{len(names) - 1}")
    means = np.asarray(ncm.means_, dtype=np.float64)
    own = nearest_mean_top_k(X_test, means, TOP_K)
    chance = 1.0 / len(names)

    def zero_shot(missing: list[int], root: bool) -> np.ndarray:
        kept = [c for c in range(len(names)) if c not in missing]
        priors = prior_means([names[c] for c in kept], means[kept], *hierarchy(groups, root),
                             [names[c] for c in missing])  # fmt: skip
        replaced = means.copy()
        replaced[missing] = priors
        return nearest_mean_top_k(X_test, replaced, TOP_K)

    records = []
    held_rows = np.isin(y_test, held_ids)
    top = zero_shot(list(held_ids), root=False)
    records.append(record(
        "zero-shot superclass means, l2: the held classes' rate",
        scores(y_test, top, held_rows)["per_class_rate"], "fraction",
        scores(y_test, own, held_rows)["per_class_rate"], peer="their means from their own rows",
        held_back=", ".join(names[i] for i in held_ids), chance=chance,
        **placement(y_test, top, list(held_ids), group_of), **tag,
    ))  # fmt: skip
    for rule, root in ZERO_SHOT_RULES.items():
        rates, own_rates, placed = [], [], []
        for c in range(len(names)):
            rows = y_test == c
            top = zero_shot([c], root)
            rates.append(float(np.mean(top[rows, 0] == c)))
            own_rates.append(float(np.mean(own[rows, 0] == c)))
            placed.append(placement(y_test, top, [c], group_of))
            if not root:
                records.append(record(
                    f"zero-shot superclass mean, l2, {names[c]} alone: its images' rate",
                    rates[-1], "fraction", own_rates[-1], peer="its mean from its own rows",
                    chance=chance, **placed[-1],
                    own_others_top1_share=float(np.mean(own[~rows, 0] == c)), **tag,
                ))  # fmt: skip
        name = f"zero-shot {rule} means, l2, each class in turn: mean rate"
        mean_placement = {k: float(np.mean([p[k] for p in placed])) for k in placed[0]}
        records += [
            record(name, np.mean(rates), "fraction", np.mean(own_rates),
                   peer="each class's mean from its own rows", rule=rule, **mean_placement,
                   **tag),
            record(f"{name} over chance", np.mean(rates), "fraction", chance,
                   peer=f"chance (1 in {len(names)})", rule=rule, **tag),
        ]  # fmt: skip
    return records
