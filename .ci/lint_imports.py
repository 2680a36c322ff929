"""Run import-linter (the contracts in pyproject.toml) on a checkout's sources, as they are.

The layers sit in the repository's root folders and install as ``imgscale.*`` through
pyproject's package-dir mapping. ``imgscale/`` also holds a relative symlink to each layer folder
(``imgscale/storage -> ../storage``, ...), so the package's tree on disk is the installed one: a
static reader that starts from ``imgscale/`` (grimp, which import-linter uses, follows the links;
so do IDEs and type checkers) resolves ``imgscale.storage.x`` to ``storage/x.py``. ROOT goes first
on the path, so its ``imgscale`` is the one linted, whatever is installed. The papers'
reproductions (``reproductions/``, a distribution of their own, imported as
``imgscale_reproductions``) are linted beside it through a link of that name to ROOT's folder, in
a directory of this run's own: the contracts hold them too.

Usage: python .ci/lint_imports.py [ROOT] (ROOT: a checkout, default this one). Exits with
lint-imports' status.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parents[1]).resolve()
    lint = Path(sys.executable).with_name("lint-imports")
    config = str(root / "pyproject.toml")
    with tempfile.TemporaryDirectory(prefix="lint-imports-") as links:
        (Path(links) / "imgscale_reproductions").symlink_to(root / "reproductions")
        env = {"PYTHONPATH": os.pathsep.join([str(root), links]), "PATH": "/usr/bin:/bin"}
        command = [lint, "--config", config, "--no-cache"]
        return subprocess.run(command, env=env, cwd=root).returncode


if __name__ == "__main__":
    sys.exit(main())
