"""Run import-linter (the contracts in pyproject.toml) on a checkout's sources, as they are.

The layers sit in the repository's root folders and install as ``imgscale.*`` through
pyproject's package-dir mapping. ``imgscale/`` also holds a relative symlink to each layer folder
(``imgscale/storage -> ../storage``, ...), so the package's tree on disk is the installed one: a
static reader that starts from ``imgscale/`` (grimp, which import-linter uses, follows the links;
so do IDEs and type checkers) resolves ``imgscale.storage.x`` to ``storage/x.py``. ROOT goes first
on the path, so its ``imgscale`` is the one linted, whatever is installed.

Usage: python .ci/lint_imports.py [ROOT] (ROOT: a checkout, default this one). Exits with
lint-imports' status.
"""

import subprocess
import sys
from pathlib import Path


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1]).resolve()
    lint = Path(sys.executable).with_name("lint-imports")
    config = str(root / "pyproject.toml")
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    return subprocess.run([lint, "--config", config, "--no-cache"], env=env, cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main())
