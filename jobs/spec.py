"""Job specs: a TOML file describing one imgscale job, or a list of them run in order.

A job is a table whose ``kind`` names a computing command (``ingest``, ``compress``, ``train``,
``evaluate``, ``predict``, ``embed``, ``add-class``, ``update``) and whose other keys are that
command's arguments and options by name (``y_key`` or ``y-key`` for ``--y-key``)::

    [[jobs]]
    kind = "ingest"
    src = "train.npz"
    store = "digits.zarr"
    y_key = "y"

A file with a top-level ``kind`` is a single job. The accepted keys and their types are the
commands' own parameters, so every option of a command can be written here and a new method or
embedding in train's registry is accepted without a change to this module.

The whole spec is checked before anything runs, and every problem is reported, one line each
naming the file, the job and the key: unknown keys, wrong types, missing required keys, inputs
(stores, models, files) that neither exist nor come from an earlier job of the spec, outputs that
would be overwritten, splits a store does not have, and secrets (which belong in the
environment). Relative paths are relative to the spec's folder; a URL (``s3://bucket/x.zarr``)
is kept as it is, and a top-level ``[storage_options]`` table gives fsspec the options to reach it
(e.g. ``endpoint_url``; credentials still come from the environment).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from imgscale.jobs.runs import RecordedCommand
from imgscale.storage import StoreError, is_url, location, use_storage_options

# Parameters a spec does not set: output format and ledger are the caller's choice.
NOT_IN_SPECS = ("as_json", "ledger")
# A key whose name says it holds a secret, at any depth of the spec.
SECRET_KEY = re.compile(
    r"secret|password|passwd|token|credential|private_key|access_key|^key$", re.I
)
# A value shaped like an AWS access key id or secret access key, under any key name.
SECRET_VALUE = re.compile(
    r"^(AKIA|ASIA)[0-9A-Z]{16}$|^(?=.*[a-z])(?=.*[A-Z])(?=.*[0-9])[A-Za-z0-9/+]{40}$"
)
# A URL carrying a password in its user info (``scheme://user:pass@host``), anywhere in a value.
URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#@\s:]*:[^/?#@\s]*@")
SECRETS_GO = (
    "secrets go in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, ...) or the "
    "provider's credentials file, never in a spec file"
)


@dataclass(frozen=True)
class Flow:
    """What a job kind reads and writes, named by its parameters, for the checks before a run."""

    stores_in: tuple[str, ...] = ()
    models_in: tuple[str, ...] = ()
    files_in: tuple[str, ...] = ()
    # A file, a folder of images, tar shards named by a pattern, or a URL (checked when read).
    sources_in: tuple[str, ...] = ()
    # A store the job creates or appends to; it gets the splits of ``split_from`` (a store key)
    # or the value of ``split_key``.
    store_out: str | None = None
    split_from: str | None = None
    split_key: str | None = None
    # A model the job saves: it must not exist yet.
    model_out: str | None = None
    # (split key, store key): the split must exist in the store; ``explicit_splits`` only when
    # the spec sets them (train's validation split is optional).
    splits: tuple[tuple[str, str], ...] = ()
    explicit_splits: tuple[str, ...] = ()


FLOWS: dict[str, Flow] = {
    "ingest": Flow(
        sources_in=("src",), files_in=("labels_path",), store_out="store", split_key="split"
    ),
    "compress": Flow(stores_in=("src",), store_out="dst", split_from="src"),
    "train": Flow(
        stores_in=("store",),
        model_out="model",
        splits=(("split", "store"), ("val_split", "store")),
        explicit_splits=("val_split",),
    ),
    "evaluate": Flow(models_in=("model",), stores_in=("store",), splits=(("split", "store"),)),
    "predict": Flow(models_in=("model",), stores_in=("store",), splits=(("split", "store"),)),
    "embed": Flow(models_in=("model",), stores_in=("src",), store_out="dst", split_from="src"),
    "add-class": Flow(
        models_in=("model",), stores_in=("store",), model_out="out", splits=(("split", "store"),)
    ),
    "update": Flow(models_in=("model",), stores_in=("store",), model_out="out"),
}


@dataclass(frozen=True)
class Job:
    """One job of a spec: its command and the parameters the spec gives (paths resolved)."""

    number: int
    command: click.Command
    params: dict[str, Any]
    # fsspec options for the job's URLs (the spec's [storage_options]).
    storage_options: dict[str, Any] | None = None
    # (key, value as written) of the local paths the spec gives relative to its folder.
    relative_paths: tuple[tuple[str, str], ...] = ()

    @property
    def kind(self) -> str:
        return self.command.name


class SpecError(ValueError):
    """A spec with problems; ``problems`` holds one line for each."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        count = f"{len(problems)} problem" + ("s" if len(problems) > 1 else "")
        super().__init__(f"{path}: {count}; nothing was run")
        self.problems = problems


def job_kinds(root: click.Group) -> dict[str, click.Command]:
    """The commands a spec can run: the recorded (computing) commands of ``root``."""
    kinds = {}
    for name in FLOWS:
        command = root.commands.get(name)
        if isinstance(command, RecordedCommand):
            kinds[name] = command
    return kinds


def load_spec(path: str | os.PathLike, root: click.Group) -> list[Job]:
    """The jobs of the spec at ``path``, checked in full; SpecError lists every problem."""
    path = Path(path)
    problems: list[str] = []
    try:
        document = tomllib.loads(path.read_text())
    except OSError as e:
        raise SpecError(path, [f"{path}: cannot read ({e.strerror or e})"]) from e
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SpecError(path, [f"{path}: not valid TOML ({e})"]) from e
    problems += [
        f"{path}: key '{key}' holds a secret; {SECRETS_GO}" for key in _secret_keys(document)
    ]
    problems += [
        f"{path}: key '{key}' has a value that looks like an AWS credential; {SECRETS_GO}"
        for key in _secret_values(document, SECRET_VALUE.match)
    ]
    problems += [
        f"{path}: key '{key}' has a URL with a password (user:password@); {SECRETS_GO}"
        for key in _secret_values(document, URL_PASSWORD.search)
    ]
    tables, defaults = _job_tables(path, document, problems)
    kinds = job_kinds(root)
    jobs = []
    for number, table in enumerate(tables, start=1):
        job = _parse_job(path, number, table, defaults, kinds, problems)
        if job is not None:
            jobs.append(job)
    if not problems:
        with use_storage_options(defaults.get("storage_options") or {}):
            _check_flow(path, jobs, problems)
    if problems:
        raise SpecError(path, problems)
    return jobs


def _secret_keys(value: Any, prefix: str = "") -> list[str]:
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            name = f"{prefix}{key}"
            if SECRET_KEY.search(key):
                found.append(name)
            found += _secret_keys(item, f"{name}.")
    elif isinstance(value, list):
        for number, item in enumerate(value, start=1):
            found += _secret_keys(item, f"{prefix.rstrip('.')}[{number}].")
    return found


def _secret_values(value: Any, looks_secret: Any, prefix: str = "") -> list[str]:
    """The keys (at any depth) of string values for which ``looks_secret`` is true."""
    if isinstance(value, dict):
        return [
            k
            for key, item in value.items()
            for k in _secret_values(item, looks_secret, f"{prefix}{key}.")
        ]
    if isinstance(value, list):
        name = prefix.rstrip(".")
        return [
            k
            for i, item in enumerate(value, 1)
            for k in _secret_values(item, looks_secret, f"{name}[{i}].")
        ]
    return [prefix.rstrip(".")] if isinstance(value, str) and looks_secret(value) else []


def _job_tables(path: Path, document: dict, problems: list[str]) -> tuple[list[dict], dict]:
    """The job tables and the keys every job inherits (a top-level ``scheduler``), with the
    top-level ``storage_options`` under that key."""
    defaults: dict[str, Any] = {}
    options = document.get("storage_options", {})
    if isinstance(options, dict):
        defaults["storage_options"] = options
    else:
        problems.append(f"{path}: key 'storage_options' must be a table (fsspec options)")
    if "kind" in document:
        if "jobs" in document:
            problems.append(f"{path}: both 'kind' and 'jobs'; expected one job or a list of jobs")
        table = {k: v for k, v in document.items() if k != "storage_options"}
        return [table], defaults
    unknown = sorted(set(document) - {"jobs", "scheduler", "storage_options"})
    for key in unknown:
        problems.append(
            f"{path}: unknown top-level key '{key}'; expected 'jobs', 'scheduler' or "
            "'storage_options'"
        )
    jobs = document.get("jobs")
    if not isinstance(jobs, list) or not jobs or not all(isinstance(j, dict) for j in jobs):
        problems.append(f"{path}: expected a top-level 'kind' (one job) or [[jobs]] tables")
        return [], defaults
    if "scheduler" in document:
        if isinstance(document["scheduler"], str):
            defaults["scheduler"] = document["scheduler"]
        else:
            problems.append(f"{path}: key 'scheduler' must be a string (a scheduler address)")
    return jobs, defaults


def _parse_job(
    path: Path,
    number: int,
    table: dict,
    defaults: dict,
    kinds: dict[str, click.Command],
    problems: list[str],
) -> Job | None:
    kind = table.get("kind")
    where = f"{path}: job {number}"
    if kind not in kinds:
        expected = ", ".join(kinds)
        found = "no 'kind'" if kind is None else f"kind {kind!r}"
        problems.append(f"{where}: {found}; expected one of {expected}")
        return None
    command = kinds[kind]
    where = f"{where} ({kind})"
    by_key = _params_by_key(command)
    params: dict[str, Any] = {}
    relative: list[tuple[str, str]] = []
    count = len(problems)
    for key, value in table.items():
        if key == "kind" or SECRET_KEY.search(key) or _secret_keys(value):
            continue  # a secret is reported once, as such
        param = by_key.get(key.replace("-", "_"))
        if param is None:
            close = difflib.get_close_matches(key.replace("-", "_"), by_key, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(f"{where}: unknown key '{key}'{hint}")
            continue
        expected = _type_problem(param, value)
        if expected:
            problems.append(f"{where}: key '{key}' is {value!r}; expected {expected}")
            continue
        if param.name in params:
            problems.append(f"{where}: key '{key}' gives '{param.name}' a second time")
            continue
        if isinstance(param.type, click.Path):
            if "://" not in value and not os.path.isabs(os.path.expanduser(value)):
                relative.append((key, value))
            value = _resolve(path, value)
        params[param.name] = value
    for key, value in defaults.items():
        if key in by_key:
            params.setdefault(key, value)
    for param in command.params:
        if param.required and param.name not in params:
            problems.append(f"{where}: missing key '{param.name}'")
    if len(problems) != count:
        return None
    options = defaults.get("storage_options") or None
    return Job(number, command, params, options, tuple(relative))


def _params_by_key(command: click.Command) -> dict[str, click.Parameter]:
    """A command's parameters by spec key: the parameter's name and its option names."""
    keys = {}
    for param in command.params:
        if param.name in NOT_IN_SPECS or not param.expose_value:
            continue
        keys[param.name] = param
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                keys[opt[2:].replace("-", "_")] = param
    return keys


def _type_problem(param: click.Parameter, value: Any) -> str | None:
    """What ``param`` expects, if ``value`` (as TOML typed it) is not that; else None."""
    kind = param.type
    if getattr(param, "is_flag", False):
        return None if isinstance(value, bool) else "true or false"
    if isinstance(kind, click.Choice):
        choices = ", ".join(map(str, kind.choices))
        return None if value in kind.choices else f"one of {choices}"
    if isinstance(kind, click.types.IntParamType):
        ok = isinstance(value, int) and not isinstance(value, bool)
        return None if ok else "an integer"
    if isinstance(kind, click.types.FloatParamType):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else "a number"
    if isinstance(kind, click.Path):
        return None if isinstance(value, str) and value else "a path (a string)"
    return None if isinstance(value, str) else "a string"


def _resolve(spec: Path, value: str) -> str:
    """A local path relative to the spec's folder, made absolute; URLs are kept as they are."""
    if "://" in value:  # file:// included: its path is absolute
        return value
    return os.path.abspath(spec.parent / os.path.expanduser(value))


def _check_flow(path: Path, jobs: list[Job], problems: list[str]) -> None:
    """Inputs exist (or an earlier job makes them), outputs are new, splits exist."""
    # store path -> its splits once the earlier jobs ran (None: missing, already reported)
    made_stores: dict[str, set[str] | None] = {}
    made_models: set[str] = set()
    for job in jobs:
        flow, where = FLOWS[job.kind], f"{path}: job {job.number} ({job.kind})"
        values = {p.name: job.params.get(p.name, _default(p)) for p in job.command.params}
        for key in flow.files_in:
            if values.get(key) is not None and not Path(values[key]).is_file():
                problems.append(f"{where}: key '{key}': file {values[key]} does not exist")
        for key in flow.sources_in:
            source = values.get(key)
            if source is not None and not _may_exist(source):
                problems.append(f"{where}: key '{key}': {source} does not exist")
        for key in flow.models_in:
            model = values[key]
            if model not in made_models and not (location(model) / "zarr.json").is_file():
                problems.append(
                    f"{where}: key '{key}': model {model} does not exist and no earlier job "
                    "saves it"
                )
        for key in flow.stores_in:
            _store_splits(values[key], made_stores, f"{where}: key '{key}'", problems)
        for split_key, store_key in flow.splits:
            split = values.get(split_key)
            if split is None or (split_key in flow.explicit_splits and split_key not in job.params):
                continue
            splits = made_stores.get(values[store_key])
            if splits is not None and split not in splits:  # None: the store is missing
                problems.append(
                    f"{where}: key '{split_key}': store {values[store_key]} has no split "
                    f"{split!r}; it has {', '.join(sorted(splits)) or 'no rows'}"
                )
        if flow.model_out and values.get(flow.model_out) is not None:
            model = values[flow.model_out]
            if model in made_models or location(model).exists():
                problems.append(
                    f"{where}: key '{flow.model_out}': {model} already exists; expected a new path"
                )
            made_models.add(model)
        if flow.store_out:
            _record_output_store(job, flow, values, made_stores, where, problems)


def _may_exist(source: str) -> bool:
    """A path that exists, or one only reading can check: a URL, a pattern of tar shards."""
    return "://" in source or any(c in source for c in "*?{") or Path(source).exists()


def _default(param: click.Parameter) -> Any:
    """A parameter's default value, None where it has none (click marks those with a sentinel)."""
    value = param.default
    return value if isinstance(value, str | int | float) else None


def _store_splits(
    store: str, made_stores: dict[str, set[str] | None], where: str, problems: list[str]
) -> None:
    """Learn the splits of an existing ``store`` (unless an earlier job makes it)."""
    from imgscale.storage import open_store

    if store in made_stores:
        return
    try:
        made_stores[store] = {str(s) for s in set(open_store(store).splits())}
    except StoreError as e:
        problems.append(f"{where}: {e} (and no earlier job makes it)")
        made_stores[store] = None


def _record_output_store(
    job: Job,
    flow: Flow,
    values: dict,
    made_stores: dict[str, set[str] | None],
    where: str,
    problems: list[str],
) -> None:
    store = values[flow.store_out]
    target = location(store)
    exists = target.exists()
    if job.kind == "compress" and (
        store in made_stores or (exists and (is_url(store) or any(target.iterdir())))
    ):
        problems.append(f"{where}: key '{flow.store_out}': {store} exists; expected a new path")
    if store not in made_stores and exists and (target / "zarr.json").is_file():
        _store_splits(store, made_stores, f"{where}: key '{flow.store_out}'", problems)
    splits = made_stores.get(store) or set()
    if flow.split_key:
        splits.add(values[flow.split_key])
    if flow.split_from:
        splits |= made_stores.get(values[flow.split_from]) or set()
    made_stores[store] = splits
