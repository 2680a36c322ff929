"""The descriptors ``--features`` names, in one table, as `jobs.methods` tables the methods.

Each row says what a descriptor is called, what it needs (nothing, a model file, or a vocabulary
``imgscale fit-features`` learns, with the defaults of that fit), what one core spends on an
image, and one line of help. The ``--features`` help of ``imgscale ingest`` and of ``imgscale
fit-features``, the error naming the descriptors known, and `jobs.features`' kinds are read
from it, so adding a descriptor touches this table and the descriptor's own code (a named one
is built by ``imgscale.pipeline.describe.DESCRIPTORS``; one with a file by `jobs.features`).

This module imports nothing heavy: the command line reads it to write its help.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VocabularyOption:
    """An option of ``imgscale fit-features`` for one kind of vocabulary: its flag, the
    vocabulary's parameter it sets, and the value used when it is not given."""

    flag: str
    param: str
    default: int


@dataclass(frozen=True)
class Descriptor:
    """One descriptor ``--features`` names.

    ``needs``: what follows its name after a colon (``MODEL.onnx``, ``VOCAB.model``), None for a
    named setting. ``vocabulary``: the class a ``VOCAB.model`` file must hold, and
    ``vocabulary_help`` what ``imgscale fit-features`` learns for it, with ``options`` the
    fit's parameters. ``seconds_per_image``: one core's time to describe an image already
    decoded at the descriptor's size (measured on a 2-core x86 machine; ``imgscale bench
    describe-speed`` and ``cnn-speed`` measure them again), which sizes ingest's tasks.
    """

    name: str
    help: str
    seconds_per_image: float
    needs: str | None = None
    vocabulary: str | None = None
    vocabulary_help: str = ""
    options: tuple[VocabularyOption, ...] = ()

    def default(self, flag: str) -> int:
        """The value fit-features uses for its option ``flag`` when it is not given."""
        return next(o.default for o in self.options if o.flag == flag)

    @property
    def spelling(self) -> str:
        """How ``--features`` spells it: ``gist``, ``onnx:MODEL.onnx``, ``bow:VOCAB.model``."""
        return self.name if self.needs is None else f"{self.name}:{self.needs}"


DESCRIPTOR_TABLE: tuple[Descriptor, ...] = (
    Descriptor(
        "gist",
        "LMgist: 4 scales x 8 orientations, 4x4 grid, 128-px grey image; 512-D",
        seconds_per_image=0.025,
    ),
    Descriptor(
        "gist-tiny",
        "GIST of tiny images: 8+8+4 orientations, 4x4 grid, 32 px; 320-D (paper 000)",
        seconds_per_image=0.003,
    ),
    Descriptor(
        "color",
        "HSV colour histogram, 8x4x4 bins of a 32-px image, 128-D",
        seconds_per_image=0.0002,
    ),
    Descriptor(
        "onnx",
        "a CNN exported to ONNX: one output, globally average-pooled",
        seconds_per_image=0.02,
        needs="MODEL.onnx",
    ),
    Descriptor(
        "bow",
        "bag of words of dense SIFT against a fit-features dictionary (paper 000)",
        seconds_per_image=0.02,
        needs="VOCAB.model",
        vocabulary="BagOfWords",
        vocabulary_help="a k-means dictionary of dense SIFT (paper 000)",
        options=(
            VocabularyOption("--words", "n_words", 400),
            VocabularyOption("--pyramid-levels", "pyramid_levels", 1),
        ),
    ),
    Descriptor(
        "fisher",
        "Fisher vectors of RootSIFT and local colour, fit-features GMM (paper 002)",
        seconds_per_image=0.02,
        needs="VOCAB.model",
        vocabulary="FisherVector",
        vocabulary_help="PCA + diagonal GMM of dense RootSIFT and local colour (paper 002)",
        options=(
            VocabularyOption("--gaussians", "n_gaussians", 16),
            VocabularyOption("--components", "n_components", 64),
        ),
    ),
)

BY_NAME: dict[str, Descriptor] = {d.name: d for d in DESCRIPTOR_TABLE}
# The descriptors whose file is a vocabulary `imgscale fit-features` learns.
VOCABULARIES: dict[str, Descriptor] = {d.name: d for d in DESCRIPTOR_TABLE if d.vocabulary}


def known_spellings() -> str:
    """Every descriptor as ``--features`` spells it, comma-separated, in the table's order."""
    return ", ".join(d.spelling for d in DESCRIPTOR_TABLE)


def features_help() -> str:
    """The help of ``imgscale ingest --features``."""
    return (
        f"Images in: descriptors to compute, comma-separated: {known_spellings()} (vocabularies "
        "of imgscale fit-features) (default for a store of images: those it was made with; see "
        "Descriptors below)."
    )


def descriptor_list() -> str:
    """The descriptors and their help, one a line, as a command's epilog."""
    # click keeps the lines of a paragraph that starts with \b as they are.
    width = max(len(d.spelling) for d in DESCRIPTOR_TABLE)
    return "\b\nDescriptors:\n" + "\n".join(
        f"  {d.spelling:<{width}}  {d.help}" for d in DESCRIPTOR_TABLE
    )


def vocabulary_help() -> str:
    """The help of ``imgscale fit-features --features``: what each kind of vocabulary is."""
    return "; ".join(f"{d.name}: {d.vocabulary_help}" for d in VOCABULARIES.values()) + "."
