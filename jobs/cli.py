"""The ``imgscale`` command line: a thin layer over ``jobs`` functions.

Every command exits 0 on success and non-zero with a one-line message on stderr on failure
(``--verbose`` adds the traceback). Commands that report figures print one JSON object with
``--json`` and nothing else on stdout.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import click

from jobs import models
from jobs.cluster import connect
from jobs.train import EMBEDDINGS, METHODS
from pipeline.gram import GRAM_PRECISIONS

scheduler_option = click.option(
    "--scheduler",
    envvar="DASK_SCHEDULER_ADDRESS",
    default=None,
    metavar="ADDRESS",
    help="Dask scheduler to connect to (default: $DASK_SCHEDULER_ADDRESS, else a LocalCluster).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object only.")


# main() reads --verbose from argv: the exception it reports has already unwound click's context.
verbose_option = click.option(
    "--verbose", is_flag=True, expose_value=False, help="Show the traceback on failure."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="imgscale")
def cli() -> None:
    """Train image classifiers from feature vectors streamed from zarr stores through Dask."""


@cli.command()
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.argument("store", type=click.Path())
@click.option("--x-key", help="Array or column holding the features (npz, parquet).")
@click.option("--y-key", help="Array or column holding integer labels (-1 = unlabelled).")
@click.option("--ids-key", help="Array or column holding row ids (default: BATCH:ROW).")
@click.option("--labels", "labels_path", type=click.Path(exists=True), help="idx labels file.")
@click.option("--split", default="train", show_default=True, help="Split name for these rows.")
@click.option("--batch-id", help="Commit id (default: from the file's name, size and mtime).")
@verbose_option
def ingest(src, store, x_key, y_key, ids_key, labels_path, split, batch_id) -> None:
    """Ingest SRC (.npy, .npz, .parquet, idx[.gz], .fvecs, .bvecs) into STORE (create or append)."""
    from storage import ingest_file

    started = time.perf_counter()
    feature_store = ingest_file(
        src,
        store,
        batch_id=batch_id,
        x_key=x_key,
        y_key=y_key,
        ids_key=ids_key,
        labels_path=labels_path,
        split=split,
        progress=_progress_line("ingest"),
    )
    click.echo(
        f"{store}: {feature_store.committed_rows} rows × {feature_store.dim} committed "
        f"({time.perf_counter() - started:.1f} s)",
        err=True,
    )


@cli.command()
@click.argument("store", type=click.Path(exists=True))
@json_option
@verbose_option
def info(store, as_json) -> None:
    """Show a store's rows, dimension, encoding, classes, label counts and size on disk."""
    from storage import open_store

    summary = open_store(store).info()
    if as_json:
        click.echo(json.dumps(summary))
        return
    for key, value in summary.items():
        click.echo(f"{key:>16}: {value}")


@cli.command()
@click.argument("src", type=click.Path(exists=True))
@click.argument("dst", type=click.Path())
@click.option("--m", "m", default=64, show_default=True, help="Sub-quantizers (must divide D).")
@click.option("--rotate", is_flag=True, help="Random orthogonal rotation before quantizing.")
@click.option("--sample", default=65_536, show_default=True, help="Rows to train the codec on.")
@click.option("--seed", default=0, show_default=True, help="Sample, rotation and k-means seed.")
@scheduler_option
@json_option
@verbose_option
def compress(src, dst, m, rotate, sample, seed, scheduler, as_json) -> None:
    """Product-quantize SRC into a new PQ store DST (M bytes a row), encoded on the cluster."""
    from jobs.compress import compress as compress_store
    from storage import open_store

    source = open_store(src)
    with connect(scheduler, quiet=as_json):
        summary = compress_store(
            source,
            dst,
            m,
            rotate=rotate,
            sample=sample,
            seed=seed,
            progress=None if as_json else _progress_line("encode"),
        )
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


@cli.command()
@click.argument("store", type=click.Path(exists=True))
@click.argument("model", type=click.Path())
@click.option("--method", type=click.Choice(METHODS), default="ridge", show_default=True)
@click.option("--split", default="train", show_default=True, help="Rows to train on.")
@click.option(
    "--val-split", default="val", show_default=True, help="Rows that choose ρ, or W and k."
)
@click.option("--rho", type=float, help="Fixed ridge regulariser (default: validated grid).")
@click.option(
    "--embedding",
    type=click.Choice(list(EMBEDDINGS)),
    help="Embed rows first (fitted on all SPLIT rows, applied on the fly; paper 000 §3.2).",
)
@click.option("--n-components", type=int, help="Embedding dimension (default: paper 000 §4.1).")
@click.option("--gamma", type=float, help="RFF/Nyström γ (default: 50th-neighbour bandwidth).")
@click.option(
    "--metric-dim",
    default=64,
    show_default=True,
    help="ncm-metric/knn: rows of the learned metric W (paper 002 §3).",
)
@click.option("--max-iter", type=int, help="ncm-metric/knn: SGD iterations at most.")
@click.option(
    "--gram-precision",
    type=click.Choice(GRAM_PRECISIONS),
    default="float64",
    show_default=True,
    help="ridge: precision of the Gram products, summed in float64 (float32: ~2x faster).",
)
@scheduler_option
@verbose_option
def train(
    store, model, method, split, val_split, rho, embedding, n_components, gamma, metric_dim,
    max_iter, gram_precision, scheduler,
) -> None:  # fmt: skip
    """Train a classifier on STORE and save it to MODEL (zarr + JSON, no pickle)."""
    from jobs.train import make_embedding
    from jobs.train import train as train_model
    from storage import open_store

    feature_store = open_store(store)
    embedder = None
    if embedding is not None:
        embedder = make_embedding(embedding, n_components=n_components, gamma=gamma)
    elif n_components is not None or gamma is not None:
        raise click.UsageError("--n-components and --gamma need --embedding")
    if gram_precision != "float64" and method != "ridge":
        raise click.UsageError("--gram-precision applies to --method ridge only")
    started = time.perf_counter()
    with connect(scheduler):
        fitted = train_model(
            feature_store, method, split=split, val_split=val_split, rho=rho, embedding=embedder,
            metric_dim=metric_dim, max_iter=max_iter, gram_precision=gram_precision,
        )  # fmt: skip
        # Saved while connected: a kNN's reference rows are still persisted on the workers.
        models.save(
            fitted,
            model,
            store=str(feature_store.path.resolve()),
            split=split,
            rows=len(feature_store.labels(split)),
            committed_rows=feature_store.committed_rows,
        )
    classifier = fitted.steps[-1][1] if hasattr(fitted, "steps") else fitted
    detail = f", rho={classifier.rho_:g}" if hasattr(classifier, "rho_") else ""
    if hasattr(classifier, "best_iteration_"):
        detail += f", d={metric_dim}, best W at iteration {classifier.best_iteration_}"
    if embedding is not None:
        detail += f", {embedding} embedding to {fitted.steps[0][1].n_components_} dims"
    click.echo(f"{model}: {method}{detail} ({time.perf_counter() - started:.1f} s)", err=True)


@cli.command()
@click.argument("model", type=click.Path(exists=True))
@click.argument("store", type=click.Path(exists=True))
@click.argument("out", type=click.Path())
@click.option("--split", default=None, help="Only rows of this split (default: all).")
@click.option("--top-k", default=5, show_default=True, help="Labels kept per row.")
@scheduler_option
@verbose_option
def predict(model, store, out, split, top_k, scheduler) -> None:
    """Write MODEL's predictions for STORE's rows to the parquet file OUT."""
    from jobs.predict import predict_to_parquet
    from storage import open_store

    fitted, _ = models.load(model)
    with connect(scheduler):
        rows = predict_to_parquet(fitted, open_store(store), out, split=split, k=top_k)
    click.echo(f"{out}: {rows} rows", err=True)


@cli.command()
@click.argument("model", type=click.Path(exists=True))
@click.argument("store", type=click.Path(exists=True))
@click.option("--split", default="test", show_default=True)
@scheduler_option
@json_option
@verbose_option
def evaluate(model, store, split, scheduler, as_json) -> None:
    """Per-class rate, top-1/top-5 flat error and MiAP of MODEL on STORE's labelled rows."""
    from jobs.evaluate import evaluate as evaluate_model
    from storage import open_store

    fitted, _ = models.load(model)
    with connect(scheduler, quiet=as_json):
        result = evaluate_model(fitted, open_store(store), split)
    if as_json:
        click.echo(json.dumps(result))
        return
    for key, value in result.items():
        click.echo(f"{key:>16}: {value:.4f}" if isinstance(value, float) else f"{key:>16}: {value}")


@cli.command("add-class")
@click.argument("model", type=click.Path(exists=True))
@click.argument("store", type=click.Path(exists=True))
@click.option("--label", required=True, help="Class name in STORE whose rows give the mean.")
@click.option("--split", default=None, help="Only rows of this split (default: all).")
@click.option("--out", type=click.Path(), help="Save here instead of replacing MODEL.")
@scheduler_option
@json_option
@verbose_option
def add_class(model, store, label, split, out, scheduler, as_json) -> None:
    """Add class LABEL to an NCM MODEL from its rows in STORE; W and other classes unchanged."""
    from jobs.add_class import add_class as add_class_job
    from storage import open_store

    with connect(scheduler, quiet=as_json):
        summary = add_class_job(model, open_store(store), label, split=split, out=out)
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
    from jobs.demo import run_demo

    click.echo(run_demo(workdir, scheduler))


@cli.command("embed")
@click.argument("model", type=click.Path(exists=True))
@click.argument("src", type=click.Path(exists=True))
@click.argument("dst", type=click.Path())
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
    from jobs.embed import embed_new_rows
    from storage import open_store

    fitted, _ = models.load(model)
    source = open_store(src)
    with connect(scheduler, quiet=as_json):
        summary = embed_new_rows(
            fitted,
            source,
            dst,
            batch_rows=batch_rows,
            max_rows=max_rows,
            provenance={"model": str(Path(model).resolve())},
        )
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

    Example: imgscale schedule --every 10m -- embed MODEL SRC DST. A turn that finds another
    run holding the lock (flock, released when its holders die) is skipped.
    """
    from jobs.schedule import parse_every
    from jobs.schedule import schedule as run_schedule

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


@cli.group()
def bench() -> None:
    """Benchmarks that print figures and ratios against a peer measured in the same run."""


@bench.command("ridge")
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--dim", default=512, show_default=True)
@click.option("--classes", default=1000, show_default=True)
@click.option("--workdir", type=click.Path(), help="Where the synthetic store goes (default tmp).")
@click.option("--skip-peer", is_flag=True, help="Do not run scikit-learn.")
@scheduler_option
@json_option
@verbose_option
def bench_ridge(rows, dim, classes, workdir, skip_peer, scheduler, as_json) -> None:
    """Streamed ridge over an 8-value ρ grid vs scikit-learn RidgeClassifier per ρ in memory."""
    from jobs.bench.ridge import run

    records = run(rows, dim, classes, workdir=workdir, scheduler=scheduler, peer=not skip_peer)
    _print_records(records, as_json)


@bench.command("io")
@click.option("--size-gib", default=2.0, show_default=True, help="Size of the synthetic array.")
@click.option("--dim", default=512, show_default=True)
@click.option("--workdir", type=click.Path(), help="Scratch directory (default tmp).")
@click.option("--markdown", type=click.Path(dir_okay=False), help="Also write a Markdown table.")
@click.option(
    "--matrix/--no-matrix",
    default=True,
    show_default=True,
    help="Measure the codec x chunk x engine matrix of the raw array (the slow part).",
)
@click.option("--repeats", default=5, show_default=True, help="Timed runs of each pass (best).")
@click.option("--pq-m", default=64, show_default=True, help="Codes a row of the PQ code store.")
@json_option
@verbose_option
def bench_io(size_gib, dim, workdir, markdown, matrix, repeats, pq_m, as_json) -> None:
    """Store read rates by codec, chunk size, sharding and engine; each pass vs the read rate."""
    from jobs.bench.common import records_markdown
    from jobs.bench.io import run

    records = run(size_gib, dim, workdir, matrix=matrix, repeats=repeats, pq_m=pq_m)
    if markdown:
        Path(markdown).write_text(records_markdown(records, " ".join(["imgscale", *sys.argv[1:]])))
    _print_records(records, as_json)


@bench.command("accuracy")
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Choice(["digits", "usps", "mnist", "20news"]),
    help="Repeat to choose (default: all four). Tables of data sets not run are kept.",
)
@click.option("--mnist-rows", default=20_000, show_default=True, help="MNIST train rows used.")
@click.option("--data-dir", type=click.Path(exists=True), help="Default: ../shared/data.")
@click.option("--out-dir", default="docs", show_default=True, help="results.md and PNG go here.")
@json_option
@verbose_option
def bench_accuracy(datasets, mnist_rows, data_dir, out_dir, as_json) -> None:
    """Per-class rate of ridge on raw features vs each embedding, 3/10/30/all labels per class."""
    from jobs.bench import accuracy

    records = accuracy.run(
        datasets or accuracy.DATASETS,
        mnist_rows=mnist_rows,
        data_dir=Path(data_dir) if data_dir else accuracy.DATA_DIR,
        log=lambda line: click.echo(line, err=True),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["imgscale", *sys.argv[1:]])
    merged = accuracy.merge_records(out / "accuracy.json", records, command)
    accuracy.plot(merged, out / "accuracy.png")
    accuracy.write_section(out / "results.md", "accuracy", accuracy.report(merged, mnist_rows))
    _print_records(records, as_json)


@bench.command("embed")
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--dim", default=512, show_default=True)
@click.option("--classes", default=100, show_default=True)
@click.option("--paper-rows", default=331_390, show_default=True, help="0 skips Table 2 sizes.")
@click.option("--workdir", type=click.Path(), help="Where the synthetic store goes (default tmp).")
@click.option("--skip-peer", is_flag=True, help="Do not run scikit-learn.")
@scheduler_option
@json_option
@verbose_option
def bench_embed(rows, dim, classes, paper_rows, workdir, skip_peer, scheduler, as_json) -> None:
    """RFF-2000 → ridge (8 ρ) from a store vs sklearn RBFSampler + RidgeClassifier in memory."""
    from jobs.bench.embed import run

    records = run(
        rows,
        dim,
        classes,
        workdir=workdir,
        scheduler=scheduler,
        peer=not skip_peer,
        paper_rows=paper_rows,
    )
    _print_records(records, as_json)


@bench.command("ncm")
@click.option("--rows", default=4_500_000, show_default=True, help="Synthetic store rows.")
@click.option("--dim", default=512, show_default=True)
@click.option("--classes", default=10_000, show_default=True)
@click.option("--queries", default=100_000, show_default=True, help="Rows scored.")
@click.option("--n-components", default=256, show_default=True, help="d of the projection.")
@click.option("--pq-m", default=64, show_default=True, help="Sub-quantizers; 0 skips PQ.")
@click.option("--data-dir", type=click.Path(exists=True), help="MNIST for SGD (../shared/data).")
@click.option("--workdir", type=click.Path(), help="Where the synthetic stores go (default tmp).")
@click.option("--real-data", is_flag=True, help="MNIST/USPS error tables instead (results.md).")
@click.option("--out-dir", default="docs", show_default=True, help="--real-data: results.md, PNG.")
@scheduler_option
@json_option
@verbose_option
def bench_ncm(
    rows, dim, classes, queries, n_components, pq_m, data_dir, workdir, real_data, out_dir,
    scheduler, as_json,
) -> None:  # fmt: skip
    """10K-class means from raw and PQ stores, equation-9 scoring vs a plain GEMM, SGD it/s."""
    from jobs.bench.ncm import DATA_DIR, plot, report, run
    from jobs.bench.ncm import real_data as run_real_data

    if real_data:
        from jobs.bench.accuracy import write_section

        result = run_real_data(
            Path(data_dir) if data_dir else DATA_DIR, lambda line: click.echo(line, err=True)
        )
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "ncm_metric.json").write_text(json.dumps(result, indent=1))
        plot(result, out / "ncm_zero_shot.png")
        command = " ".join(["imgscale", *sys.argv[1:]])
        write_section(
            out / "results.md", "ncm-metric", report(result, command, out / "ncm_zero_shot.png")
        )
        if as_json:
            click.echo(json.dumps(result))
        return

    records = run(
        rows,
        dim,
        classes,
        queries=queries,
        n_components=n_components,
        pq_m=pq_m,
        data_dir=data_dir,
        workdir=workdir,
        scheduler=scheduler,
        log=None if as_json else lambda line: click.echo(line, err=True),
    )
    _print_records(records, as_json)


@bench.command("pq")
@click.option("--rows", default=1_000_000, show_default=True)
@click.option("--dim", default=512, show_default=True)
@click.option("--m", "m", default=64, show_default=True, help="Sub-quantizers.")
@click.option("--mean-classes", default=10_000, show_default=True, help="Classes for means.")
@click.option("--queries", default=16, show_default=True, help="ADC queries.")
@click.option("--workdir", type=click.Path(), help="Where the synthetic stores go (default tmp).")
@scheduler_option
@json_option
@verbose_option
def bench_pq(rows, dim, m, mean_classes, queries, workdir, scheduler, as_json) -> None:
    """PQ encode, MSE, class means from codes and ADC scan vs faiss, bytes raw vs PQ."""
    from jobs.bench.pq import run

    records = run(
        rows,
        dim,
        m,
        mean_classes=mean_classes,
        queries=queries,
        workdir=workdir,
        scheduler=scheduler,
    )
    _print_records(records, as_json)


@bench.command("ale")
@click.option("--rows", default=1_500_000, show_default=True)
@click.option("--dim", default=512, show_default=True)
@click.option("--classes", default=10, show_default=True)
@click.option("--n-components", default=500, show_default=True, help="ALE eigenfunctions C_D.")
@click.option("--incremental-rows", default=100_000, show_default=True)
@click.option("--batch-rows", default=1000, show_default=True)
@click.option("--workdir", type=click.Path(), help="Where the synthetic store goes (default tmp).")
@click.option("--out-dir", type=click.Path(), help="Write the table to OUT_DIR/results.md.")
@scheduler_option
@json_option
@verbose_option
def bench_ale(
    rows, dim, classes, n_components, incremental_rows, batch_rows, workdir, out_dir, scheduler,
    as_json,
) -> None:  # fmt: skip
    """ALE fit + embed + equation-3 solve vs the store read pass; incremental rows/s."""
    from jobs.bench import ale
    from jobs.bench.accuracy import write_section
    from jobs.bench.common import records_markdown

    records = ale.run_speed(
        rows,
        dim,
        classes,
        n_components=n_components,
        incremental_rows=incremental_rows,
        batch_rows=batch_rows,
        workdir=workdir,
        scheduler=scheduler,
        log=lambda line: click.echo(line, err=True),
    )
    if out_dir:
        command = " ".join(["imgscale", *sys.argv[1:]])
        text = "## ALE speed (paper 001 scale)\n\n" + records_markdown(records, command)
        write_section(Path(out_dir) / "results.md", "ale-speed", text)
    _print_records(records, as_json)


@bench.command("ale-ssl")
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    type=click.Choice(["usps", "mnist"]),
    help="Repeat to choose (default: both).",
)
@click.option("--trials", default=5, show_default=True)
@click.option("--data-dir", type=click.Path(exists=True), help="Default: ../shared/data.")
@click.option("--out-dir", default="docs", show_default=True, help="results.md and PNG go here.")
@json_option
@verbose_option
def bench_ale_ssl(datasets, trials, data_dir, out_dir, as_json) -> None:
    """MiAP and per-class rate of ALE + SSL (equation 3) vs linear ridge, growing labelled sets."""
    from jobs.bench import ale
    from jobs.bench.accuracy import DATA_DIR, write_section

    records = ale.run_accuracy(
        datasets or ("usps", "mnist"),
        trials=trials,
        data_dir=Path(data_dir) if data_dir else DATA_DIR,
        log=lambda line: click.echo(line, err=True),
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ale.plot_accuracy(records, out / "ale_ssl.png")
    command = " ".join(["imgscale", *sys.argv[1:]])
    text = ale.accuracy_markdown(records, command) + "\n![ALE + SSL vs ridge](ale_ssl.png)\n"
    write_section(out / "results.md", "ale-ssl", text)
    _print_records(records, as_json)


def _print_records(records: list[dict], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"records": records}))
        return
    for r in records:
        peer = f"  peer {r['peer_value']:.4g}  ratio {r['ratio']:.3f}" if "ratio" in r else ""
        click.echo(f"{r['name']:<40} {r['value']:>12.4g} {r['unit']:<8}{peer}")


def _progress_line(label: str):
    """A progress callback that redraws one stderr line, throttled to a few updates a second."""
    last = [0.0]

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < 0.5:
            return
        last[0] = now
        percent = 100 * done / total if total else 100
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{label}: {done}/{total} rows ({percent:.0f}%){end}")
        sys.stderr.flush()

    return report


def main() -> None:
    """Entry point: one-line errors on stderr, tracebacks only with ``--verbose``."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        hint = " (see --help)" if isinstance(exc, click.UsageError) else ""
        click.echo(f"imgscale: error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("imgscale: aborted", err=True)
        sys.exit(130)
    except Exception as exc:
        if "--verbose" in sys.argv:
            traceback.print_exc()
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        click.echo(f"imgscale: error: {message}", err=True)
        sys.exit(1)
