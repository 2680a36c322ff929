"""`imgscale` commands on models: train, predict, evaluate, plot, add-class, embed, update, and
the demo that trains two."""

from __future__ import annotations

from typing import Any

import click

from imgscale.jobs import methods
from imgscale.jobs.cli.options import (
    StorePath,
    check_new_path,
    json_option,
    option_given,
    scheduler_option,
    verbose_option,
)
from imgscale.jobs.cli.printers import end_progress_line, print_summary, validation_line, warn
from imgscale.jobs.runs import RecordedCommand, report, report_progress

# Method options served by a flag `train` declares itself (--n-components: an embedding's
# dimension with --embedding, else that of a method that takes one, e.g. hope).
TRAIN_OWN_FLAGS = ("n_components",)


def method_options(command):
    """The options every `jobs.methods` entry declares, each once, as flags of ``train``."""
    for option in reversed(methods.method_options()):
        if option.name in TRAIN_OWN_FLAGS:
            continue
        kind = click.Choice(option.type) if isinstance(option.type, tuple) else option.type
        command = click.option(
            option.flag,
            option.name,
            type=kind,
            default=option.default,
            show_default=option.default is not None,
            help=f"{'/'.join(methods.methods_taking(option))}: {option.help}",
        )(command)
    return command


# click keeps the lines of a paragraph that starts with \b as they are.
METHOD_LIST = "\b\nMethods:\n" + "\n".join(
    f"  {m.name:<12} {m.help}" for m in methods.METHODS.values()
)


@click.command(cls=RecordedCommand, epilog=METHOD_LIST)
@click.argument("store", type=StorePath(exists=True))
@click.argument("model", type=StorePath())
@click.option(
    "--method",
    type=click.Choice(list(methods.METHODS)),
    default="ridge",
    show_default=True,
    help="What to train (see Methods below).",
)
@click.option("--split", default="train", show_default=True, help="Rows to train on.")
@click.option(
    "--val-split", default="val", show_default=True, help="Rows that choose ρ, λ, or W and k."
)
@click.option(
    "--embedding",
    type=click.Choice(list(methods.EMBEDDINGS)),
    help="Embed rows first (fitted on all SPLIT rows, applied on the fly; paper 000 §3.2).",
)
@click.option(
    "--n-components",
    type=int,
    help="Embedding dimension (--embedding: default paper 000 §4.1; hope: 2).",
)
@click.option("--gamma", type=float, help="RFF/Nyström γ (default: 50th-neighbour bandwidth).")
@click.option(
    "--per-class",
    type=click.IntRange(min=1),
    help="Learn from N labelled rows a class of SPLIT, a seeded random sample; the other rows "
    "count as unlabelled (centering, embedding fit: paper 000 §4.1).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the --per-class sample (one seed gives nested samples across N).",
)
@method_options
@scheduler_option
@json_option
@verbose_option
@click.pass_context
def train(
    ctx, store, model, method, split, val_split, embedding, n_components, gamma, per_class, seed,
    scheduler, as_json, **options,
) -> None:  # fmt: skip
    """Train a classifier on STORE and save it to MODEL (zarr + JSON, no pickle)."""
    from imgscale.jobs.models import model_steps
    from imgscale.jobs.train import train_and_save

    check_new_path(model, "MODEL")
    given = {name: value for name, value in options.items() if option_given(ctx, name)}
    method_dim = "n_components" in {option.name for option in methods.METHODS[method].options}
    if embedding is None and method_dim and n_components is not None:
        given["n_components"] = n_components
    try:
        methods.resolve_options(methods.METHODS[method], given)
        if option_given(ctx, "val_split"):
            methods.check_val_split(methods.METHODS[method])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    if embedding is None and (gamma is not None or (n_components is not None and not method_dim)):
        raise click.UsageError("--n-components and --gamma need --embedding")
    if option_given(ctx, "seed") and per_class is None:
        raise click.UsageError("--seed draws the --per-class sample: give --per-class too")
    fitted, summary = train_and_save(
        store, model, method, options=given, split=split, val_split=val_split,
        val_split_given=option_given(ctx, "val_split"), embedding=embedding,
        n_components=n_components, gamma=gamma, per_class=per_class, seed=seed,
        scheduler=scheduler, quiet=as_json, say=lambda line: click.echo(line, err=True),
        on_validation=validation_line("train", quiet=as_json),
    )  # fmt: skip
    end_progress_line()  # early stopping leaves the validation line unfinished
    steps = model_steps(fitted)
    classifier = steps[-1]
    detail = f", rho={classifier.rho_:g}" if hasattr(classifier, "rho_") else ""
    if hasattr(classifier, "best_iteration_"):
        detail += f", d={classifier.n_components}, {best_iteration_text(classifier)}"
    if embedding is not None:
        detail += f", {embedding} embedding to {steps[0].n_components_} dims"
    message = f"{model}: {method}{detail} ({summary['seconds']:.1f} s)"
    print_summary(summary, as_json, message)


def best_iteration_text(classifier: Any) -> str:
    """Where SGD's validation chose W, and whether it was the last validation: the validation
    error still falling when the iterations ran out, so more of them may score higher."""
    best, last = classifier.best_iteration_, classifier.n_iter_
    text = f"best W at iteration {best}"
    if 0 < best == last:
        text += f" of {last} (the last: still improving; a larger --max-iter may score higher)"
    return text


@click.command(cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.argument("out", type=StorePath())
@click.option("--split", default=None, help="Only rows of this split (default: all).")
@click.option("--top-k", default=5, show_default=True, help="Labels kept per row.")
@click.option(
    "--new",
    "new_rows",
    is_flag=True,
    help="OUT is a folder of parquet parts: predict only the rows (of --split, if given) past "
    "its last part, as a new part (for scheduled runs as the store grows).",
)
@scheduler_option
@json_option
@verbose_option
def predict(model, store, out, split, top_k, new_rows, scheduler, as_json) -> None:
    """Write MODEL's predictions for STORE's rows to the parquet file OUT."""
    from imgscale.jobs.predict import predict_saved_model
    from imgscale.storage import is_url

    if new_rows and is_url(out):
        raise click.UsageError("--new predicts new rows into a local folder, not a URL")
    if not new_rows:
        check_new_path(out, "OUT")
    summary = predict_saved_model(
        model, store, out, split=split, top_k=top_k, new_rows=new_rows, scheduler=scheduler,
        quiet=as_json, warn=warn,
    )  # fmt: skip
    rows, first = summary["rows"], summary["first_row"]
    report({"rows": rows})
    message = f"{out}: {rows} rows" + (f" from row {first}" if new_rows else "")
    print_summary(summary, as_json, message, recorded=False)


@click.command(cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.option("--split", default="test", show_default=True)
@scheduler_option
@json_option
@verbose_option
def evaluate(model, store, split, scheduler, as_json) -> None:
    """Per-class rate, top-1/top-5 flat error and MiAP of MODEL on STORE's labelled rows."""
    from imgscale.jobs.evaluate import evaluate_saved_model

    result = evaluate_saved_model(
        model, store, split, scheduler=scheduler, quiet=as_json, warn=warn
    )
    lines = [
        f"{key:>16}: {value:.4f}" if isinstance(value, float) else f"{key:>16}: {value}"
        for key, value in result.items()
    ]
    print_summary(result, as_json, "\n".join(lines), err=False)


@click.command()
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--split", default="test", show_default=True, help="Rows to plot.")
@click.option(
    "--max-points", default=5000, show_default=True, help="Rows sampled when the split is larger."
)
@scheduler_option
@json_option
@verbose_option
def plot(model, store, out, split, max_points, scheduler, as_json) -> None:
    """A PNG scatter of MODEL's 2-D embedding of STORE's rows by class, exemplars circled."""
    from imgscale.jobs.plot import plot_saved_model

    check_new_path(out, "OUT", local_only=True)
    drawn = plot_saved_model(
        model, store, out, split=split, max_points=max_points, scheduler=scheduler,
        quiet=as_json,
    )  # fmt: skip
    message = (
        f"{out}: {drawn['points']} rows of {drawn['classes']} classes, "
        f"{drawn['exemplars']} exemplars"
    )
    print_summary(drawn, as_json, message, recorded=False)


@click.command("add-class", cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.option("--label", required=True, help="Class name in STORE whose rows give the mean.")
@click.option("--split", default="train", show_default=True, help="Rows whose mean is the class's.")
@click.option("--out", type=StorePath(), help="Save here instead of replacing MODEL.")
@click.option(
    "--replace", is_flag=True, help="MODEL has class LABEL: its mean becomes that of these rows."
)
@scheduler_option
@json_option
@verbose_option
def add_class(model, store, label, split, out, replace, scheduler, as_json) -> None:
    """Add class LABEL to an NCM MODEL from its rows in STORE; W and other classes unchanged.

    Classes are matched by name, so STORE may number its classes differently from the store
    MODEL was trained on.
    """
    from imgscale.jobs.add_class import add_class_from_store

    check_new_path(out, "--out")
    summary = add_class_from_store(
        model, store, label, split=split, out=out, replace=replace, scheduler=scheduler,
        quiet=as_json,
    )  # fmt: skip
    warn(summary["store_changes"])
    source = "codes" if summary["from_codes"] else "rows"
    message = (
        f"{out or model}: added {label!r} (label {summary['class_index']}) from "
        f"{summary['rows']} {source}; {summary['classes']} classes ({summary['seconds']:.2f} s)"
    )
    print_summary(summary, as_json, message, err=False)


@click.command("embed", cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("src", type=StorePath(exists=True))
@click.argument("dst", type=StorePath())
@click.option("--batch-rows", default=1000, show_default=True, help="Rows per committed batch.")
@click.option("--max-rows", type=int, help="Embed at most this many rows in this run.")
@scheduler_option
@json_option
@verbose_option
def embed_command(model, src, dst, batch_rows, max_rows, scheduler, as_json) -> None:
    """Embed the rows of store SRC that DST lacks with MODEL's embedding, appending to DST.

    DST records the source batches it holds by id and content digest (its batch ids are
    BATCH@DIGEST/START-STOP, rows of source batch BATCH), so a rerun embeds nothing twice, a
    killed run resumes where it stopped (paper 001 §3), and the rows of a source batch removed
    or ingested again with other rows since are removed from DST (and the new rows embedded).
    """
    from imgscale.jobs.embed_store import embed_store

    summary = embed_store(
        model, src, dst, batch_rows=batch_rows, max_rows=max_rows, scheduler=scheduler,
        quiet=as_json, progress=lambda done, total: report_progress(done, total, "embed"),
    )  # fmt: skip
    stale = summary["stale_batches_removed"]
    removed = (
        f"; {summary['stale_rows_removed']} rows of source batches {stale} that changed or were "
        "removed since were removed"
        if stale
        else ""
    )
    print_summary(
        summary,
        as_json,
        f"{dst}: {summary['rows_embedded']} rows embedded in {summary['batches_committed']} "
        f"batches, {summary['rows_after']} of {summary['source_rows']} source rows held"
        f"{removed} ({summary['seconds']:.1f} s, {summary['rows_per_second']:.0f} rows/s)",
    )


@click.command(cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.option("--out", type=StorePath(), help="Save the updated model here (default: MODEL).")
@click.option(
    "--refit-embedding",
    is_flag=True,
    help="ssl: refit the embedding's eigenfunctions on the rows as they now are (a train "
    "again; by default they are kept and only the labelled statistics follow the store).",
)
@scheduler_option
@json_option
@verbose_option
def update(model, store, out, refit_embedding, scheduler, as_json) -> None:
    """Bring MODEL up to date with STORE: add the rows of batches added since it was trained,
    subtract those of batches removed or replaced and of rows forgotten since.

    Reads only the changed rows of the split MODEL was trained on (and, where ρ or λ is chosen
    on it, the validation split); the result is the model `train` would fit on STORE as it now
    is. NCM (raw and PQ stores) and ridge follow their store exactly; ncm-metric and knn keep
    their learned W and ssl its embedding's eigenfunctions (said); other methods are refused,
    saying to train again.
    """
    from imgscale.jobs.update import update_saved_model

    if out is not None:
        check_new_path(out, "--out")
    summary = update_saved_model(
        model, store, out=out, refit_embedding=refit_embedding, scheduler=scheduler,
        quiet=as_json,
    )  # fmt: skip
    removed = summary["classes_removed"]
    message = (
        f"{summary['model']}: +{summary['rows_added']} rows, -{summary['rows_removed']} rows"
        + (f", classes added {summary['classes_added']}" if summary["classes_added"] else "")
        + (f", classes left without rows removed {removed}" if removed else "")
        + (f", rho={summary['rho']:g}" if summary["rho"] is not None else "")
        + (", the embedding's eigenfunctions kept" if summary["embedding"] == "kept" else "")
        + (
            f", W kept (learned on {summary['metric_learned_rows']} rows; "
            f"{summary['rows_changed_since_metric']} rows changed since)"
            if summary["metric_learned_rows"] is not None
            else ""
        )
        + f" ({summary['seconds']:.1f} s)"
    )
    print_summary(summary, as_json, message)


@click.command()
@click.option("--workdir", type=click.Path(), help="Keep the demo store and models here.")
@scheduler_option
@verbose_option
def demo(workdir, scheduler) -> None:
    """sklearn digits → a store → ridge and NCM on a Dask cluster → a table of results."""
    from imgscale.jobs.demo import run_demo

    click.echo(run_demo(workdir, scheduler))
