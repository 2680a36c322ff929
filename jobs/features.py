"""What ``--features`` names: descriptors computed from images, and the record a store keeps of
them so that every batch of its rows is computed the same way.

``--features gist,color`` is a comma-separated list of the descriptors `jobs.descriptors`
tables: names of settings (`DESCRIPTORS` of ``imgscale.pipeline.describe``: ``gist``,
``gist-tiny``, ``color``), ``onnx:MODEL.onnx`` for a user's CNN, and ``bow:VOCAB.model`` /
``fisher:VOCAB.model`` for bags of words and Fisher vectors encoded against a vocabulary
``imgscale fit-features`` saved; a row is the concatenation of the descriptors in that order.
The store records each descriptor's name, parameters and width (an ONNX model by its path and
the sha256 of its bytes, a vocabulary by its path and the sha256 of its parameters and arrays),
and refuses a batch described otherwise. An image store ingested again without ``--features``
is described as its record says.

A client that only hands descriptors to workers never builds them: `features_of_store` of a
record of named descriptors (no model file to check) is a `Features` of the record alone, whose
steps are built where they are first needed, on the workers; so an ingest into an existing store
does not import scikit-learn, SciPy or numba on the client.

A `Features` sent to a worker is kept there: each process holds the descriptors it was sent,
by their record, built and run once on a blank image (a GIST filter bank and its FFT plans, an
ONNX Runtime session, a vocabulary), and every later task and command on that worker that sends
the same record gets them back as they are (`warm_features`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from imgscale.jobs.descriptors import DESCRIPTOR_TABLE, VOCABULARIES, known_spellings
from imgscale.jobs.feature_records import described_by, same_features, spelling
from imgscale.storage import ImageRequest, StoreError

if TYPE_CHECKING:
    from sklearn.base import BaseEstimator

ONNX = "onnx"
# --features kind → the vocabulary class its model file must hold.
VOCABULARY_KINDS = {name: d.vocabulary for name, d in VOCABULARIES.items()}
# The kinds described by a file (a model or a vocabulary), read again wherever they are built.
MODEL_KINDS = tuple(d.name for d in DESCRIPTOR_TABLE if d.needs)
# What `seconds_per_image` declares, by kind, to size ingest's tasks by their work.
SECONDS_PER_IMAGE = {d.name: d.seconds_per_image for d in DESCRIPTOR_TABLE}
# Settings of descriptors a process keeps built (the least recently used one goes first): an
# ONNX session of a CNN holds its weights, tens of MiB.
WARM_SETTINGS = 4


class Features:
    """Fitted descriptors, the image each one needs, and the store's record of them. Given no
    ``steps``, they are built from ``record`` when first needed (`steps_of_record`)."""

    def __init__(self, steps: list[BaseEstimator] | None, record: dict[str, Any]) -> None:
        self._steps = steps
        self._requests: list[ImageRequest] | None = None
        self.record = record

    @property
    def steps(self) -> list[BaseEstimator]:
        if self._steps is None:
            self._steps = steps_of_record(self.record)
        return self._steps

    @property
    def requests(self) -> list[ImageRequest]:
        if self._requests is None:
            self._requests = [ImageRequest(*step.image_request) for step in self.steps]
        return self._requests

    @property
    def dim(self) -> int:
        return self.record["dim"]

    @property
    def label(self) -> str:
        return ",".join(spelling(entry) for entry in self.record["features"])

    def describe(self, images: list[list[np.ndarray]]) -> np.ndarray:
        """Rows for decoded images: ``images[i]`` holds image i as each step requested it."""
        if not images:
            return np.empty((0, self.dim), np.float32)
        parts = [
            step.transform(np.stack([image[s] for image in images]))
            for s, step in enumerate(self.steps)
        ]
        return np.ascontiguousarray(np.hstack(parts), dtype=np.float32)

    def warm(self) -> None:
        """Build what each descriptor builds on first use (filters, FFT plans, a session and its
        buffers) by describing one blank image."""
        blank = [
            np.zeros(r.size + ((3,) if r.mode == "RGB" else ()), np.uint8) for r in self.requests
        ]
        self.describe([blank])

    def __reduce__(self) -> tuple:
        # Unpickled through the process's cache: a worker builds each setting once.
        return warm_features, (self.record, self._steps)


_warm: OrderedDict[str, Features] = OrderedDict()
_warm_lock = threading.Lock()
_warm_builds = 0


def warm_features(record: dict[str, Any], steps: list[BaseEstimator] | None) -> Features:
    """The `Features` this process already built for ``record``, else ``steps`` (or the record,
    when None) made one, warmed and kept (`WARM_SETTINGS` settings at most). A record names each
    descriptor's parameters and model bytes (sha256), so the same record describes images the
    same way."""
    global _warm_builds
    key = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    with _warm_lock:
        features = _warm.get(key)
        if features is None:
            features = Features(steps, record)
            features.warm()
            _warm_builds += 1
            _warm[key] = features
            while len(_warm) > WARM_SETTINGS:
                _warm.popitem(last=False)
        _warm.move_to_end(key)
    return features


def warm_builds() -> int:
    """How many settings of descriptors this process has built for `warm_features`."""
    return _warm_builds


def parse_features(spec: str) -> Features:
    """`Features` for ``--features SPEC``; a ValueError names what is wrong in one line."""
    from imgscale.pipeline.describe import DESCRIPTORS

    names = spec_names(spec)
    steps, entries = [], []
    for name in names:
        kind, _, argument = name.partition(":")
        if kind == ONNX:
            step, entry = _onnx_step(argument, name)
            try:
                step.fit()
            except ValueError as e:
                raise ValueError(f"--features {name!r}: {e}") from e
        elif kind in VOCABULARY_KINDS:
            step, entry = _vocabulary_step(kind, argument, name)
        elif kind in DESCRIPTORS and not argument:
            step = DESCRIPTORS[kind]().fit()
            entry = {"name": kind, "params": _json(step.get_params())}
        else:
            raise ValueError(
                f"--features: unknown descriptor {name!r}; expected one of {known_spellings()}"
            )
        entry["dim"] = int(step.n_features_out_)
        steps.append(step)
        entries.append(entry)
    return Features(steps, {"features": entries, "dim": sum(e["dim"] for e in entries)})


def seconds_per_image(names: list[str]) -> float:
    """The declared seconds of one core to describe an image by the descriptors ``names``
    (``--features`` spellings or a record's names; `SECONDS_PER_IMAGE`, the dearest for a kind
    it lacks)."""
    dearest = max(SECONDS_PER_IMAGE.values())
    return sum(SECONDS_PER_IMAGE.get(name.partition(":")[0], dearest) for name in names)


def spec_names(spec: str) -> list[str]:
    """The descriptors ``--features SPEC`` names, in order; a ValueError if it names none."""
    names = [part.strip() for part in spec.split(",")]
    if not spec.strip() or "" in names:
        raise ValueError(
            f"--features {spec!r}: expected names separated by commas, e.g. gist,color"
        )
    return names


def names_record(spec: str, record: dict[str, Any] | None) -> bool:
    """Whether ``--features SPEC`` names exactly the descriptors of ``record`` (a store's), with
    no model file among them: the store's record then says how to describe its images, and
    nothing needs building on the client."""
    names = spec_names(spec)
    return (
        record is not None
        and bool(record.get("features"))
        and names == [spelling(entry) for entry in record["features"]]
        and not any(entry["name"] in MODEL_KINDS for entry in record["features"])
    )


def features_of_store(record: dict[str, Any], store: str) -> Features:
    """`Features` as a store's record describes them (an ONNX model or a vocabulary read again
    from its path, refused if it changed). Named descriptors alone are not built here: their
    record is all a worker needs to build them (`steps_of_record`)."""
    if not any(entry["name"] in MODEL_KINDS for entry in record["features"]):
        return Features(None, record)
    return Features(steps_of_record(record, store), record)


def steps_of_record(record: dict[str, Any], store: str | None = None) -> list[BaseEstimator]:
    """The descriptors ``record`` names, built (an ONNX model or a vocabulary read again from
    its path, refused naming ``store`` if it changed)."""
    from imgscale.pipeline.describe import DESCRIPTORS

    where = f"store {store}: " if store else ""
    steps = []
    for entry in record["features"]:
        kind = entry["name"]
        if kind in MODEL_KINDS:
            if kind == ONNX:
                step, found = _onnx_step(entry["model"], spelling(entry))
                step.fit()
            else:
                step, found = _vocabulary_step(kind, entry["model"], spelling(entry))
            if found["model_sha256"] != entry["model_sha256"]:
                raise StoreError(
                    f"{where}its rows were described by {entry['model']} with sha256 "
                    f"{entry['model_sha256'][:12]}…, which now has {found['model_sha256'][:12]}…"
                )
        elif kind in DESCRIPTORS:
            step = DESCRIPTORS[kind]().set_params(**entry["params"]).fit()
        else:
            raise StoreError(f"{where}described by {kind!r}, which this imgscale lacks")
        steps.append(step)
    return steps


def check_same_features(stored: dict[str, Any] | None, features: Features, store: str) -> None:
    """Refuse to add rows to a store whose rows were described otherwise (or given as vectors)."""
    if stored is None:
        raise StoreError(
            f"store {store}: holds vectors ingested from files, not image descriptors; "
            "ingest images into a store of their own"
        )
    if not same_features(stored, features.record):
        raise StoreError(
            f"store {store}: its rows are described by "
            f"{described_by(stored) if stored.get('features') else stored}; "
            f"refusing rows described by {described_by(features.record)} (use another store)"
        )


def _onnx_step(path: str, name: str) -> tuple[BaseEstimator, dict[str, Any]]:
    if not path:
        raise ValueError(f"--features {name!r}: expected onnx:PATH, the model file")
    file = Path(path)
    if not file.is_file():
        raise ValueError(f"--features {name!r}: {file} is not a file")
    from imgscale.pipeline.describe import OnnxFeatures

    model = file.read_bytes()
    step = OnnxFeatures(model)
    params = {k: v for k, v in step.get_params().items() if k != "model"}
    entry = {
        "name": ONNX,
        "model": str(file.resolve()),
        "model_sha256": hashlib.sha256(model).hexdigest(),
        "params": _json(params),
    }
    return step, entry


def _vocabulary_step(kind: str, path: str, name: str) -> tuple[BaseEstimator, dict[str, Any]]:
    """The fitted vocabulary saved at ``path`` (``imgscale fit-features``), refused in one line
    unless it is the class ``kind`` names."""
    from imgscale.jobs.models import load

    if not path:
        raise ValueError(
            f"--features {name!r}: expected {kind}:PATH, a vocabulary fit-features saved"
        )
    try:
        vocabulary, _ = load(path)
    except StoreError as exc:
        raise ValueError(f"--features {name!r}: {exc}") from None
    expected = VOCABULARY_KINDS[kind]
    found = type(vocabulary).__name__
    if found != expected:
        made_by = {cls: k for k, cls in VOCABULARY_KINDS.items()}.get(found)
        what = (
            f"a {found} vocabulary (fit-features --features {made_by}; use {made_by}:{path})"
            if made_by
            else f"a {found} model, not a vocabulary"
        )
        raise ValueError(f"--features {name!r}: {path} is {what}; expected a {expected} vocabulary")
    entry = {
        "name": kind,
        "model": _resolved(path),
        "model_sha256": vocabulary_sha256(vocabulary),
        "params": _json(vocabulary.get_params()),
    }
    return vocabulary, entry


def vocabulary_sha256(vocabulary: BaseEstimator) -> str:
    """sha256 of a fitted vocabulary's class, parameters and fitted arrays (name, dtype, shape,
    bytes): its identity wherever and however its file is stored."""
    digest = hashlib.sha256(type(vocabulary).__name__.encode())
    params = vocabulary.get_params()
    if params.get("sift_window") == 1.0:
        # Vocabularies fitted before the SIFT window was a parameter described at window 1:
        # left out at that value, their identity (and the stores that record it) is unchanged.
        del params["sift_window"]
    digest.update(json.dumps(_json(params), sort_keys=True).encode())
    for name, value in sorted(vars(vocabulary).items()):
        if name.endswith("_") and isinstance(value, np.ndarray):
            digest.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
            digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


def _resolved(path: str) -> str:
    """A local path made absolute (workers and later runs read it again); a URL as given."""
    return path if "://" in path else str(Path(path).resolve())


def _json(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as a JSON round trip gives them back (tuples become lists)."""
    return json.loads(json.dumps(params))
