"""The table of descriptors: every descriptor the pipeline builds has its row, each row says what
its descriptor is, and the commands' --features help is read from it."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from imgscale.jobs.cli import cli
from imgscale.jobs.descriptors import DESCRIPTOR_TABLE, VOCABULARIES
from imgscale.jobs.features import parse_features
from imgscale.pipeline import describe


def test_every_setting_the_pipeline_names_has_a_row_and_every_row_without_a_file_is_one():
    named = [d.name for d in DESCRIPTOR_TABLE if d.needs is None]
    assert sorted(named) == sorted(describe.DESCRIPTORS)


@pytest.mark.parametrize("name", sorted(describe.DESCRIPTORS))
def test_a_named_descriptors_help_line_gives_the_width_it_builds(name):
    (row,) = [d for d in DESCRIPTOR_TABLE if d.name == name]
    (said,) = re.findall(r"(\d+)-D", row.help)
    assert int(said) == parse_features(name).dim


@pytest.mark.parametrize("name", sorted(VOCABULARIES))
def test_a_vocabulary_row_names_its_class_and_parameters_the_class_takes(name):
    row = VOCABULARIES[name]
    vocabulary = getattr(describe, row.vocabulary)
    params = vocabulary().get_params()
    assert row.options and all(option.param in params for option in row.options)


def test_each_row_costs_some_time_and_names_its_file_after_a_colon():
    for row in DESCRIPTOR_TABLE:
        assert row.seconds_per_image > 0
        assert row.spelling == (row.name if row.needs is None else f"{row.name}:{row.needs}")
    assert [d.spelling for d in DESCRIPTOR_TABLE if d.vocabulary] == [
        "bow:VOCAB.model",
        "fisher:VOCAB.model",
    ]


def help_text(*command: str) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def test_ingest_help_lists_every_row_with_its_help_line():
    text = help_text("ingest")
    flowing = " ".join(text.split())
    spellings = ", ".join(d.spelling for d in DESCRIPTOR_TABLE)
    assert f"comma-separated: {spellings} (vocabularies of imgscale fit-features)" in flowing
    descriptors = text.split("Descriptors:\n")[1].splitlines()
    assert len(descriptors) == len(DESCRIPTOR_TABLE)
    for line, row in zip(descriptors, DESCRIPTOR_TABLE, strict=True):
        assert line.split() == [row.spelling, *row.help.split()]


def test_fit_features_help_offers_the_vocabularies_with_their_defaults():
    flowing = " ".join(help_text("fit-features").split())
    assert f"--features [{'|'.join(VOCABULARIES)}]" in flowing
    for name, row in VOCABULARIES.items():
        assert f"{name}: {row.vocabulary_help}" in flowing
    assert "dictionary size [400:" in flowing and "GMM size [16:" in flowing
    assert "4x4 cells) [1]" in flowing and "PCA dimensions a channel [64:" in flowing


def test_an_unknown_descriptor_is_refused_naming_every_row():
    with pytest.raises(ValueError) as refusal:
        parse_features("gits")
    assert str(refusal.value).endswith(
        "expected one of " + ", ".join(d.spelling for d in DESCRIPTOR_TABLE)
    )
