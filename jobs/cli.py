"""The ``imgscale`` command line: a thin layer over ``jobs`` functions.

Every command exits 0 on success and non-zero with a one-line message on stderr on failure
(``--verbose`` adds the traceback). Commands that report figures print one JSON object with
``--json`` and nothing else on stdout.
"""

from __future__ import annotations

import atexit
import gc
import json
import sys
import time
import traceback
from importlib.metadata import entry_points
from pathlib import Path

import click

from imgscale.jobs import methods
from imgscale.jobs.options import (
    StorePath,
    check_new_path,
    end_progress_line,
    images_progress_line,
    json_option,
    progress_line,
    scheduler_option,
    verbose_option,
)
from imgscale.jobs.runs import RecordedCommand, Terminated, report, report_progress
from imgscale.jobs.submit import run, runs

CONTRIBUTED_COMMANDS = "imgscale.commands"


class ImgscaleGroup(click.Group):
    """The built-in commands plus those other installed parts register under the
    ``imgscale.commands`` entry-point group (the benchmarks), loaded only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        contributed = [ep.name for ep in entry_points(group=CONTRIBUTED_COMMANDS)]
        return sorted({*super().list_commands(ctx), *contributed})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is not None:
            return command
        for entry in entry_points(group=CONTRIBUTED_COMMANDS, name=name):
            try:
                return entry.load()
            except ImportError as exc:
                return _missing_extra(name, exc)
        return None


def _missing_extra(name: str, exc: ImportError) -> click.Command:
    """A stand-in command that says which extra to install instead of failing on import."""
    message = (
        f"`imgscale {name}` needs the '{name}' extra ({exc.name or exc} is not installed): "
        f"pip install 'imgscale[{name}]'"
    )

    @click.command(name, context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def unavailable(args) -> None:
        raise click.ClickException(message)

    unavailable.help = f"(not installed: pip install 'imgscale[{name}]')"
    return unavailable


@click.group(
    cls=ImgscaleGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="imgscale")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Train image classifiers from images or feature vectors, streamed from zarr stores through
    Dask."""
    if ctx.invoked_subcommand is None:  # bare `imgscale`: the help, not an error
        click.echo(ctx.get_help())


@cli.command(cls=RecordedCommand)
@click.argument("src", type=click.Path())
@click.argument("store", type=StorePath())
@click.option(
    "--features",
    metavar="NAMES",
    help="Images in: descriptors to compute, comma-separated: gist, gist-tiny, color, "
    "onnx:MODEL.onnx, bow:VOCAB.model, fisher:VOCAB.model (vocabularies of imgscale "
    "fit-features) (default for a store of images: those it was made with).",
)
@click.option("--x-key", help="Array or column holding the features (npz, parquet).")
@click.option(
    "--y-key",
    help="Array or column holding labels: integers (-1 = unlabelled) or class names "
    "(images: the label column of a parquet or list file, default 'label').",
)
@click.option(
    "--ids-key",
    help="Array or column holding row ids (default: BATCH:ROW; images: the id column, "
    "default 'id', else the file name and row).",
)
@click.option(
    "--image-column", default="image", show_default=True, help="Parquet column of image bytes."
)
@click.option(
    "--path-column", default="path", show_default=True, help="List file column of image paths."
)
@click.option("--labels", "labels_path", type=click.Path(exists=True), help="idx labels file.")
@click.option(
    "--unlabelled",
    is_flag=True,
    help="The rows have no labels (an npz's other per-row arrays are not labels).",
)
@click.option(
    "--class-names",
    "class_names_path",
    type=click.Path(exists=True, dir_okay=False),
    help="Text file naming integer labels 0, 1, ...: one class name a line.",
)
@click.option("--split", default="train", show_default=True, help="Split name for these rows.")
@click.option("--batch-id", help="Commit id (default: a hash of the rows' content).")
@click.option(
    "--commit-rows",
    type=click.IntRange(min=1),
    help="Images: rows a commit holds at most (default: a chunk of rows; a commit a minute at "
    "least); a killed ingest loses at most one commit's work.",
)
@scheduler_option
@json_option
@verbose_option
def ingest(
    src,
    store,
    features,
    x_key,
    y_key,
    ids_key,
    image_column,
    path_column,
    labels_path,
    unlabelled,
    class_names_path,
    split,
    batch_id,
    commit_rows,
    scheduler,
    as_json,
):
    """Ingest SRC into STORE (create or append): a file of vectors (.npy, .npz, .parquet,
    idx[.gz], .fvecs, .bvecs), or images with --features.

    \b
    Images: a folder (ROOT/<class>/<file>, or flat: unlabelled), a list file (.csv or parquet
    with a path column), WebDataset tar shards (shards-{0000..0099}.tar), or parquet with a
    column of image bytes; local or on s3://. Each image's id is its key; images already in
    STORE (by key, or by content) are skipped, so naming a grown folder again adds only the new
    images. Bad images are refused into STORE's table of rejects (imgscale info --rejected).

    Rows of vectors already committed (same content, from any file) are skipped.
    """
    if _is_image_source(src, features, store):
        vector_only = {"--x-key": x_key, "--labels": labels_path, "--unlabelled": unlabelled,
                       "--class-names": class_names_path, "--batch-id": batch_id}  # fmt: skip
        given = [flag for flag, value in vector_only.items() if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: for files of vectors, not images")
        _ingest_images(
            src, store, features, split, scheduler, as_json, commit_rows,
            {"image_column": image_column, "label_column": y_key or "label",
             "id_column": ids_key or "id", "path_column": path_column},
        )  # fmt: skip
        return
    if commit_rows:
        raise click.UsageError("--commit-rows: for images; a file of vectors is one commit")
    from imgscale.storage import ingest_file, read_class_names

    if not Path(src).is_file():
        raise click.BadParameter(f"{src}: no such file", param_hint="'SRC'")
    started = time.perf_counter()
    result = ingest_file(
        src,
        store,
        batch_id=batch_id,
        x_key=x_key,
        y_key=y_key,
        ids_key=ids_key,
        labels_path=labels_path,
        class_names=read_class_names(class_names_path) if class_names_path else None,
        split=split,
        progress=progress_line("ingest", quiet=as_json),
        unlabelled=unlabelled,
    )
    summary = {"rows": result.rows, "skipped": result.skipped, "batch_id": result.batch_id}
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    if result.skipped:
        click.echo(
            f"{store}: batch {result.batch_id} already committed ({result.rows} rows), skipped",
            err=True,
        )
        return
    click.echo(
        f"{store}: batch {result.batch_id} committed ({result.rows} rows; "
        f"{result.store.committed_rows} rows × {result.store.dim} in the store, "
        f"{time.perf_counter() - started:.1f} s)",
        err=True,
    )


def _is_image_source(src: str, features: str | None, store: str) -> bool:
    """Images when --features says so, when SRC can only be images (a folder, tar shards, a
    URL), or when STORE is a store of images; else SRC is a file of vectors."""
    from imgscale.storage import is_url, open_store

    if features or is_url(src) or Path(src).is_dir() or src.endswith(".tar"):
        return True
    if any(c in src for c in "*?{"):
        return True
    try:
        return open_store(store).descriptor is not None
    except Exception:
        return False


def _ingest_images(
    src, store, features, split, scheduler, as_json, commit_rows, source_options
) -> None:
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.ingest_images import ingest_images, nothing_to_do, plan_ingest
    from imgscale.storage import is_url

    if not is_url(src):
        src = str(shared_path(src))
    store = shared_path(store)
    plan = plan_ingest(src, store, features=features, source_options=source_options)
    if not plan.partitions and plan.total == 0:  # every image listed is in the store
        summary = nothing_to_do(plan)
    else:
        local = [Path(src)] if not is_url(src) and Path(src).exists() else []
        with connect(scheduler, quiet=as_json, shared_paths=[*local, store.parent]) as client:
            summary = ingest_images(
                plan,
                client,
                split=split,
                commit_rows=commit_rows,
                progress=images_progress_line(quiet=as_json),
            )
    end_progress_line()
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    none = (
        " (every image read was refused: nothing to add)"
        if (summary["images_seen"] and not summary["rows"])
        else ""
    )
    click.echo(
        f"{store}: {summary['rows']} images added, {summary['refused']} refused, "
        f"{summary['images_seen']} read ({summary['features']}, {summary['dim']}-D; "
        f"{summary['store_rows']} rows in the store, {summary['seconds']:.1f} s, "
        f"{summary['images_per_second']:,.0f} images/s){none}",
        err=True,
    )


@cli.command("fit-features", cls=RecordedCommand)
@click.argument("src", type=click.Path())
@click.argument("vocabulary", type=StorePath())
@click.option(
    "--features",
    "kind",
    type=click.Choice(["bow", "fisher"]),
    required=True,
    help="bow: a k-means dictionary of dense SIFT (paper 000); fisher: PCA + diagonal GMM of "
    "dense RootSIFT and local colour (paper 002).",
)
@click.option("--words", type=click.IntRange(min=1), help="bow: dictionary size [400].")
@click.option(
    "--pyramid-levels",
    type=click.IntRange(1, 4),
    help="bow: 1 (whole image), 3 (1x1 + 2x2 + 4x4 cells) [1].",
)
@click.option("--gaussians", type=click.IntRange(min=1), help="fisher: GMM size [16].")
@click.option(
    "--components", type=click.IntRange(min=1), help="fisher: PCA dimensions a channel [64]."
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Images drawn from SRC (seeded) to learn from.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the sample and fit.")
@click.option(
    "--image-size",
    type=click.IntRange(min=4),
    default=128,
    show_default=True,
    help="Side of the square image (resize-crop) the local descriptors are computed on.",
)
@click.option(
    "--patch-size",
    default="16",
    show_default=True,
    help="Side of the patches in pixels; several, comma-separated, describe several scales.",
)
@click.option(
    "--step", type=click.IntRange(min=1), default=8, show_default=True, help="Grid spacing."
)
@click.option(
    "--image-column", default="image", show_default=True, help="Parquet column of image bytes."
)
@click.option(
    "--path-column", default="path", show_default=True, help="List file column of image paths."
)
@scheduler_option
@json_option
@verbose_option
def fit_features(
    src, vocabulary, kind, words, pyramid_levels, gaussians, components, sample, seed,
    image_size, patch_size, step, image_column, path_column, scheduler, as_json,
) -> None:  # fmt: skip
    """Learn the vocabulary of --features bow or fisher from a sample of the images of SRC (any
    image source of `imgscale ingest`) and save it as VOCABULARY; then
    `imgscale ingest SRC STORE --features bow:VOCABULARY` (or fisher:VOCABULARY).

    Local descriptors are computed on the workers and stay there; each k-means or EM iteration
    is one pass over them.
    """
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.fit_features import fit_vocabulary, vocabulary_of
    from imgscale.storage import is_url

    for_kind = {"bow": ("--words", "--pyramid-levels"), "fisher": ("--gaussians", "--components")}
    given = {"--words": words, "--pyramid-levels": pyramid_levels, "--gaussians": gaussians,
             "--components": components}  # fmt: skip
    wrong = [flag for flag, value in given.items() if value and flag not in for_kind[kind]]
    if wrong:
        raise click.UsageError(f"{', '.join(wrong)}: not for --features {kind}")
    check_new_path(vocabulary, "VOCABULARY")
    try:
        patch_sizes = tuple(int(size) for size in patch_size.split(","))
    except ValueError:
        raise click.BadParameter(
            f"{patch_size!r}: expected integers separated by commas", param_hint="--patch-size"
        ) from None
    grid = {"patch_sizes": patch_sizes, "step": step, "image_size": image_size}
    if kind == "bow":
        params = {"n_words": words or 400, "pyramid_levels": pyramid_levels or 1}
    else:
        params = {"n_gaussians": gaussians or 16, "n_components": components or 64}
    model = vocabulary_of(kind, **grid, **params, random_state=seed)
    if not is_url(src):
        src = str(shared_path(src))
    vocabulary = shared_path(vocabulary)
    local = [Path(src)] if not is_url(src) and Path(src).exists() else []
    with connect(scheduler, quiet=as_json, shared_paths=local) as client:
        summary = fit_vocabulary(
            src, vocabulary, model, client, sample=sample, seed=seed,
            source_options={"image_column": image_column, "path_column": path_column},
        )  # fmt: skip
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(
        f"{vocabulary}: {kind} vocabulary ({summary['dim']}-D rows) learned from "
        f"{summary['images']} images, {summary['local_descriptors']:,} local descriptors "
        f"({summary['refused']} images refused, {summary['seconds']:.1f} s); "
        f"use --features {kind}:{vocabulary}",
        err=True,
    )


@cli.command("remove-batch")
@click.argument("store", type=StorePath(exists=True, file_okay=False))
@click.argument("batch_id")
@json_option
@verbose_option
def remove_batch(store, batch_id, as_json) -> None:
    """Remove the last committed batch BATCH_ID from STORE (one atomic commit).

    Only the last batch: rows are addressed by position (a model's row count, embed's
    watermark), so an earlier batch goes after the batches that follow it, newest first, which
    are then ingested again. Batch ids and their splits are listed by `imgscale info STORE --json`.
    """
    from imgscale.storage import open_store

    rows = open_store(store).remove_batch(batch_id)
    if as_json:
        click.echo(json.dumps({"batch_id": batch_id, "rows": rows}))
        return
    click.echo(f"{store}: batch {batch_id} removed ({rows} rows)", err=True)


@cli.command()
@click.argument("store", type=StorePath(exists=True))
@click.option(
    "--rejected", is_flag=True, help="List the images ingests refused: key, sha256, reason."
)
@json_option
@verbose_option
def info(store, rejected, as_json) -> None:
    """Show a store's rows, dimension, classes, label counts, splits, batches and size on disk
    (and, for a store of images, its descriptors and the count of images refused)."""
    from imgscale.storage import open_store

    opened = open_store(store)
    if rejected:
        table = opened.rejected()
        records = [
            {
                "key": r["key"],
                "sha256": r["sha256"].hex(),
                "reason": r["reason"],
                "split": r["split"],
            }
            for r in table.to_pylist()
        ]
        if as_json:
            click.echo(json.dumps({"rejected": records}))
            return
        for r in records:
            click.echo(f"{r['key']}\t{r['sha256'][:16]}\t{r['split']}\t{r['reason']}")
        click.echo(f"{store}: {len(records)} images refused", err=True)
        return
    summary = opened.info()
    if as_json:
        click.echo(json.dumps(summary))
        return
    for key, value in summary.items():
        if key == "batches":
            value = "; ".join(f"{b['batch_id']} ({b['rows']} rows, {b['split']})" for b in value)
        if key == "descriptor":
            value = ", ".join(f"{f['name']} ({f['dim']}-D)" for f in value["features"])
        click.echo(f"{key:>16}: {value}")


@cli.command()
@click.argument("store", type=StorePath(exists=True))
@click.argument("out", type=click.Path(dir_okay=False))
@click.option("--split", help="Only this split's rows (default: all).")
@json_option
@verbose_option
def export(store, out, split, as_json) -> None:
    """Write STORE's rows with their ids, labels and splits to OUT: .parquet (streamed, one row
    group a chunk: id, label, split, features) or .npz (X, y, ids, splits, class_names; refused
    past 2 GiB of features)."""
    from imgscale.storage import export_rows, open_store

    check_new_path(out, "OUT", local_only=True)
    rows = export_rows(
        open_store(store), out, split=split, progress=progress_line("export", quiet=as_json)
    )
    if as_json:
        click.echo(json.dumps({"rows": rows, "out": str(out)}))
        return
    click.echo(f"{out}: {rows} rows of {store} written", err=True)


@cli.command(cls=RecordedCommand)
@click.argument("src", type=StorePath(exists=True))
@click.argument("dst", type=StorePath())
@click.option("--m", "m", default=64, show_default=True, help="Sub-quantizers (must divide D).")
@click.option("--rotate", is_flag=True, help="Random orthogonal rotation before quantizing.")
@click.option("--sample", default=65_536, show_default=True, help="Rows to train the codec on.")
@click.option("--seed", default=0, show_default=True, help="Sample, rotation and k-means seed.")
@scheduler_option
@json_option
@verbose_option
def compress(src, dst, m, rotate, sample, seed, scheduler, as_json) -> None:
    """Product-quantize SRC into a new PQ store DST (M bytes a row), encoded on the cluster."""
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.compress import compress as compress_store
    from imgscale.storage import open_store

    check_new_path(dst, "DST")
    source = open_store(shared_path(src))
    dst = shared_path(dst)
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[source.path, dst.parent],
        data_bytes=row_bytes(source),
    ):
        summary = compress_store(
            source,
            dst,
            m,
            rotate=rotate,
            sample=sample,
            seed=seed,
            progress=progress_line("encode", quiet=as_json),
        )
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(
        f"{dst}: {summary['rows']} rows × M={m} codes; reconstruction MSE "
        f"{summary['mse']:.4g} = {summary['relative_mse']:.4f} of total variance; "
        f"{summary['bytes_on_disk'] / 2**20:.1f} MiB on disk "
        f"(compression {summary['compression_ratio']:.1f}× of raw float32); "
        f"encode {summary['encode_rows_per_second']:.0f} rows/s"
    )


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


@cli.command(cls=RecordedCommand, epilog=METHOD_LIST)
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
    from imgscale.jobs import models
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.train import make_embedding
    from imgscale.jobs.train import train as train_model
    from imgscale.storage import open_store

    check_new_path(model, "MODEL")
    given = {name: value for name, value in options.items() if _given(ctx, name)}
    method_dim = "n_components" in {option.name for option in methods.METHODS[method].options}
    if embedding is None and method_dim and n_components is not None:
        given["n_components"] = n_components
    try:
        methods.resolve_options(methods.METHODS[method], given)
        if _given(ctx, "val_split"):
            methods.check_val_split(methods.METHODS[method])
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    feature_store = open_store(shared_path(store))
    feature_store.require_split(split)
    if _given(ctx, "val_split"):
        feature_store.require_split(val_split)
    elif methods.METHODS[method].uses_validation and val_split not in feature_store.split_counts():
        click.echo(f"{store}: no split {val_split!r}; {method} validates without it", err=True)
    embedder = None
    if embedding is not None:
        embedder = make_embedding(embedding, n_components=n_components, gamma=gamma)
    elif gamma is not None or (n_components is not None and not method_dim):
        raise click.UsageError("--n-components and --gamma need --embedding")
    if _given(ctx, "seed") and per_class is None:
        raise click.UsageError("--seed draws the --per-class sample: give --per-class too")
    sample = {} if per_class is None else {"labelled_per_class": per_class, "sample_seed": seed}
    started = time.perf_counter()
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[feature_store.path],
        data_bytes=row_bytes(feature_store),
    ):
        fitted = train_model(
            feature_store, method, split=split, val_split=val_split, embedding=embedder,
            per_class=per_class, seed=seed, **given,
        )  # fmt: skip
        # Saved while connected: a kNN's reference rows are still persisted on the workers.
        models.save(
            fitted,
            model,
            store=str(shared_path(feature_store.path)),
            split=split,
            rows=len(feature_store.labels(split)),
            committed_rows=feature_store.committed_rows,
            class_names=feature_store.class_names,
            **sample,
        )
    classifier = fitted.steps[-1][1] if hasattr(fitted, "steps") else fitted
    rho = getattr(classifier, "rho_", None)
    summary = {
        "model": str(model),
        "method": method,
        "rows": len(feature_store.labels(split)),
        "rho": None if rho is None else float(rho),
        "seconds": time.perf_counter() - started,
        **sample,
    }
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    detail = f", rho={classifier.rho_:g}" if hasattr(classifier, "rho_") else ""
    if hasattr(classifier, "best_iteration_"):
        detail += f", d={classifier.n_components}, best W at iteration {classifier.best_iteration_}"
    if embedding is not None:
        detail += f", {embedding} embedding to {fitted.steps[0][1].n_components_} dims"
    click.echo(f"{model}: {method}{detail} ({time.perf_counter() - started:.1f} s)", err=True)


@cli.command(cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.argument("out", type=StorePath())
@click.option("--split", default=None, help="Only rows of this split (default: all).")
@click.option("--top-k", default=5, show_default=True, help="Labels kept per row.")
@click.option(
    "--new",
    "new_rows",
    is_flag=True,
    help="OUT is a folder of parquet parts: predict only the rows past its last part, as a new "
    "part (for scheduled runs as the store grows).",
)
@scheduler_option
@json_option
@verbose_option
def predict(model, store, out, split, top_k, new_rows, scheduler, as_json) -> None:
    """Write MODEL's predictions for STORE's rows to the parquet file OUT."""
    from imgscale.jobs import models
    from imgscale.jobs.class_names import model_class_names
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.predict import predict_new_rows, predict_to_parquet
    from imgscale.storage import is_url, open_store

    if new_rows and (split or is_url(out)):
        raise click.UsageError("--new predicts every new row into a local folder: no --split")
    if not new_rows:
        check_new_path(out, "OUT")
    fitted, provenance = models.load(model)
    feature_store = open_store(shared_path(store))
    feature_store.require_split(split)
    names = model_class_names(provenance, feature_store)
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[feature_store.path],
        data_bytes=row_bytes(feature_store),
    ):
        if new_rows:
            first, rows = predict_new_rows(fitted, feature_store, out, k=top_k, class_names=names)
        else:
            first, rows = (
                0,
                predict_to_parquet(
                    fitted, feature_store, out, split=split, k=top_k, class_names=names
                ),
            )
    report({"rows": rows})
    if as_json:
        click.echo(json.dumps({"rows": rows, "first_row": first, "out": str(out)}))
        return
    click.echo(f"{out}: {rows} rows" + (f" from row {first}" if new_rows else ""), err=True)


@cli.command(cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.option("--split", default="test", show_default=True)
@scheduler_option
@json_option
@verbose_option
def evaluate(model, store, split, scheduler, as_json) -> None:
    """Per-class rate, top-1/top-5 flat error and MiAP of MODEL on STORE's labelled rows."""
    from imgscale.jobs import models
    from imgscale.jobs.class_names import model_class_names
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.evaluate import evaluate as evaluate_model
    from imgscale.storage import open_store

    fitted, provenance = models.load(model)
    feature_store = open_store(shared_path(store))
    feature_store.require_split(split)
    names = model_class_names(provenance, feature_store)
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[feature_store.path],
        data_bytes=row_bytes(feature_store),
    ):
        result = evaluate_model(fitted, feature_store, split, names)
    report(result)
    if as_json:
        click.echo(json.dumps(result))
        return
    for key, value in result.items():
        click.echo(f"{key:>16}: {value:.4f}" if isinstance(value, float) else f"{key:>16}: {value}")


@cli.command()
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
    from imgscale.jobs import models
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.plot import plot_embedding, require_pyplot
    from imgscale.storage import open_store

    check_new_path(out, "OUT", local_only=True)
    require_pyplot()  # matplotlib is checked before any cluster starts
    fitted, _ = models.load(model)
    feature_store = open_store(shared_path(store))
    feature_store.require_split(split)
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[feature_store.path],
        data_bytes=row_bytes(feature_store),
    ):
        drawn = plot_embedding(fitted, feature_store, out, split=split, max_points=max_points)
    if as_json:
        click.echo(json.dumps(drawn))
        return
    click.echo(
        f"{out}: {drawn['points']} rows of {drawn['classes']} classes, "
        f"{drawn['exemplars']} exemplars",
        err=True,
    )


@cli.command("add-class", cls=RecordedCommand)
@click.argument("model", type=StorePath(exists=True))
@click.argument("store", type=StorePath(exists=True))
@click.option("--label", required=True, help="Class name in STORE whose rows give the mean.")
@click.option("--split", default=None, help="Only rows of this split (default: all).")
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
    from imgscale.jobs.add_class import add_class as add_class_job
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.storage import open_store

    check_new_path(out, "--out")
    feature_store = open_store(shared_path(store))
    feature_store.require_split(split)
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[feature_store.path],
        data_bytes=row_bytes(feature_store),
    ):
        summary = add_class_job(model, feature_store, label, split=split, out=out, replace=replace)
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    source = "codes" if summary["from_codes"] else "rows"
    click.echo(
        f"{out or model}: added {label!r} (label {summary['class_index']}) from "
        f"{summary['rows']} {source}; {summary['classes']} classes ({summary['seconds']:.2f} s)"
    )


@cli.command()
@click.option("--workdir", type=click.Path(), help="Keep the demo store and models here.")
@scheduler_option
@verbose_option
def demo(workdir, scheduler) -> None:
    """sklearn digits → a store → ridge and NCM on a Dask cluster → a table of results."""
    from imgscale.jobs.demo import run_demo

    click.echo(run_demo(workdir, scheduler))


@cli.command("embed", cls=RecordedCommand)
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

    Each batch of source rows is one committed batch of DST (id rows-START-STOP), so a rerun
    embeds nothing twice and a killed run resumes where it stopped (paper 001 §3).
    """
    from imgscale.jobs import models
    from imgscale.jobs.cluster import connect, shared_path
    from imgscale.jobs.embed import embed_new_rows
    from imgscale.storage import open_store

    fitted, _ = models.load(model)
    source = open_store(shared_path(src))
    with connect(
        scheduler,
        quiet=as_json,
        shared_paths=[source.path],
        data_bytes=row_bytes(source),
    ):
        summary = embed_new_rows(
            fitted,
            source,
            dst,
            batch_rows=batch_rows,
            max_rows=max_rows,
            provenance={"model": str(shared_path(model))},
            on_commit=lambda start, stop: report_progress(stop, source.committed_rows, "embed"),
        )
    report(summary)
    if as_json:
        click.echo(json.dumps(summary))
        return
    click.echo(
        f"{dst}: {summary['rows_embedded']} rows embedded in {summary['batches_committed']} "
        f"batches, watermark {summary['watermark_before']} → {summary['watermark_after']} of "
        f"{summary['source_rows']} ({summary['seconds']:.1f} s, "
        f"{summary['rows_per_second']:.0f} rows/s)",
        err=True,
    )


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--every", help="Interval: 90s, 10m, 2h, 1d (first run at once).")
@click.option("--cron", help="Five-field cron expression, e.g. '*/10 * * * *' (local time).")
@click.option("--lock", type=click.Path(), help="Lock file (default: one per command in tmp).")
@click.option("--max-runs", type=int, help="Stop after this many turns (default: never).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
@verbose_option
def schedule(every, cron, lock, max_runs, command) -> None:
    """Run `imgscale COMMAND` every interval or on a cron schedule, never two at once.

    A turn that finds another run holding the lock (flock, released when its holders die) is
    skipped. Example (one turn; without --max-runs it keeps going):

    \b
      imgscale schedule --every 10m --max-runs 1 -- embed ale.model digits.zarr digits-ale.zarr
    """
    from imgscale.jobs.schedule import parse_every
    from imgscale.jobs.schedule import schedule as run_schedule

    if (every is None) == (cron is None):
        raise click.UsageError("give exactly one of --every and --cron")
    counts = run_schedule(
        list(command),
        every=parse_every(every) if every is not None else None,
        cron=cron,
        lock_path=Path(lock) if lock else None,
        max_runs=max_runs,
        log=lambda line: click.echo(line, err=True),
    )
    click.echo(
        f"schedule: {counts['ran']} runs ({counts['failed']} failed), {counts['skipped']} skipped",
        err=True,
    )


def row_bytes(store) -> int:
    """Bytes of ``store``'s rows as the float32 its tasks compute on (PQ codes decode to it):
    how `jobs.cluster.connect` chooses the kind of LocalCluster."""
    return store.committed_rows * store.dim * 4


def _given(ctx: click.Context, name: str) -> bool:
    """Whether option ``name`` was given (command line or environment), not defaulted."""
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT)


cli.add_command(run)
cli.add_command(runs)


def main() -> None:
    """Entry point: one-line errors on stderr, tracebacks only with ``--verbose``."""
    # The objects of every imported module live until exit anyway; frozen, the interpreter's
    # last full collection skips them instead of adding a fraction of a second to each command.
    atexit.register(gc.freeze)
    try:
        try:
            cli.main(prog_name="imgscale", standalone_mode=False)
        finally:
            end_progress_line()
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        hint = " (see --help)" if isinstance(exc, click.UsageError) else ""
        click.echo(f"imgscale: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort as exc:
        click.echo("imgscale: aborted", err=True)
        # The shell's codes for a process ended by a signal: 128 + SIGTERM (15) or SIGINT (2).
        sys.exit(143 if isinstance(exc.__cause__, Terminated) else 130)
    except Exception as exc:
        if "--verbose" in sys.argv:
            traceback.print_exc()
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        click.echo(f"imgscale: error: {message}", err=True)
        sys.exit(1)
