"""deploy/Dockerfile: it parses, copies what the package needs, runs as a non-root user, and the
commands it runs succeed when run here in a fresh virtual environment exactly as written (only
$VENV points elsewhere). A container engine builds it where one is installed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
INSTRUCTIONS = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "HEALTHCHECK", "CMD", "ARG"}


def instructions(path: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    found, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        keyword, _, rest = pending.strip().partition(" ")
        found.append((keyword, rest.strip()))
        pending = ""
    assert not pending, f"{path}: a continuation line ends the file"
    return found


def env_values(parsed) -> dict[str, str]:
    """ENV key=value pairs (shell words), later ones expanded against earlier ones."""
    values: dict[str, str] = {}
    for keyword, rest in parsed:
        if keyword == "ENV":
            for word in shlex.split(rest):
                key, _, value = word.partition("=")
                values[key] = _expand(value, values)
    return values


def copies(parsed) -> list[tuple[list[str], str]]:
    """(sources, target) of each COPY; a target ending in / is a folder."""
    return [(w[:-1], w[-1]) for w in (shlex.split(r) for k, r in parsed if k == "COPY")]


def _expand(value: str, values: dict[str, str]) -> str:
    for key in sorted(values, key=len, reverse=True):
        value = value.replace(f"${key}", values[key])
    return value


def test_dockerfile_parses_and_runs_as_a_non_root_user():
    parsed = instructions()
    assert {k for k, _ in parsed} <= INSTRUCTIONS
    assert parsed[0][0] == "FROM" and parsed[0][1].startswith("python:3.11-")
    users = [rest for k, rest in parsed if k == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert [k for k, _ in parsed].count("HEALTHCHECK") == 1
    # Every package folder pyproject maps is copied into the build.
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    copied = {s.rstrip("/") for source, _ in copies(parsed) for s in source}
    assert set(package_dirs["package-dir"].values()) <= copied
    for source in copied:
        assert (ROOT / source).exists(), source
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not copied & set(ignored)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_dockerfile_commands_succeed_in_a_fresh_venv(tmp_path):
    parsed = instructions()
    context = tmp_path / "src"
    for sources, target in copies(parsed):
        for source in sources:
            # As Docker copies: a folder's contents into the target, a file into a target/.
            if (ROOT / source).is_dir():
                skip = shutil.ignore_patterns("__pycache__")
                shutil.copytree(ROOT / source, context / target, ignore=skip, dirs_exist_ok=True)
                continue
            to = context / target / Path(source).name if target.endswith("/") else context / target
            to.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / source, to)
    # pip byte-compiles every module it installs unless told not to: tens of CPU seconds that
    # no assertion reads (a module that fails to compile is a warning of pip's, not an error).
    env = env_values(parsed) | {"VENV": str(tmp_path / "venv"), "PIP_NO_COMPILE": "1"}
    env = {**os.environ, **env, "PATH": f"{tmp_path / 'venv' / 'bin'}:{os.environ['PATH']}"}
    runs = [rest for k, rest in parsed if k == "RUN"]
    # The second RUN creates the image's user; on this machine that would change its accounts.
    assert runs[1].startswith("useradd --create-home --uid 10001 ")
    python = Path(sys.executable).resolve()  # python3.11, as FROM python:3.11 provides it
    result = subprocess.run(
        ["sh", "-c", runs[0]],
        cwd=context,
        env={**env, "PATH": f"{python.parent}:{env['PATH']}"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for keyword in ("HEALTHCHECK", "CMD"):
        (rest,) = [r for k, r in parsed if k == keyword]
        argv = json.loads(rest.split("CMD", 1)[1] if keyword == "HEALTHCHECK" else rest)
        result = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 0, f"{keyword}: {result.stderr}"
    assert shutil.which("imgscale", path=env["PATH"]) == str(tmp_path / "venv" / "bin" / "imgscale")


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(
    not (shutil.which("podman") or shutil.which("buildah")),
    reason="no container engine here (neither podman nor buildah is installed; Docker's daemon "
    "cannot run on these machines, and the python:3.11 base image needs registry access)",
)
def test_podman_or_buildah_builds_the_image(tmp_path):
    engine = shutil.which("podman") or shutil.which("buildah")
    command = "build" if engine.endswith("podman") else "bud"
    built = subprocess.run(
        [engine, command, "-f", str(DOCKERFILE), "-t", "imgscale-test", str(ROOT)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
