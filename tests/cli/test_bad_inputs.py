"""Adversarial inputs against the ``pipeline`` command, as a nightly job would meet them.

Each case is a real ``pipeline`` subprocess in its own copy of a tiny project that already
holds one succeeded run, and goes through one checker (``adversarial_support.check_case``):
the documented exit code (README "Exit codes"), one paragraph on stderr naming the offending
thing and no traceback, no run left ``running`` or marked ``succeeded`` by a failure, ``latest``
and the earlier run's files exactly as they were, nothing written outside the runs folder, and
nothing at predict's output path after a failure.

The cases run when the module's first case is reached, one process per core at a time, and
each test then reports its own case. Most are forked from a zygote, a fresh interpreter that
has imported the package once (the same ``pipeline.cli.app.main``, argv, streams, working
directory and exit code as the console script, without a second of imports per case); those
whose interpreter start or shutdown matters (signals, Dask clients, memory limits) run as
``python -m pipeline``. ``ADVERSARIAL_EXEC=1`` runs every case that way.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from pipeline.core.errors import ExitCode
from tests.support.bad_inputs import (CONFIG, DATA, ID, INCOMING, PIPELINE, TARGET, TINY_CONFIG, Case, Launch,
                                       case, check_case, cli_env, copy_project, describe, latest_target,
                                       read_json, run_cli, run_folders, run_processes, sha256, snapshot,
                                       tiny_frame, write_tiny_project)

pytestmark = pytest.mark.slow

CASE_CONFIG = "configs/case.yaml"
VALIDATE = ("validate", CASE_CONFIG)
RUN_CASE_CONFIG = ("run", CASE_CONFIG)
RUN = ("run", CONFIG)
CASE_DATA = "data/case.csv"
RUN_CASE_DATA = ("run", CONFIG, "--set", f"stages.raw.path={CASE_DATA}")
CASE_INPUT = "incoming/case.csv"


def predict(input_: str = CASE_INPUT, *extra: str, output: str = "out/scores.parquet") -> tuple[str, ...]:
    return ("predict", "--run", "latest", "--input", input_, "--output", output, *extra)


# ------------------------------------------------------------------ setups
def config_text(text: str | bytes, path: str = CASE_CONFIG):
    """Write ``text`` as a config file."""
    def setup(project: Path) -> None:
        target = project / path
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    return setup


def variant(old: str, new: str) -> str:
    """The tiny config with one piece of text replaced."""
    assert old in TINY_CONFIG, old
    return TINY_CONFIG.replace(old, new, 1)


def frame_file(make, path: str, *, fmt: str = "csv"):
    """Write a frame derived from the tiny data (``make(frame) -> frame | str | bytes``)."""
    def setup(project: Path) -> None:
        rows = tiny_frame() if path.startswith("data/") else tiny_frame(rows=30, seed=1).drop(columns=[TARGET])
        made = make(rows)
        target = project / path
        if isinstance(made, bytes):
            target.write_bytes(made)
        elif isinstance(made, str):
            target.write_text(made)
        elif fmt == "parquet":
            made.to_parquet(target, index=False)
        else:
            made.to_csv(target, index=False)
    return setup


def data_file(make):
    return frame_file(make, CASE_DATA)


def input_file(make):
    return frame_file(make, CASE_INPUT)


def with_values(column: str, values) -> callable:
    def make(frame: pd.DataFrame) -> pd.DataFrame:
        frame = frame.copy()
        frame[column] = frame[column].astype(object)
        for i, value in enumerate(values if isinstance(values, list) else [values] * len(frame)):
            frame.loc[i, column] = value
        return frame
    return make


def csv_text(make_header) -> callable:
    """The tiny data as CSV text, passed through ``make_header(text) -> text``."""
    return lambda frame: make_header(frame.to_csv(index=False))


def duplicate_amount(text: str) -> str:
    """A second column headed ``amount`` (pandas would read it as ``amount.1``)."""
    lines = text.splitlines()
    return "\n".join([lines[0] + ",amount"] + [line + ",999" for line in lines[1:]]) + "\n"


def touch(path: str, content: bytes = b"a file where a folder should be"):
    def setup(project: Path) -> None:
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_bytes(content)
    return setup


def mkdir(path: str):
    def setup(project: Path) -> None:
        (project / path).mkdir(parents=True, exist_ok=True)
    return setup


def base_run_dir(project: Path) -> Path:
    return project / "runs" / PIPELINE / latest_target(project)


def manifest_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def write_manifest(run_dir: Path, manifest) -> None:
    text = manifest if isinstance(manifest, (str, bytes)) else json.dumps(manifest, indent=2)
    (run_dir / "manifest.json").write_bytes(text if isinstance(text, bytes) else text.encode())


def model_files(project: Path) -> tuple[Path, dict, list[str]]:
    """The latest run, its manifest, and the files of its exported model other than the JSON
    descriptions (whatever format the model is saved in), relative to the run folder."""
    run_dir = base_run_dir(project)
    manifest = manifest_of(run_dir)
    folder = next(iter((manifest.get("models") or {}).values()), "export/models/logit")
    files = sorted(k for k in manifest["artifacts"] if k.startswith(folder + "/"))
    binary = [k for k in files if not k.endswith(".json")] or [k for k in files if k.endswith("workflow.json")]
    return run_dir, manifest, binary


def corrupt_model(project: Path) -> None:
    run_dir, _, binary = model_files(project)
    path = run_dir / binary[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def tamper_checksum(project: Path) -> None:
    run_dir, manifest, binary = model_files(project)
    manifest["artifacts"][binary[0]] = "0" * 64
    write_manifest(run_dir, manifest)


class _Pwn:
    def __reduce__(self):
        return (exec, ("open('PWNED', 'w').write('loaded a pickle from a run folder')",))


def swap_model_and_checksum(project: Path) -> None:
    """A writer without any key replaces the model file with a pickle that runs code when
    loaded, and updates its checksum: a run folder must never load a pickle."""
    run_dir, manifest, binary = model_files(project)
    for name in binary:
        path = run_dir / name
        path.unlink()
        path.write_bytes(pickle.dumps(_Pwn()))
        manifest["artifacts"][name] = sha256(path)
    write_manifest(run_dir, manifest)


def edit_exported(name: str, edit):
    """Edit an exported model's JSON file (``workflow.json``, ``model.json``) and its checksum
    in the manifest: what any writer of the folder can do without a signing key."""
    def setup(project: Path) -> None:
        run_dir, manifest, _ = model_files(project)
        folder = next(iter((manifest.get("models") or {}).values()), "export/models/logit")
        path = run_dir / folder / name
        data = json.loads(path.read_text())
        edit(data)
        path.unlink()                     # artifacts may be hard links into the cache
        path.write_text(json.dumps(data))
        manifest["artifacts"][f"{folder}/{name}"] = sha256(path)
        write_manifest(run_dir, manifest)
    return setup


def infinite_standardize_state(workflow: dict) -> None:
    for op in workflow["ops"]:
        if op.get("op") == "standardize":
            for column in op["state"]["mean_std"]:
                op["state"]["mean_std"][column] = [float("inf"), 0.0]


def pickle_model_description(model: dict) -> None:
    model.update(format="joblib", file="model.joblib", files=["model.joblib"])
    model.pop("coef", None)
    model.pop("intercept", None)


def plant_pickle(project: Path) -> None:
    run_dir, manifest, _ = model_files(project)
    folder = next(iter((manifest.get("models") or {}).values()), "export/models/logit")
    path = run_dir / folder / "model.joblib"
    path.write_bytes(pickle.dumps(_Pwn()))
    manifest["artifacts"][f"{folder}/model.joblib"] = sha256(path)
    write_manifest(run_dir, manifest)


def nothing_executed(project: Path, proc) -> list[str]:
    return ["code embedded in an input was executed (PWNED exists)"] if (project / "PWNED").exists() else []


def copy_run(project: Path, edit, run_id: str = "20200101T000000.000Z-bad000") -> dict[str, str]:
    """A second run folder, a copy of the latest run with its manifest edited by ``edit``."""
    import shutil

    source = base_run_dir(project)
    target = source.parent / run_id
    shutil.copytree(source, target, symlinks=True)
    manifest = manifest_of(target)
    manifest["run_id"] = run_id
    write_manifest(target, edit(manifest))
    return {"bad_run": run_id, "good_run": source.name}


def edited(**changes):
    def edit(manifest: dict):
        manifest.update(changes)
        return manifest
    return edit


def cache_record(stage: str, content: bytes):
    """Replace the record.json of ``stage``'s cache entry (found through the latest manifest)."""
    def setup(project: Path) -> None:
        key = manifest_of(base_run_dir(project))["stages"][stage]["cache_key"]
        (project / "runs" / PIPELINE / ".cache" / key / "record.json").write_bytes(content)
    return setup


def cache_pickle_swapped(stage: str):
    """A pickle that runs code when loaded, in place of ``stage``'s cached output, with the
    cache record's checksum updated: checksums beside the files they protect stop no writer."""
    def setup(project: Path) -> None:
        key = manifest_of(base_run_dir(project))["stages"][stage]["cache_key"]
        entry = project / "runs" / PIPELINE / ".cache" / key
        record = json.loads((entry / "record.json").read_text())
        for name in list(record.get("files", {})):
            if name.endswith(".pkl"):
                (entry / name).unlink()
                (entry / name).write_bytes(pickle.dumps(_Pwn()))
                record["files"][name] = sha256(entry / name)
        (entry / "record.json").write_text(json.dumps(record))
    return setup


def cache_entry_is_a_file(stage: str):
    def setup(project: Path) -> None:
        import shutil

        key = manifest_of(base_run_dir(project))["stages"][stage]["cache_key"]
        entry = project / "runs" / PIPELINE / ".cache" / key
        shutil.rmtree(entry)
        entry.write_text("not an entry")
    return setup


def cache_dir_is_a_file(project: Path) -> None:
    import shutil

    cache = project / "runs" / PIPELINE / ".cache"
    shutil.rmtree(cache)
    cache.write_text("not a cache")


def lock_is_a_folder(project: Path) -> None:
    lock = project / "runs" / PIPELINE / ".lock"
    lock.unlink(missing_ok=True)
    (lock / "inside").mkdir(parents=True)


def dangling_latest(project: Path) -> None:
    link = project / "runs" / PIPELINE / "latest"
    link.unlink()
    link.symlink_to("20990101T000000.000Z-gone00")


def self_loop_symlink(project: Path) -> None:
    (project / CASE_CONFIG).symlink_to("case.yaml")


# ------------------------------------------------------------------ checks on a success
def new_run_succeeded(project: Path, proc) -> list[str]:
    runs = run_folders(project)
    newest = max(runs) if runs else None
    if newest is None or (read_json(runs[newest] / "manifest.json") or {}).get("status") != "succeeded":
        return ["the run did not record success"]
    return []


def warning_names_stage(stage: str):
    def check(project: Path, proc) -> list[str]:
        problems = new_run_succeeded(project, proc)
        warnings = [line for line in proc.stderr.splitlines() if "WARNING" in line and "cache" in line.lower()]
        if not warnings:
            problems.append("no warning about the set-aside cache entry")
        elif not any(f"'{stage}'" in w or f"stage {stage} " in w or f"stage {stage}:" in w for w in warnings):
            problems.append(f"the cache warning does not name stage '{stage}': {warnings[0][-200:]}")
        return problems
    return check


def strict_json_everywhere(project: Path, proc) -> list[str]:
    """After a run that succeeded, every JSON file it wrote parses as strict JSON (no NaN or
    Infinity, which JSON does not have)."""
    if proc.returncode != 0:
        return []
    problems = []

    def refuse(constant: str):
        raise ValueError(constant)

    for run_dir in run_folders(project).values():
        for path in run_dir.rglob("*.json"):
            try:
                json.loads(path.read_text(), parse_constant=refuse)
            except ValueError as exc:
                problems.append(f"{path.relative_to(project)} is not strict JSON ({exc})")
    return problems


def scores_written(rows: int | None):
    def check(project: Path, proc) -> list[str]:
        if proc.returncode != 0:
            return []
        path = project / "out" / "scores.parquet"
        if not path.is_file():
            return ["predict succeeded but wrote no scores"]
        table = pd.read_parquet(path)
        problems = []
        if rows is not None and len(table) != rows:
            problems.append(f"{len(table)} rows scored, expected {rows}")
        score = table["score"] if "score" in table else pd.Series(dtype=float)
        if not score.between(0.0, 1.0).all():
            problems.append("scores outside [0, 1] (NaN or overflow)")
        return problems
    return check


def stdout_lists(*what: str):
    def check(project: Path, proc) -> list[str]:
        context = {"good_run": latest_target(project) or ""}
        missing = [fill(w, context) for w in what if fill(w, context) not in proc.stdout]
        return [f"stdout does not list {missing}"] if missing else []
    return check


def stdout_is_json_listing_runs(count: int):
    def check(project: Path, proc) -> list[str]:
        try:
            rows = json.loads(proc.stdout)
        except ValueError:
            return ["stdout is not JSON"]
        return [] if isinstance(rows, list) and len(rows) == count else [f"expected {count} runs in the JSON"]
    return check


def listed_as_abandoned_not_running(project: Path, proc) -> list[str]:
    """A run whose record could not be finished is listed as abandoned, never as running."""
    listed = run_cli(["runs", "list", "--json"], project)
    try:
        rows = json.loads(listed.stdout)
    except ValueError:
        return [f"runs list --json failed: {listed.stderr.strip()[-300:]}"]
    running = [row.get("run_id") for row in rows if row.get("status") == "running"]
    return [f"runs list shows {running} as running"] if running else []


def stderr_lines_are_json(project: Path, proc) -> list[str]:
    for line in proc.stderr.splitlines():
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                return [f"a stderr line is not JSON: {line[:120]}"]
    return []


def stderr_names(*words: str):
    def check(project: Path, proc) -> list[str]:
        return [] if any(w in proc.stderr for w in words) else [f"stderr names none of {list(words)}"]
    return check


# ------------------------------------------------------------------ YAML bombs
ALIAS_BOMB = "\n".join(
    ['name: tiny', 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{b}: &{b} [{','.join(['*' + a] * 9)}]" for a, b in zip("abcdefgh", "bcdefghi")]
    + ["stages: {raw: {kind: load, path: *i}}"]) + "\n"
DEEP_LIST = "[" * 3000 + "]" * 3000
DEEP_MAP = "{a: " * 3000 + "1" + "}" * 3000
HUGE_FILE = "name: tiny\ndescription: \"" + "x" * (20 * 2**20) + "\"\n"
MERGE_SCALAR = variant("seed: 7", "seed: 7\ndescription: &d hello").replace(
    "    kind: load\n", "    <<: *d\n    kind: load\n")
MERGE_OK = variant("  raw:\n    kind: load\n    path: data/tiny.csv\n",
                   "  raw: &load\n    kind: load\n    path: data/tiny.csv\n  raw_again:\n    <<: *load\n")
OBJECT_APPLY_IN_LIST = variant(f"    path: {DATA}\n",
                               f"    path: {DATA}\n    na_values: [\" \", !!python/object/apply:os.system [\"touch PWNED\"]]\n")


def garbage(size: int = 4096) -> bytes:
    return bytes((i * 7919 + 13) % 256 for i in range(size))


LATIN1 = b"cust_id,plan,amount,visits,churned\n" + b"".join(
    b"c%04d,caf\xe9,%d.5,3,%s\n" % (i, i, b"Yes" if i % 2 else b"No") for i in range(40))

MEMORY = {"ADVERSARIAL_RLIMIT_AS": str(3 * 2**30)}

# ------------------------------------------------------------------ the cases
CONFIG_CASES = [
    case("cfg-empty-file", VALIDATE, 2, ("name", "stages"), setup=config_text(b"")),
    case("cfg-only-comments", VALIDATE, 2, ("name", "stages"), setup=config_text("# nothing here\n")),
    case("cfg-missing-file", ("validate", "configs/nope.yaml"), 2, "configs/nope.yaml", exec_=True),
    case("cfg-directory", ("validate", "configs"), 2, "configs"),
    case("cfg-binary", VALIDATE, 2, CASE_CONFIG, setup=config_text(garbage())),
    case("cfg-nul-byte", VALIDATE, 2, CASE_CONFIG, setup=config_text(variant("seed: 7", "seed: 7\x00"))),
    case("cfg-top-level-list", VALIDATE, 2, "mapping", setup=config_text("- name\n- stages\n")),
    case("cfg-syntax-error", VALIDATE, 2, "line", setup=config_text("name: [unclosed\nstages: {}\n")),
    case("cfg-tab-indentation", VALIDATE, 2, "line", setup=config_text("name: tiny\nstages:\n\traw: {}\n")),
    case("cfg-two-documents", VALIDATE, 2, "document", setup=config_text(TINY_CONFIG + "---\nname: other\n")),
    case("cfg-tag-python-name", VALIDATE, 2, ("python/name", "seed"),
         setup=config_text(variant("seed: 7", "seed: !!python/name:os.system"))),
    case("cfg-tag-object-apply-in-list", RUN_CASE_CONFIG, 2, ("python/object/apply", "na_values"),
         setup=config_text(OBJECT_APPLY_IN_LIST), check=nothing_executed),
    case("cfg-tag-python-tuple", VALIDATE, 2, ("python/tuple", "description"),
         setup=config_text(variant("seed: 7", "seed: 7\ndescription: !!python/tuple [a, b]"))),
    case("cfg-tag-local", VALIDATE, 2, "!secret", setup=config_text(variant("seed: 7", "seed: 7\ndescription: !secret abc"))),
    case("cfg-tag-int-not-a-number", VALIDATE, 2, ("seed", "forty-two"),
         setup=config_text(variant("seed: 7", "seed: !!int forty-two"))),
    case("cfg-tag-bool-not-a-bool", VALIDATE, 2, ("description", "maybe"),
         setup=config_text(variant("seed: 7", "seed: 7\ndescription: !!bool maybe"))),
    case("cfg-tag-on-key", VALIDATE, 2, "python/name",
         setup=config_text("!!python/name:os.system : 1\n" + TINY_CONFIG)),
    case("cfg-list-as-key", VALIDATE, 2, ("line 1", "key"), setup=config_text("? [a, b]\n: 1\n" + TINY_CONFIG)),
    case("cfg-mapping-as-key", VALIDATE, 2, ("line 1", "key"), setup=config_text("? {a: 1}\n: 1\n" + TINY_CONFIG)),
    case("cfg-null-key", VALIDATE, 2, ("line 1", "key"), setup=config_text("~: 1\n" + TINY_CONFIG)),
    case("cfg-date-stage-name", VALIDATE, 2, ("2026-01-01", "stages"),
         setup=config_text(variant("stages:\n", "stages:\n  2026-01-01: {kind: load, path: data/tiny.csv}\n"))),
    case("cfg-merge-into-scalar", VALIDATE, 2, ("<<", "merge"), setup=config_text(MERGE_SCALAR)),
    case("cfg-merge-list-of-scalars", VALIDATE, 2, ("<<", "merge"),
         setup=config_text(MERGE_SCALAR.replace("<<: *d", "<<: [*d, *d]"))),
    case("cfg-merge-of-mappings-is-fine", VALIDATE, 0, setup=config_text(MERGE_OK)),
    case("cfg-alias-bomb", VALIDATE, 2, ("alias", "large", "size", "expand"), setup=config_text(ALIAS_BOMB),
         env=MEMORY, timeout=90, exec_=True),
    case("cfg-deep-list-nesting", VALIDATE, 2, ("nest", "deep", "depth", "description"),
         setup=config_text(variant("seed: 7", "seed: 7\ndescription: " + DEEP_LIST))),
    case("cfg-deep-mapping-nesting", VALIDATE, 2, ("nest", "deep", "depth", "description"),
         setup=config_text(variant("seed: 7", "seed: 7\ndescription: " + DEEP_MAP))),
    case("cfg-huge-file", VALIDATE, 2, ("large", "size", "MiB", "MB", "bytes"), setup=config_text(HUGE_FILE),
         env=MEMORY, timeout=90, exec_=True),
    case("cfg-name-dotdot", RUN_CASE_CONFIG, 2, "name", setup=config_text(variant("name: tiny", 'name: ".."'))),
    case("cfg-name-dot", RUN_CASE_CONFIG, 2, "name", setup=config_text(variant("name: tiny", 'name: "."'))),
    case("cfg-name-empty", VALIDATE, 2, "name", setup=config_text(variant("name: tiny", 'name: ""'))),
    case("cfg-name-too-long", VALIDATE, 2, "name", setup=config_text(variant("name: tiny", "name: " + "n" * 300))),
    case("cfg-stage-name-too-long", VALIDATE, 2, "stages",
         setup=config_text(TINY_CONFIG.replace("logit", "l" * 300))),
    case("cfg-negative-seed", VALIDATE, 2, "seed", setup=config_text(variant("seed: 7", "seed: -1"))),
    case("cfg-seed-too-big", VALIDATE, 2, "seed", setup=config_text(variant("seed: 7", "seed: " + "9" * 30))),
    case("cfg-seed-not-a-number", VALIDATE, 2, "seed", setup=config_text(variant("seed: 7", "seed: abc"))),
    case("cfg-unknown-key", VALIDATE, 2, "devise", setup=config_text(variant("device: cpu", "devise: cpu"))),
    case("cfg-unknown-stage-kind", VALIDATE, 2, "lod", setup=config_text(variant("kind: load", "kind: lod"))),
    case("cfg-stages-a-list", VALIDATE, 2, "stages", setup=config_text("name: tiny\nstages: [raw, split]\n")),
    case("cfg-stages-null", VALIDATE, 2, "stages", setup=config_text("name: tiny\nstages:\n")),
    case("cfg-self-cycle", VALIDATE, 2, "evaluate",
         setup=config_text(variant("inputs: [logit]", "inputs: [logit, evaluate]"))),
    case("cfg-unknown-input", VALIDATE, 2, "rawx", setup=config_text(variant("inputs: [raw]", "inputs: [rawx]"))),
    case("cfg-unknown-model-param", VALIDATE, 2, "C_",
         setup=config_text(variant("model: logistic_regression", "model: logistic_regression\n    params: {C_: 1}"))),
    case("cfg-test-fraction-nan", VALIDATE, 2, "test", setup=config_text(variant("test: 0.25", "test: .nan"))),
    case("cfg-threshold-inf", VALIDATE, 2, "threshold",
         setup=config_text(variant("inputs: [logit]\n  export", "inputs: [logit]\n    threshold: .inf\n  export"))),
    case("cfg-runs-dir-a-list", VALIDATE, 2, "runs_dir", setup=config_text(variant("seed: 7", "seed: 7\nruns_dir: [a, b]"))),
    case("cfg-plugin-not-found", VALIDATE, 2, "no_such_plugin_mod",
         setup=config_text(variant("seed: 7", "seed: 7\nplugins: [no_such_plugin_mod]"))),
    case("cfg-op-columns-not-text", VALIDATE, 2, "columns",
         setup=config_text(variant("columns: [amount, visits]", "columns: [1, 2]"))),
    case("cfg-bom-and-crlf-are-fine", VALIDATE, 0, setup=config_text("\ufeff" + TINY_CONFIG.replace("\n", "\r\n"))),
    case("cfg-symlink-loop", VALIDATE, 2, "case.yaml", setup=self_loop_symlink),
    case("cfg-set-without-equals", ("validate", CONFIG, "--set", "seed"), 2, "seed"),
    case("cfg-set-python-tag", ("validate", CONFIG, "--set", "seed=!!python/name:os.system"), 2, "seed"),
    case("cfg-set-int-tag", ("validate", CONFIG, "--set", "seed=!!int forty-two"), 2, ("seed", "forty-two")),
    case("cfg-set-through-a-scalar", ("validate", CONFIG, "--set", "name.part=1"), 2, "name.part"),
    case("cfg-set-index-out-of-range", ("validate", CONFIG, "--set", "stages.features.ops.9.drop.columns=[x]"), 2,
         "ops"),
    case("cfg-set-deep-nesting", ("validate", CONFIG, "--set", "description=" + DEEP_LIST), 2, "description"),
    case("cfg-set-list-key", ("validate", CONFIG, "--set", "description={? [a, b]: 1}"), 2, "description"),
    case("cfg-set-negative-seed", ("validate", CONFIG, "--set", "seed=-5"), 2, "seed"),
    case("cfg-load-dtype-unknown", (*RUN, "--set", "stages.raw.dtypes={amount: notatype}"), (2, 3),
         ("amount", "notatype")),
]

DATA_CASES = [
    case("data-missing-file", (*RUN, "--set", "stages.raw.path=data/nope.csv"), 3, "data/nope.csv", exec_=True),
    case("data-empty-folder", (*RUN, "--set", "stages.raw.path=data/empty"), 3, "data/empty", setup=mkdir("data/empty")),
    case("data-empty-file", RUN_CASE_DATA, 3, CASE_DATA, setup=data_file(lambda f: b"")),
    case("data-header-only", RUN_CASE_DATA, 3, (CASE_DATA, "no rows", "0 rows"), setup=data_file(lambda f: f.head(0))),
    case("data-ragged-rows", RUN_CASE_DATA, 3, CASE_DATA,
         setup=data_file(csv_text(lambda t: t + "c9999,pro,1.0,2,Yes,extra,fields,here\n"))),
    case("data-duplicate-columns", RUN_CASE_DATA, 3, "amount", setup=data_file(csv_text(duplicate_amount))),
    case("data-one-class-target", RUN_CASE_DATA, 3, TARGET, setup=data_file(with_values(TARGET, "Yes"))),
    case("data-positive-never-occurs", RUN_CASE_DATA, 3, TARGET, setup=data_file(with_values(TARGET, "No"))),
    # A column a stage names that the file's header lacks is a config error, found before the
    # first stage (pipeline.config.data_checks).
    case("data-target-missing", RUN_CASE_DATA, 2, TARGET, setup=data_file(lambda f: f.drop(columns=[TARGET]))),
    case("data-target-all-empty", RUN_CASE_DATA, 3, TARGET, setup=data_file(with_values(TARGET, None))),
    case("data-positive-absent", (*RUN, "--set", "stages.split.positive=Maybe"), 3, ("Maybe", TARGET)),
    # A third target value with positive: set is one-vs-rest, a run like any other.
    case("data-three-classes-one-vs-rest", RUN_CASE_DATA, 0,
         setup=data_file(with_values(TARGET, ["Maybe"] * 10)), check=new_run_succeeded),
    case("data-all-nan-column", RUN_CASE_DATA, 3, "amount", setup=data_file(with_values("amount", None))),
    case("data-values-near-1e200", RUN_CASE_DATA, (0, 3), "amount",
         setup=data_file(lambda f: f.assign(amount=f["amount"] * 1e200)), check=strict_json_everywhere),
    case("data-inf", RUN_CASE_DATA, 3, "amount", setup=data_file(with_values("amount", [float("inf")]))),
    case("data-text-in-numeric-column", RUN_CASE_DATA, 3, "amount",
         setup=data_file(with_values("amount", ["lots"] * 60))),
    case("data-feature-column-missing", RUN_CASE_DATA, 2, "visits",
         setup=data_file(lambda f: f.drop(columns=["visits"]))),
    case("data-load-columns-unknown", (*RUN, "--set", "stages.raw.columns=[nope_col]"), 2, "nope_col"),
    case("data-non-utf8", RUN_CASE_DATA, 3, CASE_DATA, setup=data_file(lambda f: LATIN1)),
    case("data-garbage-parquet", (*RUN, "--set", "stages.raw.path=data/case.parquet"), 3, "data/case.parquet",
         setup=touch("data/case.parquet", garbage())),
    case("data-one-row", RUN_CASE_DATA, 3, (CASE_DATA, TARGET, "rows"), setup=data_file(lambda f: f.head(1))),
]

PREDICT_CASES = [
    case("pred-missing-column", predict(), 3, "amount", setup=input_file(lambda f: f.drop(columns=["amount"]))),
    case("pred-missing-id", predict(), 3, ID, setup=input_file(lambda f: f.drop(columns=[ID]))),
    case("pred-extra-columns-are-fine", predict(), 0,
         setup=input_file(lambda f: f.assign(**{TARGET: "No", "extra": 1.5, "naïve 列": "x"})),
         check=scores_written(30)),
    case("pred-wrong-type", predict(), 3, "amount", setup=input_file(with_values("amount", ["lots"] * 30))),
    case("pred-inf", predict(), 3, "amount", setup=input_file(with_values("amount", [float("inf")]))),
    case("pred-values-near-1e200", predict(), (0, 3), "amount",
         setup=input_file(lambda f: f.assign(amount=f["amount"] * 1e200)), check=scores_written(30)),
    case("pred-empty-file", predict(), 3, CASE_INPUT, setup=input_file(lambda f: b"")),
    case("pred-header-only", predict(), (0, 3), CASE_INPUT, setup=input_file(lambda f: f.head(0)),
         check=scores_written(0)),
    case("pred-input-missing", predict("incoming/nope.csv"), 3, "incoming/nope.csv", exec_=True),
    case("pred-input-empty-folder", predict("incoming/empty"), 3, "incoming/empty", setup=mkdir("incoming/empty")),
    case("pred-garbage-parquet", predict("incoming/case.parquet"), 3, "incoming/case.parquet",
         setup=touch("incoming/case.parquet", garbage())),
    case("pred-non-utf8", predict(), 3, CASE_INPUT,
         setup=input_file(lambda f: LATIN1.replace(b",churned", b"").replace(b",Yes", b"").replace(b",No", b""))),
    case("pred-ragged-rows", predict(), 3, CASE_INPUT,
         setup=input_file(csv_text(lambda t: t + "c9999,pro,1.0,2,extra,fields\n"))),
    case("pred-duplicate-columns", predict(), 3, "amount", setup=input_file(csv_text(duplicate_amount))),
    case("pred-unseen-category", predict(), (0, 3), "plan", setup=input_file(with_values("plan", "enterprise")),
         check=scores_written(30)),
    case("pred-output-parent-is-a-file", predict(INCOMING, output="blocker/scores.parquet"), 6, "blocker",
         setup=touch("blocker")),
    case("pred-output-is-a-folder", predict(INCOMING, output="folder.parquet"), 2, "folder.parquet",
         setup=mkdir("folder.parquet")),
    case("pred-output-bad-suffix", predict(INCOMING, output="out/scores.txt"), 2, "scores.txt"),
    case("pred-unknown-run", ("predict", "--run", "nosuchrun", "--input", INCOMING, "--output", "out/s.parquet"),
         2, "nosuchrun"),
    case("pred-run-is-not-a-run-folder", ("predict", "--run", "data", "--input", INCOMING, "--output",
                                          "out/s.parquet"), 2, "data"),
    case("pred-failed-run", ("predict", "--run", "{bad_run}", "--input", INCOMING, "--output", "out/s.parquet"),
         3, "{bad_run}", setup=lambda p: copy_run(p, edited(status="failed"))),
    case("pred-corrupt-model-file", predict(INCOMING), 3, "corrupt", setup=corrupt_model),
    case("pred-tampered-checksum", predict(INCOMING), 3, ("corrupt", "checksum", "sha256"), setup=tamper_checksum),
    case("pred-model-and-checksum-swapped", predict(INCOMING), 3, ("export/models", "model"),
         setup=swap_model_and_checksum, check=nothing_executed),
    case("pred-manifest-missing", predict(INCOMING), 3, "manifest",
         setup=lambda p: (base_run_dir(p) / "manifest.json").unlink()),
    case("pred-manifest-garbage", predict(INCOMING), 3, "manifest",
         setup=lambda p: write_manifest(base_run_dir(p), b"{\xff")),
    case("pred-manifest-wrong-types", predict(INCOMING), 3, "manifest",
         setup=lambda p: write_manifest(base_run_dir(p), {**manifest_of(base_run_dir(p)), "artifacts": [1, 2],
                                                          "models": "x"})),
    case("pred-workflow-ops-not-a-list", predict(INCOMING), 3, "workflow",
         setup=edit_exported("workflow.json", lambda w: w.__setitem__("ops", 5))),
    case("pred-workflow-input-columns-a-list", predict(INCOMING), 3, "workflow",
         setup=edit_exported("workflow.json", lambda w: w.__setitem__("input_columns", ["plan"]))),
    case("pred-workflow-unknown-op", predict(INCOMING), 3, ("workflow", "os.system"),
         setup=edit_exported("workflow.json", lambda w: w["ops"][0].__setitem__("op", "os.system"))),
    case("pred-workflow-infinite-state", predict(INCOMING), 3, ("workflow", "standardize"),
         setup=edit_exported("workflow.json", infinite_standardize_state)),
    case("pred-model-described-as-a-pickle", predict(INCOMING), 3, ("model.joblib", "model"),
         setup=lambda p: (edit_exported("model.json", pickle_model_description)(p), plant_pickle(p)) and None,
         check=nothing_executed),
    case("pred-unknown-model", predict(INCOMING, "--model", "nope_model"), 2, "nope_model"),
    case("pred-threshold-out-of-range", predict(INCOMING, "--threshold", "1.5"), 2, ("threshold", "1.5")),
    case("pred-scheduler-without-partitioned", predict(INCOMING, "--scheduler", "tcp://127.0.0.1:1"), 2,
         "--scheduler"),
    case("pred-no-runs", predict(INCOMING, "--runs-dir", "emptyruns"), 2, "emptyruns", setup=mkdir("emptyruns")),
    case("pred-latest-dangling", predict(INCOMING), 2, ("latest", "gone00"), setup=dangling_latest),
]

STORAGE_CASES = [
    case("sto-runs-dir-is-a-file", (*RUN, "--set", "runs_dir=blocker"), 6, "blocker", setup=touch("blocker")),
    case("sto-runs-dir-parent-is-a-file", (*RUN, "--runs-dir", "blocker/runs"), 6, "blocker", setup=touch("blocker")),
    case("sto-pipeline-dir-is-a-file", (*RUN, "--runs-dir", "other"), 6, ("other/tiny", "tiny"),
         setup=touch(f"other/{PIPELINE}")),
    case("sto-lock-is-a-folder", RUN, 6, (".lock", "run lock"), setup=lock_is_a_folder),
    case("sto-schema-parent-is-a-file", ("schema", "-o", "blocker/schema.json"), 6, "blocker", setup=touch("blocker")),
    # Files past 4 KiB cannot be written (RLIMIT_FSIZE, EFBIG): a full disk for everything
    # but small files, the run record's final write included.
    case("sto-file-size-limit", (*RUN, "--force"), 6, ("runs/tiny", "File too large", "too large"),
         env={"ADVERSARIAL_RLIMIT_FSIZE": "4096"}, abandoned_ok=True, check=listed_as_abandoned_not_running),
    case("sto-cache-record-null", RUN, 0, setup=cache_record("split", b"null"), check=warning_names_stage("split")),
    case("sto-cache-record-a-list", RUN, 0, setup=cache_record("split", b"[]"), check=warning_names_stage("split")),
    case("sto-cache-record-garbage", RUN, 0, setup=cache_record("split", b"\xff\x00{"),
         check=warning_names_stage("split")),
    case("sto-cache-record-files-wrong-type", RUN, 0, setup=cache_record("split", b'{"files": "output.pkl"}'),
         check=warning_names_stage("split")),
    # --force logit: logit reruns and reads the features stage's output from the cache.
    # The cache trusts its owner (a private 0700 folder) unless a signing key is set: with one,
    # an entry whose pickle and checksum were swapped together is recomputed, never unpickled.
    case("sto-cache-pickle-swapped", (*RUN, "--force", "logit"), 0, ("features", "cache"),
         setup=cache_pickle_swapped("features"), check=nothing_executed,
         env={"PIPELINE_SIGNING_KEY": "adversarial-suite-signing-key-0123456789"}),
    case("sto-cache-entry-is-a-file", RUN, 0, setup=cache_entry_is_a_file("features"), check=new_run_succeeded),
    case("sto-cache-dir-is-a-file", RUN, (0, 6), ".cache", setup=cache_dir_is_a_file),
    case("sto-runs-list-garbage-manifest", ("runs", "list"), 0, setup=lambda p: copy_run(p, lambda m: "{\xff"),
         check=stdout_lists("{good_run}")),
    case("sto-runs-list-null-manifest", ("runs", "list"), 0, setup=lambda p: copy_run(p, lambda m: "null"),
         check=stdout_lists("{good_run}")),
    case("sto-runs-list-wrong-types", ("runs", "list"), 0,
         setup=lambda p: copy_run(p, edited(metrics={"best": [1], "models": [], "split": 3}, stages=[1],
                                            started=5, duration_s="long", device="cpu")),
         check=stdout_lists("{good_run}")),
    case("sto-runs-list-json-wrong-types", ("runs", "list", "--json"), 0,
         setup=lambda p: copy_run(p, edited(metrics={"best": [1]}, stages={"x": 1}, started=[], ended={})),
         check=stdout_is_json_listing_runs(2)),
    case("sto-runs-show-wrong-types", ("runs", "show", "{bad_run}"), (0, 3), "{bad_run}",
         setup=lambda p: copy_run(p, edited(metrics={"best": [1]}, stages={"x": 1}, versions=7))),
    case("sto-runs-list-dead-running-run", ("runs", "list"), 0,
         setup=lambda p: copy_run(p, edited(status="running", pid=4194303, ended=None)),
         check=stdout_lists("abandoned")),
]

SIGNAL_CASES = [
    # A python stage that sleeps; the signal is sent once it has started (``_launch``).
    case("sig-term-during-a-stage", (*RUN, "--set", "stages.nap.kind=python", "--set", "stages.nap.function=napper:nap",
                                     "--only", "nap"), ExitCode.TERMINATED, ("terminated", "SIGTERM")),
    case("sig-int-during-a-stage", (*RUN, "--set", "stages.nap.kind=python", "--set", "stages.nap.function=napper:nap",
                                    "--only", "nap"), ExitCode.INTERRUPTED, "interrupted"),
    case("sig-term-while-waiting-for-the-lock", (*RUN, "--wait", "60"), ExitCode.TERMINATED, ("terminated", "SIGTERM")),
    case("sig-int-while-waiting-for-the-lock", (*RUN, "--wait", "60"), ExitCode.INTERRUPTED, "interrupted"),
]

CLI_CASES = [
    case("cli-unknown-option", ("validate", CONFIG, "--nope"), 2, "--nope", exec_=True),
    case("cli-unknown-command", ("frobnicate",), 2, "frobnicate"),
    case("cli-bad-choice", (*RUN, "--device", "tpu"), 2, "tpu"),
    case("cli-missing-argument", ("validate",), 2, "CONFIG"),
    case("cli-missing-required-option", ("predict", "--input", INCOMING, "--output", "out/s.parquet"), 2, "--run"),
    case("cli-not-a-number", (*RUN, "--wait", "soon"), 2, "soon"),
    case("cli-negative-wait", (*RUN, "--wait", "-1"), 2, ("--wait", "-1")),
    case("cli-option-without-value", ("validate", CONFIG, "--set"), 2, "--set"),
    case("cli-only-unknown-stage", (*RUN, "--only", "nope_stage"), 2, "nope_stage"),
    case("cli-force-unknown-stage", (*RUN, "--force", "nope_stage"), 2, "nope_stage"),
    # A malformed address may be refused as usage (2) or as an unreachable scheduler (5).
    case("cli-scheduler-not-an-address", (*RUN, "--scheduler", "not-an-address"), (2, 5), "not-an-address", timeout=60, exec_=True),
    case("cli-scheduler-refused", (*RUN, "--scheduler", "tcp://127.0.0.1:{closed_port}", "--set",
                                   "cluster.connect_timeout=3"), 5, "127.0.0.1:{closed_port}", timeout=60, exec_=True),
    case("cli-scheduler-not-dask", (*RUN, "--scheduler", "tcp://127.0.0.1:{http_port}", "--set",
                                    "cluster.connect_timeout=3"), 5, "127.0.0.1:{http_port}", timeout=60, exec_=True),
    case("cli-partitioned-predict-scheduler-not-an-address",
         predict(INCOMING, "--partitioned", "--scheduler", "not-an-address", output="out/parts"), (2, 5),
         "not-an-address", timeout=60, exec_=True),
    case("cli-runs-show-unknown", ("runs", "show", "nope_run"), 2, "nope_run"),
    case("cli-runs-prune-negative-keep", ("runs", "prune", "--keep", "-1"), 2, ("--keep", "-1")),
    case("cli-json-log-error", ("run", "configs/nope.yaml", "--log-format", "json"), 2, "configs/nope.yaml",
         check=stderr_lines_are_json),
    case("cli-json-log-data-error", (*RUN, "--log-format", "json", "--set", "stages.raw.path=data/nope.csv"), 3,
         "data/nope.csv", check=stderr_lines_are_json),
    case("cli-dag-bad-format", ("dag", CONFIG, "--format", "png"), 2, "png"),
    case("cli-doctor-require-gpu", ("doctor", "--require-gpu"), 5, "GPU", check=stderr_names("GPU"), exec_=True),
]

CASES = CONFIG_CASES + DATA_CASES + PREDICT_CASES + STORAGE_CASES + SIGNAL_CASES + CLI_CASES
BY_ID = {c.id: c for c in CASES}
assert len(BY_ID) == len(CASES), "case ids are unique"

SIGNALS = {"sig-term-during-a-stage": signal.SIGTERM, "sig-int-during-a-stage": signal.SIGINT,
           "sig-term-while-waiting-for-the-lock": signal.SIGTERM, "sig-int-while-waiting-for-the-lock": signal.SIGINT}


# ------------------------------------------------------------------ running the cases
HOLD_THE_LOCK = """\
import pathlib, sys, time
from pipeline.runs.locks import RunLock
with RunLock(sys.argv[1], wait=0) as lock:
    lock.note(run_id="the-holder")
    pathlib.Path(sys.argv[2]).write_text("held")
    time.sleep(120)
"""


@pytest.fixture(scope="module")
def base_project(tmp_path_factory) -> tuple[Path, str]:
    """The tiny project after one succeeded run: the 'earlier results' every case must keep."""
    project = write_tiny_project(tmp_path_factory.mktemp("adversarial") / "base")
    proc = run_cli(["run", CONFIG], project)
    assert proc.returncode == 0, proc.stderr
    return project, latest_target(project)


class _Listener:
    """A TCP service on 127.0.0.1 that answers like a web server, not a Dask scheduler."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\r\nbad request")
                time.sleep(0.2)
            except OSError:
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self.sock.close()


def _closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return sock.getsockname()[1]


def fill(text: str, context: dict[str, str]) -> str:
    """``{placeholder}`` replaced by what a setup made (other braces are YAML, left alone)."""
    for key, value in context.items():
        text = text.replace("{" + key + "}", value)
    return text


def _launch(case_: Case, project: Path, args: list[str]) -> Launch:
    env = cli_env(**case_.env)
    exec_ = case_.exec_ or os.environ.get("ADVERSARIAL_EXEC") == "1"
    if case_.id.endswith("while-waiting-for-the-lock"):
        ready = project.parent / f"{case_.id}.held"
        holder = [sys.executable, "-c", HOLD_THE_LOCK, str(project / "runs" / PIPELINE / ".lock"), str(ready)]
        # The signal goes once the run has the lock file open: it is waiting for the lock.
        lock = project / "runs" / PIPELINE / ".lock"
        return Launch(args, project, env, case_.timeout, True, SIGNALS[case_.id], ("open", lock), holder, ready)
    if case_.id in SIGNALS:
        marker = project.parent / f"{case_.id}.napping"
        return Launch([*args, "--set", f"stages.nap.params.marker={marker}"], project, env, case_.timeout, True,
                      SIGNALS[case_.id], marker)
    return Launch(args, project, env, case_.timeout, exec_)


def signal_recorded(project: Path, case_: Case, before_runs) -> list[str]:
    """The interrupted run (when one had started) is recorded as interrupted."""
    new = {rel: folder for rel, folder in run_folders(project).items() if rel not in before_runs}
    statuses = {rel: (read_json(f / "manifest.json") or {}).get("status") for rel, f in new.items()}
    if case_.id.endswith("while-waiting-for-the-lock"):
        return [f"runs recorded while waiting for the lock: {statuses}"] if any(
            s in ("running", "succeeded") for s in statuses.values()) else []
    if list(statuses.values()) != ["interrupted"]:
        return [f"expected one run recorded as interrupted, found {statuses}"]
    return []


def _selected_ids(request) -> list[str]:
    ids = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.module is request.module and callspec is not None and "case_id" in callspec.params:
            ids.append(callspec.params["case_id"])
    return ids or list(BY_ID)


@pytest.fixture(scope="module")
def outcomes(request, base_project, tmp_path_factory) -> dict[str, tuple[list[str], str]]:
    """Every selected case, run once, several at a time; case id -> (problems, description)."""
    base, base_run = base_project
    root = tmp_path_factory.mktemp("cases")
    streams = tmp_path_factory.mktemp("streams")
    listener = _Listener()
    ports = {"http_port": str(listener.port), "closed_port": str(_closed_port()), "good_run": base_run}
    ids = _selected_ids(request)
    if "gpu" in __import__("pipeline.backends", fromlist=["x"]).available_devices():
        ids = [i for i in ids if i != "cli-doctor-require-gpu"]
    results: dict[str, tuple[list[str], str]] = {}
    prepared: dict[str, tuple[Case, Path, object]] = {}
    launches: dict[str, Launch] = {}
    for case_id in ids:
        case_ = BY_ID[case_id]
        try:
            project = copy_project(base, root / case_id)
            context = dict(ports)
            if case_.setup is not None:
                context.update(case_.setup(project) or {})
            named = replace(case_, names=tuple(fill(n, context) for n in case_.names))
            prepared[case_id] = (named, project, snapshot(project, base_run))
            launches[case_id] = _launch(case_, project, [fill(a, context) for a in case_.args])
        except Exception as exc:  # noqa: BLE001 - a broken setup fails its own case only
            results[case_id] = ([f"setup raised {type(exc).__name__}: {exc}"], f"{case_id}: setup raised {exc!r}")
    try:
        finished = run_processes(launches, streams, workers=max(2, os.cpu_count() or 2))
    finally:
        listener.close()
    for case_id, proc in finished.items():
        named, project, before = prepared[case_id]
        try:
            problems = check_case(named, project, before, proc, base_run)
            if case_id in SIGNALS:
                problems += signal_recorded(project, named, before.runs)
        except Exception as exc:  # noqa: BLE001
            problems = [f"the check raised {type(exc).__name__}: {exc}"]
        results[case_id] = (problems, describe(named, proc, problems))
    cpu = sum(p.cpu_seconds for p in finished.values())
    print(f"\nadversarial cases: {len(finished)} processes, {cpu:.0f} CPU-seconds")
    if os.environ.get("ADVERSARIAL_REPORT"):             # every case's outcome, for triage
        Path(os.environ["ADVERSARIAL_REPORT"]).write_text(json.dumps(
            {i: {"problems": p, "description": d, "cpu_seconds": round(finished[i].cpu_seconds, 2)
                 if i in finished else None} for i, (p, d) in results.items()}, indent=1))
    return results


# Cases that fail today and are kept visible (strict: one that starts passing fails the suite
# until it is taken off this list). None at present.
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("case_id", [
    pytest.param(case_id, marks=pytest.mark.xfail(reason=KNOWN_GAPS[case_id], strict=True))
    if case_id in KNOWN_GAPS else case_id for case_id in BY_ID])
def test_adversarial_case(case_id: str, outcomes) -> None:
    if case_id not in outcomes:
        pytest.skip("a GPU is available here: doctor --require-gpu passes")
    problems, description = outcomes[case_id]
    assert not problems, description


def test_the_suite_covers_every_area_with_at_least_60_cases() -> None:
    areas = {c.id.split("-")[0] for c in CASES}
    assert areas == {"cfg", "data", "pred", "sto", "sig", "cli"}
    assert len(CASES) >= 60
