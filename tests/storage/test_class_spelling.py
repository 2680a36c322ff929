"""One class name, one class: the composed (NFC) and decomposed (NFD) spellings of a name are the
same class, and a UTF-8 byte order mark in a --class-names file is not part of the first name
(each used to give a class that looks like another, or a first name that never matches)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from imgscale.jobs.cli import cli

COMPOSED = unicodedata.normalize("NFC", "café")
DECOMPOSED = unicodedata.normalize("NFD", "café")


def _info(store: Path) -> dict:
    return json.loads(CliRunner().invoke(cli, ["info", str(store), "--json"]).output)


def _ingest(src: Path, store: Path, *options: str) -> None:
    result = CliRunner().invoke(cli, ["ingest", str(src), str(store), *options])
    assert result.exit_code == 0, result.output


def test_composed_and_decomposed_spellings_are_one_class(tmp_path: Path) -> None:
    assert COMPOSED != DECOMPOSED
    rng = np.random.default_rng(0)
    for name, spelling, split in (("a.npz", COMPOSED, "train"), ("b.npz", DECOMPOSED, "test")):
        X = rng.normal(size=(6, 3)).astype(np.float32)
        np.savez(tmp_path / name, X=X, y=np.array([spelling, "tea"] * 3))
        _ingest(tmp_path / name, tmp_path / "s.zarr", "--split", split)
    info = _info(tmp_path / "s.zarr")
    assert info["classes"] == [COMPOSED, "tea"]
    assert info["label_counts"] == {COMPOSED: 6, "tea": 6}


def test_a_byte_order_mark_is_not_part_of_the_first_class_name(tmp_path: Path) -> None:
    (tmp_path / "names.txt").write_bytes("\ufeffcat\ndog\n".encode())
    X = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    np.savez(tmp_path / "rows.npz", X=X, y=np.array([0, 1, 0, 1]))
    names = ["--class-names", str(tmp_path / "names.txt")]
    _ingest(tmp_path / "rows.npz", tmp_path / "s.zarr", *names)
    assert _info(tmp_path / "s.zarr")["classes"] == ["cat", "dog"]


def test_a_class_names_file_spelling_one_name_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "names.txt").write_text(f"{COMPOSED}\n{DECOMPOSED}\n", encoding="utf-8")
    np.savez(tmp_path / "rows.npz", X=np.ones((2, 3), np.float32), y=np.array([0, 1]))
    result = CliRunner().invoke(
        cli,
        ["ingest", str(tmp_path / "rows.npz"), str(tmp_path / "s.zarr"), "--class-names",
         str(tmp_path / "names.txt")],
    )  # fmt: skip
    assert result.exit_code == 1
    assert str(result.exception) == (
        f"{tmp_path / 'names.txt'}: line 2 repeats {COMPOSED!r} (line 1); expected unique class "
        "names"
    )
