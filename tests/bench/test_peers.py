"""Every figure of the full tables has a peer or says what it is for; a peer figure is taken from
the same run, and its ratio is ours over it."""

from collections import defaultdict
from pathlib import Path

from imgscale.bench import docs, peers, report, results
from imgscale.bench.common import record

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _run(benchmark, *records, time="2026-01-01T00:00:00"):
    columns = {"machine": "m", "imgscale_version": "0", "command": "cmd", "commit": "abc"}
    return results.rows(list(records), benchmark=benchmark, scale="small", time=time, **columns)


def test_every_committed_figure_has_a_peer_or_a_purpose():
    runs = defaultdict(list)
    for r in results.read(DOCS / docs.TABLE_FILE):
        runs[r["benchmark"], r["scale"], r["time"], r["commit"], r["command"]].append(r)
    missing = {key[0]: peers.unexplained(run) for key, run in runs.items()}
    assert {b: names for b, names in missing.items() if names} == {}


def test_a_method_stands_against_linear_ridge_of_the_same_run_at_the_same_labels(tmp_path):
    run = _run(
        "accuracy",
        record("mnist linear 10 labelled/class", 0.80, "per-class rate"),
        record("mnist linear 100 labelled/class", 0.90, "per-class rate"),
        record("mnist RFF-2000 10 labelled/class", 0.84, "per-class rate"),
    )
    rff = {r["name"]: r for r in peers.annotate(run)}["mnist RFF-2000 10 labelled/class"]
    assert rff["peer_value"] == 0.80 and rff["peer"] == "linear ridge, same labels, same run"
    assert rff["ratio"] == 0.84 / 0.80
    linear = {r["name"]: r for r in peers.annotate(run)}["mnist linear 10 labelled/class"]
    assert linear["peer_value"] is None and "baseline" in linear["purpose"]
    # In the documents, a newer run's linear figure is not the peer of an older run's RFF.
    newer = _run("accuracy", record("mnist linear 10 labelled/class", 0.5, "per-class rate"),
                 time="2026-02-01T00:00:00")  # fmt: skip
    results.write(tmp_path / docs.TABLE_FILE, run + newer)
    docs.write(tmp_path)
    text = (tmp_path / "results.md").read_text()
    assert "| mnist RFF-2000 10 labelled/class | 0.84 | per-class rate | linear ridge" in text
    assert "| 0.8 | 1.050 |" in text and "| 0.5 | 1.680 |" not in text


def test_group_text_is_matched_literally_in_the_peer_name():
    run = _run(
        "io",
        record("read blosc-lz4-shuffle+crc32c chunk 16 MiB zarr-python cold", 1.0, "GB/s"),
        record("read blosc-lz4-shuffle+crc32c chunk 16 MiB imgscale direct cold", 3.0, "GB/s"),
        record("read blosc-lz4-shuffleXcrc32c chunk 16 MiB zarr-python cold", 9.0, "GB/s"),
    )
    ours = peers.annotate(run)[1]
    assert ours["peer_value"] == 1.0 and ours["ratio"] == 3.0


def test_a_figure_no_rule_explains_is_listed_and_the_table_says_what_others_are_for():
    run = _run(
        "scale",
        record("store of 1000 rows, GiB", 0.1, "GiB"),
        record("something new", 1.0, "s"),
    )
    assert peers.unexplained(run) == ["something new"]
    table = report.table(peers.annotate(run))
    assert "| store of 1000 rows, GiB | 0.1 | GiB | *none — the store's size" in table
    assert "| something new | 1 | s |  |" in table


def test_rare_local_variants_stand_against_ours_and_the_fix_against_global_b():
    run = _run(
        "rare-local",
        record("gist frog accuracy ours", 0.80, "fraction"),
        record("gist frog accuracy ours uncompressed", 0.72, "fraction"),
        record("gist frog accuracy ours uncompressed k=50", 0.90, "fraction"),
        record("gist frog accuracy global b", 0.75, "fraction"),
        record("gist frog accuracy local fixed", 0.60, "fraction"),
        record("gist dog accuracy ours", 0.50, "fraction"),
    )
    by_name = {r["name"]: r for r in peers.annotate(run)}
    assert by_name["gist frog accuracy ours uncompressed"]["ratio"] == 0.72 / 0.80
    assert by_name["gist frog accuracy ours uncompressed k=50"]["ratio"] == 0.90 / 0.72
    assert by_name["gist frog accuracy local fixed"]["ratio"] == 0.60 / 0.75
    assert "baseline" in by_name["gist frog accuracy global b"]["purpose"]
