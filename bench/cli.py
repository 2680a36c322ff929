"""``imgscale bench``: registered with the ``imgscale`` command through the ``imgscale.commands``
entry point, so the program's own layers never import the benchmarks."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from imgscale.jobs.options import json_option, print_records, scheduler_option, verbose_option


@click.group()
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
    from imgscale.bench.ridge import run

    records = run(rows, dim, classes, workdir=workdir, scheduler=scheduler, peer=not skip_peer)
    print_records(records, as_json)


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
    from imgscale.bench.common import records_markdown
    from imgscale.bench.io import run

    records = run(size_gib, dim, workdir, matrix=matrix, repeats=repeats, pq_m=pq_m)
    if markdown:
        Path(markdown).write_text(records_markdown(records, " ".join(["imgscale", *sys.argv[1:]])))
    print_records(records, as_json)


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
    from imgscale.bench import accuracy

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
    print_records(records, as_json)


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
    from imgscale.bench.embed import run

    records = run(
        rows,
        dim,
        classes,
        workdir=workdir,
        scheduler=scheduler,
        peer=not skip_peer,
        paper_rows=paper_rows,
    )
    print_records(records, as_json)


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
    from imgscale.bench.ncm import DATA_DIR, plot, report, run
    from imgscale.bench.ncm import real_data as run_real_data

    if real_data:
        from imgscale.bench.accuracy import write_section

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
    print_records(records, as_json)


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
    from imgscale.bench.pq import run

    records = run(
        rows,
        dim,
        m,
        mean_classes=mean_classes,
        queries=queries,
        workdir=workdir,
        scheduler=scheduler,
    )
    print_records(records, as_json)


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
    from imgscale.bench import ale
    from imgscale.bench.accuracy import write_section
    from imgscale.bench.common import records_markdown

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
    print_records(records, as_json)


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
    from imgscale.bench import ale
    from imgscale.bench.accuracy import DATA_DIR, write_section

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
    print_records(records, as_json)
