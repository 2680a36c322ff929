"""The image's pinned dependencies: ``deploy/constraints.txt`` lists, at one version each, every
distribution that ``pip install '.[deploy]'`` installs (imgscale's dependencies and theirs).

    python deploy/lock.py           # rewrite constraints.txt from this environment's versions
    python deploy/lock.py --check   # exit 1, one line per difference, if it is out of sync

``--check`` (run by CI) fails when pyproject.toml requires a distribution that has no pin, when a
pin is not required any more, or when a pin does not satisfy a requirement on it (pyproject's or
another pinned distribution's, as this environment's metadata states them).
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "deploy" / "constraints.txt"
EXTRA = "deploy"
HEADER = (
    "# Pinned versions of everything `pip install '.[deploy]'` installs; the image installs with\n"
    "# --constraint this file. Regenerate: python deploy/lock.py (CI runs --check).\n"
)


def top_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[Requirement]:
    """imgscale's dependencies plus its ``deploy`` extra (self-references expanded)."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extras = project.get("optional-dependencies", {})
    found, pending = [], [*project["dependencies"], *extras.get(EXTRA, [])]
    while pending:
        requirement = Requirement(pending.pop(0))
        if canonicalize_name(requirement.name) == canonicalize_name(project["name"]):
            pending += [r for extra in requirement.extras for r in extras.get(extra, [])]
        else:
            found.append(requirement)
    return found


def closure(top: list[Requirement]) -> dict[str, list[Requirement]]:
    """Every distribution ``top`` needs, by canonical name, with the requirements on it, walked
    through this environment's installed metadata (markers evaluated for this interpreter)."""
    needed: dict[str, list[Requirement]] = {}
    pending = [(r, ()) for r in top]
    while pending:
        requirement, extras = pending.pop()
        if requirement.marker and not any(
            requirement.marker.evaluate({"extra": e}) for e in (extras or ("",))
        ):
            continue
        name = canonicalize_name(requirement.name)
        seen = name in needed
        needed.setdefault(name, []).append(requirement)
        if seen and not requirement.extras:
            continue
        for line in metadata.requires(requirement.name) or []:
            pending.append((Requirement(line), tuple(requirement.extras)))
    return needed


def read_pins(path: Path = CONSTRAINTS) -> dict[str, Version]:
    pins = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise SystemExit(f"{path}:{number}: {line!r}; expected NAME==VERSION")
        pins[canonicalize_name(name)] = Version(version)
    return pins


def differences(pins: dict[str, Version], needed: dict[str, list[Requirement]]) -> list[str]:
    problems = [f"{name}: required but not pinned" for name in sorted(set(needed) - set(pins))]
    problems += [f"{name}: pinned but not required" for name in sorted(set(pins) - set(needed))]
    for name in sorted(set(pins) & set(needed)):
        for requirement in needed[name]:
            if not requirement.specifier.contains(pins[name], prereleases=True):
                problems.append(f"{name}=={pins[name]} does not satisfy {requirement}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Compare; do not write.")
    args = parser.parse_args(argv)
    needed = closure(top_requirements())
    if args.check:
        problems = differences(read_pins(), needed)
        for problem in problems:
            print(f"{CONSTRAINTS.relative_to(ROOT)}: {problem}", file=sys.stderr)
        return 1 if problems else 0
    lines = [f"{name}=={metadata.version(name)}" for name in sorted(needed)]
    CONSTRAINTS.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"{CONSTRAINTS.relative_to(ROOT)}: {len(lines)} pins", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
