"""The import contracts of pyproject.toml (run by .ci/lint_imports.py in CI) hold on this tree and
fail on a planted back edge, private-module import, cycle, or reproduction reaching past an
interface."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
LINT = ROOT / ".ci" / "lint_imports.py"


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(LINT), str(root)], capture_output=True, text=True, timeout=120
    )


def test_the_tree_keeps_every_contract():
    result = lint(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        ("pipeline/metrics.py", "import imgscale.jobs.models", "bench over jobs"),
        ("pipeline/metrics.py", "import imgscale.storage", "bench over jobs"),
        ("storage/errors.py", "import imgscale.pipeline.compute", "bench over jobs"),
        ("jobs/cli/options.py", "import imgscale.bench.cli", "bench over jobs"),
        ("jobs/cli/options.py", "import imgscale.storage.layout", "jobs uses storage"),
        ("jobs/cli/options.py", "import imgscale.pipeline.classify.ridge", "jobs uses estimators"),
        ("jobs/cli/options.py", "import imgscale.pipeline.metrics", "jobs.cli imports no pipeline"),
        ("bench/common.py", "import imgscale.pipeline.embed._base", "private (underscore)"),
        ("bench/ridge.py", "import imgscale.storage.layout", "jobs uses storage"),
        ("bench/ridge.py", "import imgscale.pipeline.classify.ridge", "jobs uses estimators"),
        ("storage/layout.py", "import imgscale.storage.store", "no import cycles"),
        ("pipeline/reductions.py", "import distributed", "do not import distributed"),
        ("storage/store.py", "from distributed import Client", "do not import distributed"),
        ("reproductions/hope.py", "import imgscale.bench.images", "reproductions import"),
        ("reproductions/hope.py", "import imgscale.jobs.cluster.fanout", "reproductions import"),
        ("reproductions/hope.py", "import imgscale.jobs.ingest.commit", "reproductions import"),
        ("reproductions/hope.py", "import imgscale.storage.layout", "jobs uses storage"),
        ("reproductions/ncm_accuracy.py", "import imgscale.pipeline.classify.ncm", "estimators"),
    ],
)
def test_a_planted_import_breaks_its_contract(tmp_path, module, planted, broken):
    for name in ("imgscale", "storage", "pipeline", "jobs", "bench", "reproductions"):
        shutil.copytree(
            ROOT / name,
            tmp_path / name,
            symlinks=True,  # imgscale/'s links to the layer folders stay links
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{planted}\n")
    result = lint(tmp_path)
    assert result.returncode != 0, result.stdout
    report = result.stdout.split("Broken contracts")[1]
    assert broken in report


def test_each_layer_folder_is_linked_under_imgscale_for_static_readers():
    """Editors and import-graph tools resolve imgscale.storage.x to storage/x.py by these links
    (the package-dir mapping is only known to an installer)."""
    for layer in ("storage", "pipeline", "jobs", "bench"):
        link = ROOT / "imgscale" / layer
        assert link.is_symlink(), link
        assert link.resolve() == (ROOT / layer).resolve()


def test_storage_exports_are_the_names_its_init_imports_for_type_checking():
    import importlib

    import imgscale.storage as storage

    expected = {
        "changes": ["StoreChange", "rows_changed_since"],
        "classes": ["read_class_names"],
        "compact": ["compact_store"],
        "create": ["create_coded_store", "create_or_open", "create_store"],
        "errors": ["StoreError"],
        "export": ["export_rows"],
        "forget": ["forget_rows"],
        "formats": ["FORMATS", "Source", "open_source"],
        "ledger": ["OUTCOMES", "Ledger"],
        "fs": ["absolute", "current_storage_options", "is_url", "location", "publish_file",
               "use_storage_options"],
        "ids": ["HashRuns", "id_hashes"],
        "images.decode": ["ImageRejected", "ImageRequest", "decode_image"],
        "images.source_types": ["IMAGE_EXTENSIONS", "EncodedImage", "ImagePartition",
                                "ImageSource"],
        "images.sources": ["open_image_source", "read_partition"],
        "images.listing": ["file_sha256", "image_files", "local_file_stats", "read_listing",
                           "read_whole_files", "stat_files", "write_listing",
                           "write_whole_files"],
        "layout": ["ROW_DIGEST_BYTES", "default_rows_per_chunk", "image_rows_per_chunk",
                   "row_digest"],
        "lock": ["FileLock"],
        "row_codecs": ["RowCodec"],
        "saved_models": ["SavedStep", "load_model", "save_model"],
        "store": ["SCHEMA_VERSION", "FeatureStore", "open_store"],
        "validate": ["as_digests"],
        "writer": ["CopyWriter", "write_row_chunk"],
    }  # fmt: skip
    assert storage.__all__ == sorted(name for names in expected.values() for name in names)
    for module, names in expected.items():
        defining = importlib.import_module(f"imgscale.storage.{module}")
        for name in names:
            assert getattr(storage, name) is getattr(defining, name), name
