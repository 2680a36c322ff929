"""`imgscale` commands on stores: ingest, fit-features, remove-batch, forget, compact, info,
export, compress."""

from __future__ import annotations

import time
from pathlib import Path

import click

from imgscale.jobs.cli.options import (
    StorePath,
    check_new_path,
    json_option,
    scheduler_option,
    verbose_option,
)
from imgscale.jobs.cli.printers import (
    end_progress_line,
    fit_pass_line,
    images_progress_line,
    print_summary,
    progress_line,
    stage_progress_line,
)
from imgscale.jobs.descriptors import (
    VOCABULARIES,
    descriptor_list,
    features_help,
    vocabulary_help,
)
from imgscale.jobs.runs import RecordedCommand

BOW, FISHER = VOCABULARIES["bow"], VOCABULARIES["fisher"]


@click.command(cls=RecordedCommand, epilog=descriptor_list())
@click.argument("src", type=click.Path())
@click.argument("store", type=StorePath())
@click.option("--features", metavar="NAMES", help=features_help())
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
    "--pq",
    type=click.IntRange(min=1),
    metavar="M",
    help="Images with bow:/fisher: features: keep M bytes a row, product quantization codes "
    "(M sub-vectors, 256 centroids each; M divides the dimension), never the float rows. The "
    "ingest creating STORE trains the codebook; later ones use it (default: STORE's encoding).",
)
@click.option(
    "--pq-sample",
    type=click.IntRange(min=1),
    help="--pq: images drawn from SRC (seeded) whose signatures train the codebook [10000: "
    "about faiss's 39 a centroid of 256].",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="Images: forget the rows of images whose file changed or was deleted since they were "
    "ingested (one commit), and ingest the changed files again.",
)
@click.option(
    "--commit-rows",
    type=click.IntRange(min=1),
    help="Images: rows a commit holds at most (default: 64 MiB of float32 rows; a commit a "
    "minute at least; a task's images, a whole tar shard, are never split); a killed ingest loses "
    "at most one commit's work.",
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
    pq,
    pq_sample,
    refresh,
    commit_rows,
    scheduler,
    as_json,
):
    """Ingest SRC into STORE (create or append): a file of vectors (.npy, .npz, .parquet,
    idx[.gz], .fvecs, .bvecs), or images with --features.

    \b
    Images: a folder (ROOT/<class>/<file>, or flat: unlabelled), a list file (.csv or parquet
    with a path column; relative paths are relative to the list's folder), WebDataset tar
    shards (shards-{0000..0099}.tar), or parquet with a column of image bytes; local or on
    s3://. Each image's id is its key, after SPLIT/ for a split other than train
    (photos/test/cat/0.jpg --split test: test/cat/0.jpg); images already in STORE (by id, or
    by content) are skipped, so naming a grown folder again adds only the new images. Bad
    images are refused into STORE's table of rejects (imgscale info --rejected).

    Rows of vectors already committed (same content, from any file) are skipped.
    """
    from imgscale.jobs.ingest import is_image_source

    if is_image_source(src, features, store):
        vector_only = {"--x-key": x_key, "--labels": labels_path, "--unlabelled": unlabelled,
                       "--class-names": class_names_path, "--batch-id": batch_id}  # fmt: skip
        given = [flag for flag, value in vector_only.items() if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: for files of vectors, not images")
        _ingest_images(
            src, store, features, split, scheduler, as_json, commit_rows, refresh,
            {"image_column": image_column, "label_column": y_key or "label",
             "id_column": ids_key or "id", "path_column": path_column},
            {"pq": pq, **({"pq_sample": pq_sample} if pq_sample else {})},
        )  # fmt: skip
        return
    if commit_rows or refresh:
        flag = "--commit-rows" if commit_rows else "--refresh"
        raise click.UsageError(f"{flag}: for images; a file of vectors is one commit")
    if pq or pq_sample:
        raise click.UsageError("--pq: for images; `imgscale compress` codes a store of vectors")
    from imgscale.jobs.ingest import ingest_file
    from imgscale.storage import read_class_names

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
    if result.repeated:
        summary["repeated"] = result.repeated
        where = ", ".join(f"{n} as split {split!r}" for split, n in result.repeated.items())
        click.echo(
            f"imgscale: warning: {src}: rows with the same values as rows committed before "
            f"({where}) were committed again as split {split!r}; "
            f"`imgscale remove-batch {store} {result.batch_id}` undoes it",
            err=True,
        )
    if result.skipped:
        message = (
            f"{store}: batch {result.batch_id} already committed ({result.rows} rows), skipped"
        )
    else:
        message = (
            f"{store}: batch {result.batch_id} committed ({result.rows} rows; "
            f"{result.store.committed_rows} rows × {result.store.dim} in the store, "
            f"{time.perf_counter() - started:.1f} s)"
        )
    print_summary(summary, as_json, message)


def _ingest_images(
    src, store, features, split, scheduler, as_json, commit_rows, refresh, source_options,
    pq_options,
) -> None:  # fmt: skip
    from imgscale.jobs.ingest import ingest_image_source
    from imgscale.storage import absolute, is_url, location

    # Absolute paths for the workers.
    if not is_url(src):
        src = str(absolute(location(src)))
    store = absolute(location(store))
    summary = ingest_image_source(
        src, store, features=features, split=split, scheduler=scheduler, quiet=as_json,
        commit_rows=commit_rows, refresh=refresh, source_options=source_options,
        progress=images_progress_line(quiet=as_json),
        codec_progress=stage_progress_line(quiet=as_json), **pq_options,
    )  # fmt: skip
    end_progress_line()
    if summary["changed"] or summary["deleted"]:
        click.echo(
            f"imgscale: warning: {src}: {summary['changed']} images changed (other bytes under a "
            f"name already stored) and {summary['deleted']} deleted since they were ingested; "
            f"their rows are the old files': `imgscale ingest {src} {store} --refresh` replaces "
            "the changed ones and forgets the deleted ones",
            err=True,
        )
    none = (
        " (every image read was refused: nothing to add)"
        if (summary["images_seen"] and summary["refused"] == summary["images_seen"])
        else ""
    )
    if summary["already_stored"]:
        none += (
            f"; {summary['already_stored']} already in the store, committed by another ingest "
            "meanwhile"
        )
    if summary["refused_unchanged"]:
        none += (
            f"; {summary['refused_unchanged']} refused before and unchanged since, not read "
            f"again (imgscale info {store} --rejected)"
        )
    print_summary(
        summary,
        as_json,
        f"{store}: {summary['rows']} images added, {summary['refused']} refused, "
        f"{summary['images_seen']} read ({summary['features']}, {summary['dim']}-D; "
        f"{summary['store_rows']} rows in the store, {summary['seconds']:.1f} s, "
        f"{summary['images_per_second']:,.0f} images/s){none}",
    )


@click.command("fit-features", cls=RecordedCommand)
@click.argument("src", type=click.Path())
@click.argument("vocabulary", type=StorePath())
@click.option(
    "--features",
    "kind",
    type=click.Choice(list(VOCABULARIES)),
    required=True,
    help=vocabulary_help(),
)
@click.option(
    "--words",
    type=click.IntRange(min=1),
    help=f"bow: dictionary size [{BOW.default('--words')}: Lazebnik et al. 2006's larger "
    "dictionary, the size docs/findings/cifar10-bow-fisher.md measures against the reference "
    "pipeline].",
)
@click.option(
    "--pyramid-levels",
    type=click.IntRange(1, 4),
    help=f"bow: 1 (whole image), 3 (1x1 + 2x2 + 4x4 cells) [{BOW.default('--pyramid-levels')}].",
)
@click.option(
    "--gaussians",
    type=click.IntRange(min=1),
    help=f"fisher: GMM size [{FISHER.default('--gaussians')}: paper 002 §5.1's 4K-D vectors; "
    "64 scores higher on CIFAR-10 (docs/findings/cifar10-bow-fisher.md)].",
)
@click.option(
    "--components",
    type=click.IntRange(min=1),
    help=f"fisher: PCA dimensions a channel [{FISHER.default('--components')}: paper 002 §5.1].",
)
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Images drawn from SRC (seeded) to learn from (1,000 CIFAR-10 images, 49,000 "
    "descriptors, gave words within a point of faiss's k-means on the same descriptors: "
    "docs/findings/cifar10-bow-fisher.md).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds the sample and fit.")
@click.option(
    "--image-size",
    default="auto",
    show_default=True,
    help="Side of the square image (resize-crop) the local descriptors are computed on; auto: "
    "the sample's median shorter side, within 64-256 px (64: CIFAR-10's 32-px images "
    "upsampled, 7x7 patches; 256: about the size of the natural photos the reference "
    "pipelines were measured on; docs/findings/cifar10-bow-fisher.md).",
)
@click.option(
    "--patch-size",
    default="16",
    show_default=True,
    help="Side of the patches in pixels; several, comma-separated, describe several scales "
    "(16 every 8 px: paper 000 §4.1's grid, after Lazebnik et al.).",
)
@click.option(
    "--step",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Grid spacing (paper 000 §4.1's; every 4 px lifts Fisher vectors on CIFAR-10's 64-px "
    "images by 3 points: docs/findings/cifar10-bow-fisher.md).",
)
@click.option(
    "--sift-window",
    type=click.FloatRange(0, 16, min_open=True),
    default=2.25,
    show_default=True,
    help="Side of the window each SIFT descriptor covers, in patch sides (1: the patch alone). "
    "2.25 (OpenCV keypoint size 6 for 16-px patches) scored 10 points above 1 with an exact "
    "intersection-kernel SVM on CIFAR-10 at 64 px (docs/findings/cifar10-bow-fisher.md).",
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
    image_size, patch_size, step, sift_window, image_column, path_column, scheduler, as_json,
) -> None:  # fmt: skip
    """Learn the vocabulary of --features bow or fisher from a sample of the images of SRC (any
    image source of `imgscale ingest`) and save it as VOCABULARY; then
    `imgscale ingest SRC STORE --features bow:VOCABULARY` (or fisher:VOCABULARY).

    Local descriptors are computed on the workers and stay there; each k-means or EM iteration
    is one pass over them. k-means runs at most 50 passes and EM at most 100, each stopping at
    scikit-learn's rule and tolerance (k-means: the centres' squared moves under 1e-4 of the
    variance; EM: a mean log-likelihood gain under 1e-3): on CIFAR-10's dense SIFT both reach
    scikit-learn's objective (docs/findings/cifar10-bow-fisher.md).
    """
    from imgscale.jobs.cluster import shared_path
    from imgscale.jobs.fit_vocabulary import AUTO_IMAGE_SIZE, fit_vocabulary_on_cluster

    given = {"--words": words, "--pyramid-levels": pyramid_levels, "--gaussians": gaussians,
             "--components": components}  # fmt: skip
    options = VOCABULARIES[kind].options
    wrong = [
        flag for flag, value in given.items() if value and flag not in {o.flag for o in options}
    ]
    if wrong:
        raise click.UsageError(f"{', '.join(wrong)}: not for --features {kind}")
    check_new_path(vocabulary, "VOCABULARY")
    try:
        patch_sizes = tuple(int(size) for size in patch_size.split(","))
    except ValueError:
        patch_sizes = ()
    if not patch_sizes or min(patch_sizes) < 4:
        raise click.BadParameter(
            f"{patch_size!r}: expected integers >= 4 separated by commas", param_hint="--patch-size"
        )
    auto_size = None
    if image_size == "auto":
        auto_size = (max(AUTO_IMAGE_SIZE[0], *patch_sizes), max(AUTO_IMAGE_SIZE[1], *patch_sizes))
        image_size = auto_size[1]
    elif not image_size.isdigit() or int(image_size) < 4:
        raise click.BadParameter(
            f"{image_size!r}: expected auto or an integer >= 4", param_hint="--image-size"
        )
    elif int(image_size) < max(patch_sizes):
        raise click.BadParameter(
            f"{image_size} is smaller than one {max(patch_sizes)}-pixel patch (--patch-size "
            f"{patch_size}); expected --image-size >= every patch size",
            param_hint="--image-size",
        )
    grid = {"patch_sizes": patch_sizes, "step": step, "image_size": int(image_size),
            "sift_window": sift_window}  # fmt: skip
    params = {o.param: given[o.flag] or o.default for o in options}
    vocabulary = shared_path(vocabulary)  # as the summary names it
    summary = fit_vocabulary_on_cluster(
        src, vocabulary, kind, **grid, **params, sample=sample, seed=seed, scheduler=scheduler,
        quiet=as_json, source_options={"image_column": image_column, "path_column": path_column},
        auto_size=auto_size, progress=progress_line("describe", quiet=as_json, unit="images"),
        on_pass=fit_pass_line("fit-features", quiet=as_json),
    )  # fmt: skip
    end_progress_line()  # EM stops before its last iteration, leaving its line unfinished
    print_summary(
        summary,
        as_json,
        f"{vocabulary}: {kind} vocabulary ({summary['dim']}-D rows) learned from "
        f"{summary['images']} images at {summary['image_size']} px, "
        f"{summary['local_descriptors']:,} local descriptors "
        f"({summary['refused']} images refused, {summary['seconds']:.1f} s); "
        f"use --features {kind}:{vocabulary}",
    )


@click.command("remove-batch")
@click.argument("store", type=StorePath(exists=True, file_okay=False))
@click.argument("batch_id")
@json_option
@verbose_option
def remove_batch(store, batch_id, as_json) -> None:
    """Remove the committed batch BATCH_ID, any of STORE's batches, in one atomic commit.

    Every command then reads the other batches' rows only. The removed rows stay in the row
    chunks, skipped, unless BATCH_ID is the last batch (`imgscale info` counts them). A model
    trained on STORE before says which of its batches were removed when it is evaluated,
    predicts or gets a class; `imgscale embed` removes their rows from the stores it embedded
    them into. Batch ids and their splits are listed by `imgscale info STORE --json`.
    """
    from imgscale.storage import open_store

    rows = open_store(store).remove_batch(batch_id)
    summary = {"batch_id": batch_id, "rows": rows}
    print_summary(
        summary, as_json, f"{store}: batch {batch_id} removed ({rows} rows)", recorded=False
    )


@click.command()
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
        if not as_json:
            for r in records:
                click.echo(f"{r['key']}\t{r['sha256'][:16]}\t{r['split']}\t{r['reason']}")
        message = f"{store}: {len(records)} images refused"
        print_summary({"rejected": records}, as_json, message, recorded=False)
        return
    summary = opened.info()
    lines = []
    for key, value in summary.items():
        if key == "batches":
            value = "; ".join(f"{b['batch_id']} ({b['rows']} rows, {b['split']})" for b in value)
        if key == "descriptor":
            value = ", ".join(f"{f['name']} ({f['dim']}-D)" for f in value["features"])
        lines.append(f"{key:>16}: {value}")
    print_summary(summary, as_json, "\n".join(lines), err=False, recorded=False)


@click.command()
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
    summary = {"rows": rows, "out": str(out)}
    print_summary(summary, as_json, f"{out}: {rows} rows of {store} written", recorded=False)


@click.command(cls=RecordedCommand)
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
    from imgscale.jobs.cluster import shared_path
    from imgscale.jobs.compress import compress_on_cluster

    check_new_path(dst, "DST")
    dst = shared_path(dst)  # as the summary names it
    summary = compress_on_cluster(
        src, dst, m, rotate=rotate, sample=sample, seed=seed, scheduler=scheduler,
        quiet=as_json, progress=progress_line("encode", quiet=as_json),
    )  # fmt: skip
    print_summary(
        summary,
        as_json,
        f"{dst}: {summary['rows']} rows × M={m} codes; reconstruction MSE "
        f"{summary['mse']:.4g} = {summary['relative_mse']:.4f} of total variance; "
        f"{summary['bytes_on_disk'] / 2**20:.1f} MiB on disk "
        f"(compression {summary['compression_ratio']:.1f}× of raw float32); "
        f"encode {summary['encode_rows_per_second']:.0f} rows/s",
        err=False,
    )


@click.command()
@click.argument("store", type=StorePath(exists=True, file_okay=False))
@click.argument("ids", nargs=-1)
@click.option(
    "--sha256",
    "digests",
    multiple=True,
    metavar="HEX",
    help="Forget the rows of the image with this content digest (64 hex digits); repeatable.",
)
@click.option("--reason", default="", help="Why, kept in the store's record of forgets.")
@json_option
@verbose_option
def forget(store, ids, digests, reason, as_json) -> None:
    """Forget single rows of STORE by id (or by image digest), in one atomic commit.

    Every command then reads the other rows only: `export`, `predict`, `embed` never see them
    again, and `imgscale update` subtracts exactly them from a model. Their bytes stay in the row
    chunks until `imgscale compact` (`imgscale info` counts them). An id that names no live row
    is refused and nothing changes.
    """
    from imgscale.storage import open_store

    if not ids and not digests:
        raise click.UsageError("give the ids of the rows to forget, or --sha256")
    rows = open_store(store).forget(ids, sha256=digests, reason=reason)
    summary = {"rows": rows}
    print_summary(summary, as_json, f"{store}: {rows} rows forgotten", recorded=False)


@click.command()
@click.argument("store", type=StorePath(exists=True, file_okay=False))
@json_option
@verbose_option
def compact(store, as_json) -> None:
    """Rewrite STORE without the rows of removed batches and forgotten rows, so that their
    bytes leave the disk.

    Crash-safe: a process killed at any moment leaves the old store or the new one. Models and
    embedded stores made from STORE stay valid (they refer to batches, not row positions);
    `imgscale update` refuses, by name, a model that would need rows compaction dropped.
    Run it when no other command is reading STORE.
    """
    from imgscale.storage import compact_store

    summary = compact_store(store, progress=progress_line("compact", quiet=as_json))
    end_progress_line()
    freed = summary["bytes_before"] - summary["bytes_after"]
    print_summary(
        summary,
        as_json,
        f"{store}: {summary['rows_dropped']} rows dropped, {freed / 2**20:.1f} MiB freed",
        recorded=False,
    )
