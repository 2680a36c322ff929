"""The documents' tables kept as TOML: read as written, and a mistyped entry refused by name."""

import pytest

from imgscale.bench import toml_tables
from imgscale.bench.headlines import Curve, Figure

KINDS = {"figure": Figure, "curve": Curve}


def test_entries_are_read_in_order_with_arrays_as_tuples(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(
        '[[figure]]\nbenchmark = "ridge"\nname = \'fit \\d+\'\nlabel = "fit"\n'
        'words = ["faster", "slower"]\nlower_is_better = true\n\n'
        '[[figure]]\nbenchmark = "pq"\nname = "x"\nlabel = "x"\npaper = [0.5, "paper 002"]\n\n'
        '[[curve]]\ntitle = "t"\nbenchmark = "b"\npattern = "p"\n'
        'methods = [["linear", "linear ridge"]]\n'
    )
    tables = toml_tables.read(path, KINDS)
    assert tables["figure"] == (
        Figure("ridge", r"fit \d+", "fit", words=("faster", "slower"), lower_is_better=True),
        Figure("pq", "x", "x", paper=(0.5, "paper 002")),
    )
    assert tables["curve"] == (Curve("t", "b", "p", (("linear", "linear ridge"),)),)
    hash(tables["curve"][0])  # frozen and hashable: no list was left inside


@pytest.mark.parametrize(
    "text, message",
    [
        ('[[figure]]\nbenchmark = "a"\nname = "b"\nlabel = "c"\nlower_is_beter = true\n',
         "[[figure]] number 1: unknown key lower_is_beter"),
        ('[[figure]]\nbenchmark = "a"\nname = "b"\n', "[[figure]] number 1: "),
        ('[[figures]]\nbenchmark = "a"\n', "unknown table figures"),
        ('[[figure]]\nbenchmark = "a\n', "t.toml: "),
    ],
)  # fmt: skip
def test_a_mistyped_entry_is_refused_naming_the_file_and_the_entry(tmp_path, text, message):
    path = tmp_path / "t.toml"
    path.write_text(text)
    with pytest.raises(ValueError) as refused:
        toml_tables.read(path, KINDS)
    assert str(path) in str(refused.value) and message in str(refused.value)
