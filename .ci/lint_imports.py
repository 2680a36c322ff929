"""Run import-linter (the contracts in pyproject.toml) on the package as installed.

The layers sit in the repository's root folders and install as ``imgscale.*`` through
pyproject's package-dir mapping, which import-linter cannot follow; so the folders are copied
under an ``imgscale/`` directory first and linted there. Usage: python .ci/lint_imports.py [ROOT]
(ROOT: a checkout, default this one). Exits with lint-imports' status.
"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

LAYERS = ("storage", "pipeline", "jobs", "bench")


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1]).resolve()
    with tempfile.TemporaryDirectory(prefix="imgscale-lint-") as tmp:
        package = Path(tmp) / "imgscale"
        shutil.copytree(root / "imgscale", package, ignore=shutil.ignore_patterns("__pycache__"))
        for layer in LAYERS:
            shutil.copytree(
                root / layer, package / layer, ignore=shutil.ignore_patterns("__pycache__")
            )
        lint = Path(sys.executable).with_name("lint-imports")
        config = str(root / "pyproject.toml")
        env = {"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"}
        command = [lint, "--config", config, "--no-cache"]
        return subprocess.run(command, env=env, cwd=tmp).returncode


if __name__ == "__main__":
    sys.exit(main())
