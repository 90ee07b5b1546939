"""Exported models as MLflow pyfunc models and the registry: real runs logged to a local MLflow
store (sqlite in a temporary folder), loaded back with ``mlflow.pyfunc.load_model`` and compared
with ``pipeline predict`` on the same rows."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

mlflow = pytest.importorskip("mlflow")

from pipeline.core.errors import ConfigError  # noqa: E402
from pipeline.predict.batch import predict_batch  # noqa: E402

pytestmark = pytest.mark.slow

CLASSES = ["low", "mid", "high"]
# A python stage that asks for the champion alias, as the promotion gate does when it promotes.
PROMOTE = 'def promote(ctx, inputs):\n    ctx.facts["aliases"] = ["champion"]\n    return None\n'


def rows(n: int, seed: int, *, multiclass: bool) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    kind = rng.choice(["x", "y", "z"], size=n)
    if multiclass:
        label = np.array(CLASSES)[np.digitize(a + 0.5 * b + rng.normal(scale=0.5, size=n), [-0.5, 0.5])]
    else:
        label = np.where(a - b + (kind == "x") + rng.normal(size=n) > 0, "yes", "no")
    return pd.DataFrame({"id": np.arange(n) + 1000, "a": a, "b": b, "kind": kind, "label": label})


def config(name: str, data: Path, uri: str, artifacts: Path, *, task: str, after: str = "",
           register: str | None = None) -> str:
    positive = '    positive: "yes"\n' if task == "binary" else ""
    return (f"name: {name}\ndevice: cpu\nstages:\n  raw:\n    kind: load\n    path: {data}\n"
            f"  split:\n    kind: split\n    inputs: [raw]\n    target: label\n    task: {task}\n{positive}"
            "    test: 0.25\n"
            "  features:\n    kind: features\n    inputs: [split]\n    id: id\n"
            "    ops:\n      - standardize: {columns: [a, b]}\n      - one_hot: {columns: [kind]}\n"
            "  logreg:\n    kind: train\n    inputs: [features]\n    model: logistic_regression\n"
            "  xgb:\n    kind: train\n    inputs: [features]\n    model: xgboost\n"
            "    params: {n_estimators: 5, max_depth: 3}\n"
            "  evaluate:\n    kind: evaluate\n    inputs: [logreg, xgb]\n"
            "  export:\n    kind: export\n    inputs: [logreg, xgb]\n" + after
            + f"tracking:\n  mlflow:\n    uri: {uri}\n    artifact_location: {artifacts.as_uri()}\n"
            + (f"    register: {register}\n" if register else ""))


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> dict:
    """A binary run (registered as ``churn``, with a stage that asks for ``champion``) and a
    multiclass run, both logged to one sqlite store."""
    from pipeline import run_pipeline

    folder = tmp_path_factory.mktemp("pyfunc")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    rows(240, 0, multiclass=False).to_csv(folder / "binary.csv", index=False)
    rows(240, 1, multiclass=True).to_csv(folder / "classes.csv", index=False)
    rows(40, 2, multiclass=False).drop(columns="label").to_csv(folder / "new_binary.csv", index=False)
    rows(40, 3, multiclass=True).drop(columns="label").to_csv(folder / "new_classes.csv", index=False)
    (folder / "gate.py").write_text(PROMOTE)
    promote = "  promote:\n    kind: python\n    inputs: [evaluate]\n    function: gate:promote\n"
    (folder / "churn.yaml").write_text(config("churn", folder / "binary.csv", uri, folder / "artifacts", task="binary",
                                              after=promote, register="churn"))
    (folder / "classes.yaml").write_text(config("classes", folder / "classes.csv", uri, folder / "artifacts",
                                                task="multiclass"))
    runs = {}
    for name in ("churn", "classes"):
        run_dir = Path(run_pipeline(folder / f"{name}.yaml", runs_dir=folder / "runs").run_dir)
        runs[name] = {"run_dir": run_dir, "tracked": json.loads((run_dir / "tracking.json").read_text())["mlflow"],
                      "manifest": json.loads((run_dir / "manifest.json").read_text())}
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)           # models:/ URIs resolve through MLflow's global URI
    try:
        yield {"folder": folder, "uri": uri, **runs}
    finally:
        mlflow.set_tracking_uri(previous)


def predicted(run: dict, folder: Path, new: str, model: str, tmp_path: Path) -> pd.DataFrame:
    out = tmp_path / f"{model}.parquet"
    predict_batch(run["run_dir"], folder / new, out, model=model)
    return pd.read_parquet(out)


def assert_same_table(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert list(got.columns) == list(want.columns)
    for column in want.columns:
        if pd.api.types.is_float_dtype(want[column]):
            np.testing.assert_allclose(got[column].to_numpy(), want[column].to_numpy(), rtol=0, atol=1e-6)
        else:
            assert got[column].tolist() == want[column].tolist(), column


@pytest.mark.parametrize("name, new", [("churn", "new_binary.csv"), ("classes", "new_classes.csv")])
def test_a_pyfunc_model_scores_as_pipeline_predict_does(logged, tmp_path, name, new):
    run, folder = logged[name], logged["folder"]
    assert run["tracked"]["error"] is None and run["tracked"]["warnings"] == []
    assert set(run["tracked"]["models"]) == set(run["manifest"]["models"]) == {"logreg", "xgb"}
    frame = pd.read_csv(folder / new)
    for model, logged_model in run["tracked"]["models"].items():
        pyfunc = mlflow.pyfunc.load_model(logged_model["uri"])
        assert_same_table(pyfunc.predict(frame), predicted(run, folder, new, model, tmp_path))
    without_id = pyfunc.predict(frame.drop(columns="id"))          # the id is optional
    assert_same_table(without_id, predicted(run, folder, new, model, tmp_path).drop(columns="id"))
    if name == "churn":                    # a binary model's threshold is a predict parameter
        table = pyfunc.predict(frame, params={"threshold": 0.99})
        assert table["prediction"].tolist() == (table["score"] >= 0.99).astype("int64").tolist()


def test_the_signature_names_the_input_columns_and_the_requirements_pin_the_package(logged):
    from pipeline.version import __version__

    logged_model = logged["churn"]["tracked"]["models"]["xgb"]
    info = mlflow.models.get_model_info(logged_model["uri"])
    inputs = {spec.name: spec for spec in info.signature.inputs.inputs}
    assert list(inputs) == ["a", "b", "kind", "id"]
    assert [inputs[c].type.name for c in ("a", "b", "kind")] == ["double", "double", "string"]
    assert inputs["id"].required is False
    assert {"id", "score", "prediction", "model"} == set(info.signature.outputs.input_names())
    local = Path(mlflow.artifacts.download_artifacts(logged_model["uri"]))
    wanted = (local / "requirements.txt").read_text().split()
    assert f"pipeline=={__version__}" in wanted and any(r.startswith("xgboost") for r in wanted)
    example = json.loads((local / "serving_input_example.json").read_text())
    assert set(example["dataframe_split"]["columns"]) == {"a", "b", "kind", "id"}
    assert not list(local.rglob("*.pkl")) and not list(local.rglob("*.pickle"))     # nothing pickled
    assert (local / "artifacts" / "xgb" / "model.xgb.json").is_file()


def test_register_makes_a_version_of_the_best_model_and_the_stage_alias_points_at_it(logged, tmp_path):
    run = logged["churn"]
    registered = run["tracked"]["registered"]
    best = run["manifest"]["metrics"]["best"]
    assert registered["name"] == "churn" and registered["model"] == best and registered["aliases"] == ["champion"]
    client = mlflow.tracking.MlflowClient(tracking_uri=logged["uri"])
    version = client.get_model_version_by_alias("churn", "champion")
    assert str(version.version) == registered["version"] and version.run_id == run["tracked"]["run_id"]
    assert version.tags["pipeline.model"] == best
    champion = mlflow.pyfunc.load_model("models:/churn@champion")
    frame = pd.read_csv(logged["folder"] / "new_binary.csv")
    assert_same_table(champion.predict(frame), predicted(run, logged["folder"], "new_binary.csv", best, tmp_path))
    assert logged["classes"]["tracked"]["registered"] is None          # no register: nothing registered


def test_a_registry_failure_is_a_warning_and_the_run_still_ends(logged, caplog):
    """The hook called directly with a record whose stage asks for an alias MLflow refuses
    ("v1" names versions): the version is made, the alias is a warning, the run is FINISHED."""
    from pipeline.hooks.protocol import RunEvent, RunInfo
    from pipeline.runs.record import RunManifest
    from pipeline.tracking import MlflowHook

    run = logged["churn"]
    manifest = RunManifest.model_validate(run["manifest"])
    manifest.stages["promote"].facts["aliases"] = ["v1", "champion"]
    hook = MlflowHook(logged["uri"], "direct", artifact_location=(logged["folder"] / "direct").as_uri(),
                      artifacts=False, register="direct")
    info = RunInfo(manifest.run_id, run["run_dir"], "churn", "cpu", "asked", 1)
    hook.run_started(info)
    with caplog.at_level("WARNING", logger="pipeline"):
        hook.run_finished(RunEvent(info, "succeeded", manifest))
    assert hook.registered is not None and hook.registered["aliases"] == ["champion"]
    assert any("could not set alias v1" in w for w in hook.warnings) and "could not set alias v1" in caplog.text
    client = mlflow.tracking.MlflowClient(tracking_uri=logged["uri"])
    assert client.get_run(hook.run_id).info.status == "FINISHED"
    assert str(client.get_model_version_by_alias("direct", "champion").version) == hook.registered["version"]


def test_register_without_pyfunc_is_a_config_error_naming_the_key(tmp_path):
    from pipeline.config import load_config

    data = tmp_path / "rows.csv"
    rows(20, 0, multiclass=False).to_csv(data, index=False)
    path = tmp_path / "p.yaml"
    path.write_text(config("p", data, "sqlite:///x.db", tmp_path, task="binary", register="churn")
                    + "    pyfunc: false\n")
    with pytest.raises(ConfigError, match="tracking.mlflow") as caught:
        load_config(path)
    assert "register needs pyfunc" in str(caught.value)


def test_the_aliases_and_the_best_model_are_read_from_the_record():
    from pipeline.runs.record import RunManifest, StageRecord
    from pipeline.tracking.mlflow_hook import best_model, stage_aliases

    manifest = RunManifest(pipeline="p", run_id="r", status="succeeded", stages={
        "a": StageRecord(name="a", kind="python", facts={"aliases": ["champion", 3, "champion"]}),
        "b": StageRecord(name="b", kind="python", facts={"aliases": "champion"}),       # not a list: skipped
        "c": StageRecord(name="c", kind="python", facts={"aliases": ["staging"]})})
    assert stage_aliases(manifest) == ["champion", "staging"]
    models = {"xgb": "export/models/xgb", "logreg": "export/models/logreg"}
    assert best_model(models, {"best": "xgb"}) == "xgb"
    ranked = {"best": "mlp", "rank_by": "log_loss", "models": {"xgb": {"log_loss": 0.4}, "logreg": {"log_loss": 0.3}}}
    assert best_model(models, ranked) == "logreg"              # mlp not exported: the best exported by log loss
    assert best_model(models, {}) is None and best_model({"xgb": "x"}, {}) == "xgb"


def test_the_example_takes_each_columns_values_from_the_first_op_that_names_it():
    from pipeline.tracking.mlflow_pyfunc import state_values

    ops = [{"op": "fill_missing", "state": {"fill": {"total": 1389.4}}},
           {"op": "log1p", "state": {}},
           {"op": "standardize", "state": {"mean_std": {"total": [7.2, 1.1], "tenure": [32.4, 24.6]}}},
           {"op": "one_hot", "state": {"categories": {"plan": ["basic", "pro", "max", "ultra"]}, "rare": {"plan": False}}},
           {"op": "other", "state": {"ignored": {"not_an_input": [1, 2]}}}]
    assert state_values(ops, {"total", "tenure", "plan"}) == {
        "total": [1389.4], "tenure": [32.4, 24.6], "plan": ["basic", "pro", "max", False]}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_mlflow_models_serve_answers_invocations_with_the_predict_table(logged, tmp_path):
    run = logged["churn"]
    uri = run["tracked"]["models"]["xgb"]["uri"]
    port = _free_port()
    # MLflow starts `uvicorn` by name: the environment's scripts must be on PATH, as in an activated one.
    env = {**os.environ, "MLFLOW_TRACKING_URI": logged["uri"],
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", uri, "--env-manager", "local",
                               "-h", "127.0.0.1", "-p", str(port)], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"mlflow models serve did not start: {server.stderr.read().decode()[-2000:]}")
                time.sleep(0.5)
        frame = pd.read_csv(logged["folder"] / "new_binary.csv")
        body = json.dumps({"dataframe_split": json.loads(frame.to_json(orient="split", index=False))}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:
            got = pd.DataFrame(json.loads(answer.read())["predictions"])
        assert_same_table(got, predicted(run, logged["folder"], "new_binary.csv", "xgb", tmp_path))
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_runs_promote_moves_the_registry_alias_with_the_run_folders_champion(tmp_path):
    """`models:/NAME@champion` follows the run folder's champion: `pipeline runs promote` moves
    both; a registry that cannot be reached is a warning, and the folder's pointer moves anyway."""
    from pipeline import run_pipeline
    from tests.support.cli import run_cli

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rows(160, 5, multiclass=False).to_csv(tmp_path / "rows.csv", index=False)
    (tmp_path / "p.yaml").write_text(config("p", tmp_path / "rows.csv", uri, tmp_path / "artifacts", task="binary",
                                            register="p"))
    runs = [Path(run_pipeline(tmp_path / "p.yaml", runs_dir=tmp_path / "runs").run_dir) for _ in range(2)]
    versions = [json.loads((r / "tracking.json").read_text())["mlflow"]["registered"]["version"] for r in runs]
    assert versions == ["1", "2"]
    client = mlflow.tracking.MlflowClient(tracking_uri=uri)

    def champion() -> tuple[str, str]:
        return ((tmp_path / "runs" / "p" / "champion").resolve().name,
                str(client.get_model_version_by_alias("p", "champion").version))

    for run_dir, version in ((runs[0], "1"), (runs[1], "2")):
        proc = run_cli("runs", "promote", run_dir.name, "--runs-dir", "runs", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert champion() == (run_dir.name, version) and f"moved p@champion to version {version}" in proc.stdout
    with socket.socket() as probe:                              # a registry nobody answers for
        probe.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{probe.getsockname()[1]}"
    tracked = json.loads((runs[0] / "tracking.json").read_text())
    tracked["mlflow"]["uri"] = down
    (runs[0] / "tracking.json").write_text(json.dumps(tracked))
    proc = run_cli("runs", "promote", runs[0].name, "--runs-dir", "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert champion() == (runs[0].name, "2")                  # the folder moved; the registry could not be told
    assert f"MLflow at {down}: could not move p@champion to version 1" in proc.stderr, proc.stderr
