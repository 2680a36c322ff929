"""The papers' accuracy protocols on real data, as suite benchmarks.

Paper 000 §4.1 (labelled rows per class, ρ validated, trials as parallel tasks) is ``accuracy``;
this module adds paper 001's growing labelled sets (ALE + the semi-supervised solve of eq. 3 vs
linear ridge, repeated random draws as parallel tasks; ``ale_accuracy.run_accuracy``) and paper
002's table of the projection dimension d of NCM with a learned metric, kNN, held-out classes and
the zero-shot prior (``ncm_accuracy.real_data``). Each ALE figure stands beside linear ridge's on
the same labelled rows, and each learned-metric figure beside plain ℓ2 NCM's, both measured in the
same run.
"""

from __future__ import annotations

import math

from distributed import Client

from imgscale.bench import Context, benchmark, record
from imgscale.jobs.cluster import cluster_mapper
from imgscale_reproductions import ale_accuracy, ncm_accuracy

_FILES = {"usps": "usps.npz", "mnist": "mnist.npz"}
_DATA = "usps.npz, mnist.npz (small and up; tiny uses sklearn's digits)"


def _data_dir(ctx: Context, datasets: tuple[str, ...]):
    folders = [ctx.data(_FILES[name]).parent for name in datasets if name in _FILES]
    return folders[0] if folders else None


@benchmark(
    "ale-ssl",
    "paper 001: ALE + equation-3 solve vs linear ridge, growing labelled sets, repeated draws "
    "(test MiAP and per-class rate)",
    needs=(_DATA,),
    kind="accuracy",
)
def ale_ssl(ctx: Context) -> list[dict]:
    datasets, per_class, trials = ctx.pick(
        tiny=(("digits",), (3, 30), 2),
        small=(("usps",), (3, 10, 30, 100, 300), 10),
        medium=(("usps", "mnist"), (3, 10, 30, 100, 300), 10),
        large=(("usps", "mnist"), (3, 10, 30, 100, 300), 10),
    )
    with Client(ctx.scheduler) as client:
        records = ale_accuracy.run_accuracy(
            datasets,
            per_class=per_class,
            trials=trials,
            data_dir=_data_dir(ctx, datasets),
            log=ctx.log,
            mapper=cluster_mapper(client),
        )
    ale_accuracy.plot_accuracy(records, ctx.plot("growing-sets"))
    linear = {
        (r["dataset"], r["metric"], r["labelled_per_class"]): r["value"]
        for r in records
        if r["method"] == "linear ridge"
    }
    out = []
    for r in records:
        name = (
            f"{r['dataset']}, {r['method']}, {r['labelled_per_class']} labelled/class, "
            f"{'MiAP' if r['metric'] == 'miap' else 'per-class rate'}"
        )
        extra = {k: r[k] for k in ("std", "trials", "dataset", "method", "labelled_per_class")}
        if r["method"] == "linear ridge":
            out.append(record(name, r["value"], r["unit"], **extra))
        else:
            peer = linear[(r["dataset"], r["metric"], r["labelled_per_class"])]
            out.append(record(name, r["value"], r["unit"], peer, peer="linear ridge", **extra))
    return out


@benchmark(
    "ncm-metric",
    "paper 002: NCM with a learned metric by projection dimension d vs l2 NCM, kNN and ridge; "
    "held-out classes added by their means; the zero-shot prior by images per new class",
    needs=(_DATA,),
    kind="accuracy",
)
def ncm_metric(ctx: Context) -> list[dict]:
    datasets, repeats, max_iter = ctx.pick(
        tiny=(("digits",), 1, 50),
        small=(("usps",), 3, 1000),
        medium=(("usps", "mnist"), 5, 1000),
        large=(("usps", "mnist"), 5, 1000),
    )
    result = ncm_accuracy.real_data(_data_dir(ctx, datasets), ctx.log, repeats, datasets, max_iter)
    ncm_accuracy.plot(result, ctx.plot("zero-shot"))
    return ncm_metric_records(result)


def ncm_metric_records(result: dict) -> list[dict]:
    """Records of ``ncm_accuracy.real_data``'s result, each learned-metric figure beside its
    baseline."""
    out = []
    for name, table in result["table"].items():
        l2 = table["NCM, l2"]
        for method, error in table.items():
            peer = (l2, "NCM, l2") if method != "NCM, l2" else (None, "")
            out.append(record(f"{name}: {method}, top-1 error", error, "error", peer[0],
                              peer=peer[1]))  # fmt: skip
    for name, r in result["held_out"].items():
        for k, label in enumerate(("top-1", "top-5")):
            out.append(
                record(
                    f"{name}: held-out classes added by their means, {label} error",
                    r["w_on_80pct"][k], "error", r["w_on_all"][k],
                    peer="W learned on all classes", held_out=r["held_out_classes"],
                )
            )  # fmt: skip
    for name, r in result["zero_shot"].items():
        for n, with_prior, without in zip(r["n"], r["with_prior"], r["without_prior"], strict=True):
            peer = None if math.isnan(without) else without
            out.append(
                record(
                    f"{name}: zero-shot prior, {n} images per new class, error", with_prior,
                    "error", peer, peer="same, without the prior" if peer is not None else "",
                )
            )  # fmt: skip
    return out
