"""A run in MLflow: the resolved config as params, every metric, usage and cost, tags, and the
report, record and models as artifacts.

What is logged, with MLflow's own client (never its global state, so two runs in one process,
or a user's own MLflow code, do not share an active run):

- params: the resolved config, flattened to dotted keys (``stages.xgb.params.max_depth``);
- tags: pipeline, run id, device, status, and the git commit of the config's folder when it is
  a git checkout;
- metrics: each model's evaluation (``<model>.<metric>``), per epoch of the torch stage
  (``<stage>.<name>`` with the epoch as step), per tuning trial (``<stage>.trial.<metric>``,
  the trial number as step), each stage's seconds, CPU seconds and cost, and the run's usage,
  cost and duration;
- artifacts: report.html, manifest.json, config.yaml and the exported models (``artifacts:
  false`` leaves them out);
- models: each exported model of a succeeded run as an MLflow pyfunc model
  (``pipeline.tracking.mlflow_pyfunc``; ``pyfunc: false`` leaves them out), and with ``register:
  NAME`` the run's best model (the one ``pipeline predict`` scores with) as a new version of the
  registered model NAME, with every alias a stage's facts list under ``aliases`` (the promotion
  gate's ``champion``) moved to that version.

Every call goes through ``_call``: the first failure is logged as a warning, later calls are
skipped, and ``tracking.json`` in the run folder records the error (or the MLflow run id).
Logging a model and the registry go through ``_try``: a failure there is a warning and a line
of ``warnings`` in ``tracking.json``, and the other models, and the end of the run, still go.
HTTP retries are capped so a server that is down costs seconds, not minutes, and a database
store (``sqlite:///...``) is opened once up front: MLflow's own store tries ten times over about
100 s before it gives up on one it cannot open.

``promote_version`` moves a registry alias to the version a run registered (``pipeline runs
promote``: the registry's ``champion`` follows the run folder's).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.core.library_logs import adopt_library_loggers
from pipeline.hooks.protocol import MetricEvent, RunEvent, RunHook, RunInfo, StageEvent
from pipeline.runs.layout import CONFIG, MANIFEST
from pipeline.runs.record import RunManifest

log = logging.getLogger("pipeline")

TRACKING_FILE = "tracking.json"
# A binary model's threshold when the run's evaluation recorded none (as ``pipeline predict``).
DEFAULT_THRESHOLD = 0.5
# MLflow's limits on one batch, and on a param's value (longer values are cut, and say so).
_BATCH = 100
_PARAM_VALUE = 6000
# A server that is down must cost seconds: MLflow retries for minutes by default. No progress
# bars from artifact copies in a batch job's log.
_HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
                  "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}
# The stage facts key that lists the run aliases a stage asks for (the promotion gate's contract).
ALIASES_FACT = "aliases"
# Tracking URI schemes of MLflow's SQLAlchemy store (``postgresql+psycopg2://`` is ``postgresql``).
_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
# A failure's text in a warning and in tracking.json, at most (its cause kept: ``_why``).
_WHY = 300


class MlflowHook(RunHook):
    """Logs the run to MLflow at ``uri`` (None: MLflow's own default, ``$MLFLOW_TRACKING_URI``)
    in ``experiment`` (None: the pipeline's name), created with ``artifact_location`` if new;
    ``pyfunc``: log each exported model as a pyfunc model; ``register``: the registered model
    the run's best model becomes a version of (None: none)."""

    def __init__(self, uri: str | None = None, experiment: str | None = None, *, artifacts: bool = True,
                 artifact_location: str | None = None, pyfunc: bool = True, register: str | None = None) -> None:
        self.uri = uri
        self.experiment = experiment
        self.where: str | None = None                        # ``uri`` as the client uses it (``resolved_uri``)
        self.experiment_name: str | None = None
        self.artifacts = artifacts
        self.artifact_location = artifact_location
        self.pyfunc = pyfunc
        self.register = register
        self.client: Any = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.error: str | None = None
        self.warnings: list[str] = []
        self.models: dict[str, dict[str, Any]] = {}          # model -> model_id, uri, location
        self.registered: dict[str, Any] | None = None

    # ------------------------------------------------------------------ events
    def run_started(self, run: RunInfo) -> None:
        try:
            client_class = _client_class()
        except ImportError:
            self._fail("mlflow is not installed (pip install 'pipeline[mlflow]')")
            return
        self.where = self._call("resolve the tracking URI", lambda: resolved_uri(self.uri), first=True)
        problem = unusable_store(self.where) if self.where else None
        if problem:
            self._fail(problem)
            return
        self.client = self._call("connect", lambda: client_class(tracking_uri=self.where), first=True)
        name = self.experiment_name = self.experiment or run.pipeline
        experiment = self._call("find the experiment", lambda: self.client.get_experiment_by_name(name))
        experiment_id = experiment.experiment_id if experiment is not None else \
            self._call("create the experiment",
                       lambda: self.client.create_experiment(name, artifact_location=self.artifact_location))
        tags = {"pipeline": run.pipeline, "pipeline.run_id": run.run_id, "pipeline.device": run.device,
                "mlflow.runName": run.run_id}
        commit = _git_commit(run)
        if commit:
            tags["mlflow.source.git.commit"] = commit
        self.experiment_id = experiment_id
        created = self._call("create the run", lambda: self.client.create_run(experiment_id, tags=tags))
        self.run_id = created.info.run_id if created is not None else None
        params = dict(_flatten(_config_dict(run.config)))
        self._batch("log the config", params=params)

    def metric(self, event: MetricEvent) -> None:
        prefix = event.model if event.model else event.stage
        self._batch("log metrics", metrics={f"{prefix}.{k}": v for k, v in event.values.items()}, step=event.step)

    def stage_finished(self, event: StageEvent) -> None:
        record = event.record
        values = {"seconds": record.seconds, "cpu_seconds": (record.usage or {}).get("cpu_seconds"),
                  "cost": (record.cost or {}).get("total")}
        self._batch("log stage usage", metrics={f"stage.{record.name}.{k}": v for k, v in values.items()})
        tuning = (record.facts or {}).get("tuning")
        if isinstance(tuning, dict):
            metric = str(tuning.get("metric", "value"))
            for trial in tuning.get("trials") or []:
                if isinstance(trial, dict) and isinstance(trial.get("value"), (int, float)):
                    self._batch("log trials", metrics={f"{record.name}.trial.{metric}": trial["value"]},
                                step=int(trial.get("number", 0)))

    def run_finished(self, event: RunEvent) -> None:
        manifest = event.manifest
        usage, cost = manifest.usage or {}, manifest.cost or {}
        totals = {"run.duration_s": manifest.duration_s, "run.cpu_seconds": usage.get("cpu_seconds"),
                  "run.cost": cost.get("total"),
                  "run.gpu_seconds": sum(d.get("seconds", 0.0) for d in (usage.get("gpus") or {}).values()) or None,
                  "run.energy_wh": sum(d.get("energy_wh", 0.0) for d in (usage.get("gpus") or {}).values()) or None}
        self._batch("log run totals", metrics=totals)
        self._batch("tag the status", tags={"pipeline.status": event.status})
        if self.artifacts:
            self._log_artifacts(event.run.run_dir, manifest.models)
        if self.pyfunc and event.status == "succeeded":
            self._log_models(event)
        status = {"succeeded": "FINISHED", "interrupted": "KILLED"}.get(event.status, "FAILED")
        self._call("end the run", lambda: self.client.set_terminated(self.run_id, status=status))
        self._record(event.run.run_dir)

    # ------------------------------------------------------------------ calls
    def _batch(self, what: str, *, metrics: Mapping[str, Any] | None = None, params: Mapping[str, Any] | None = None,
               tags: Mapping[str, str] | None = None, step: int | None = None) -> None:
        """Metrics (finite numbers only), params and tags in batches of MLflow's size."""
        from mlflow.entities import Metric, Param, RunTag

        if self.client is None or self.run_id is None:
            return
        now = int(time.time() * 1000)
        items: list[Any] = [Metric(k, float(v), now, step or 0) for k, v in (metrics or {}).items() if _finite(v)]
        items += [Param(k, _param(v)) for k, v in (params or {}).items()]
        items += [RunTag(k, str(v)) for k, v in (tags or {}).items()]
        for start in range(0, len(items), _BATCH):
            chunk = items[start:start + _BATCH]
            self._call(what, lambda chunk=chunk: self.client.log_batch(
                self.run_id, metrics=[i for i in chunk if isinstance(i, Metric)],
                params=[i for i in chunk if isinstance(i, Param)], tags=[i for i in chunk if isinstance(i, RunTag)]))

    def _log_artifacts(self, run_dir: Path, models: Mapping[str, str]) -> None:
        for name in ("report.html", MANIFEST, CONFIG):
            path = run_dir / name
            if path.is_file():
                self._call(f"upload {name}", lambda path=path: self.client.log_artifact(self.run_id, str(path)))
        for model, folder in models.items():
            path = run_dir / folder
            if path.is_dir():
                self._call(f"upload model {model}", lambda path=path, model=model: self.client.log_artifacts(
                    self.run_id, str(path), artifact_path=f"models/{model}"))

    def _log_models(self, event: RunEvent) -> None:
        """Each exported model as a pyfunc model, then the registry (class docstring)."""
        if self.client is None or self.run_id is None or self.error is not None:
            return
        try:
            from pipeline.tracking.mlflow_pyfunc import log_pyfunc
        except ImportError as exc:
            self._warn(f"cannot log pyfunc models: {exc}")
            return
        manifest, run = event.manifest, event.run
        metrics = dict(manifest.metrics or {})
        recorded = metrics.get("threshold")             # null where no threshold applies (not binary)
        threshold = float(recorded) if recorded is not None else DEFAULT_THRESHOLD
        tags = {"pipeline": run.pipeline, "pipeline.run_id": run.run_id}
        for model, folder in sorted(manifest.models.items()):
            path = run.run_dir / folder
            ok, logged = self._try(f"log model {model} as a pyfunc model", lambda path=path, model=model: log_pyfunc(
                self.client, experiment_id=str(self.experiment_id), run_id=str(self.run_id), folder=path,
                name=model, threshold=threshold, tags=tags))
            if ok:
                self.models[model] = logged
        if self.register:
            self._register(manifest, metrics, tags)

    def _register(self, manifest: RunManifest, metrics: dict[str, Any], tags: dict[str, str]) -> None:
        """The run's best model as a new version of ``register``, and the stages' aliases on it."""
        from pipeline.tracking.mlflow_pyfunc import register_version

        name = str(self.register)
        best = best_model(manifest.models, metrics)
        if best is None or best not in self.models:
            why = "the run names no best model" if best is None else f"its best model {best} was not logged"
            self._warn(f"nothing registered as {name}: {why}")
            return
        logged = self.models[best]
        ok, version = self._try(f"register model {best} as {name}", lambda: register_version(
            self.client, name, model_id=logged["model_id"], location=logged["location"], run_id=str(self.run_id),
            tags={**tags, "pipeline.model": best}))
        if not ok:
            return
        aliases = [alias for alias in stage_aliases(manifest)
                   if self._try(f"set alias {alias} of {name} to version {version}", lambda alias=alias:
                                self.client.set_registered_model_alias(name, alias, version))[0]]
        self.registered = {"name": name, "version": version, "model": best, "aliases": aliases,
                           "uri": f"models:/{name}/{version}"}
        log.info("tracking: model %s registered as %s version %s%s", best, name, version,
                 f" ({', '.join('@' + a for a in aliases)})" if aliases else "")

    def _try(self, what: str, call: Callable[[], Any]) -> tuple[bool, Any]:
        """(True, ``call()``), or (False, None) when it raised: a warning and a line in
        tracking.json, and the hook goes on (one model that cannot be logged does not keep the
        others, or the end of the run, out)."""
        try:
            return True, call()
        except Exception as exc:  # noqa: BLE001 - tracking never fails a run
            self._warn(f"could not {what}: {_why(exc)}")
            return False, None

    def _warn(self, why: str) -> None:
        self.warnings.append(why)
        log.warning("tracking: MLflow at %s: %s; the run goes on without it", self._shown_uri, why)

    def _call(self, what: str, call: Callable[[], Any], *, first: bool = False) -> Any:
        """``call()``, or None once anything failed: the first failure is warned about and kept
        (``first``: a call that needs no client yet)."""
        if self.error is not None or (self.client is None and not first):
            return None
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - tracking never fails a run
            self._fail(f"could not {what}: {_why(exc)}")
            return None

    def _fail(self, why: str) -> None:
        self.error = why
        log.warning("tracking: MLflow at %s: %s; the run goes on without it", self._shown_uri, why)

    @property
    def _shown_uri(self) -> str:
        return self.where or self.uri or "the default URI"

    def _record(self, run_dir: Path) -> None:
        """tracking.json: where the run went, or why it did not (derived, like the report: not
        one of the run's checksummed artifacts)."""
        from pipeline.runs.store import atomic_write_json

        entry = {"uri": self.where or self.uri, "experiment": self.experiment_name, "experiment_id": self.experiment_id,
                 "run_id": self.run_id, "error": self.error, "models": self.models, "registered": self.registered,
                 "warnings": self.warnings}
        try:
            atomic_write_json(run_dir / TRACKING_FILE, {"mlflow": entry})
        except OSError as exc:
            log.warning("tracking: cannot write %s: %s", run_dir / TRACKING_FILE, exc)


def _client_class() -> type:
    """MLflow's client class, with the HTTP retries capped first (unless the environment says
    otherwise) and MLflow's loggers made the pipeline's after its import gave them a text
    handler of their own; an ImportError where mlflow is not installed."""
    for key, value in _HTTP_SETTINGS.items():
        os.environ.setdefault(key, value)
    from mlflow.tracking import MlflowClient

    adopt_library_loggers()
    return MlflowClient


def resolved_uri(uri: str | None) -> str:
    """The tracking URI a client of ``uri`` uses (None: ``$MLFLOW_TRACKING_URI`` or MLflow's
    default), a relative sqlite file made absolute: tracking.json then names the store wherever
    it is read from (``pipeline runs promote`` in another folder)."""
    import mlflow

    found = uri or mlflow.get_tracking_uri()
    prefix = "sqlite:///"
    path, mark, query = found[len(prefix):].partition("?")
    if found.startswith(prefix) and path not in ("", ":memory:") and not path.startswith("/"):
        found = f"{prefix}{Path(path).resolve()}{mark}{query}"
    return found


def unusable_store(uri: str) -> str | None:
    """Why the database store at ``uri`` cannot be opened (None: it can, or ``uri`` is no
    database): one try at what MLflow's SQLAlchemy store tries ten times, waiting up to 51 s
    between tries, before it gives up (a sqlite file in a folder that cannot be written, a file
    that is not a database)."""
    if uri.split(":", 1)[0].split("+", 1)[0] not in _DATABASES:
        return None
    try:
        import sqlalchemy

        path = uri[len("sqlite:///"):].partition("?")[0] if uri.startswith("sqlite:///") else ""
        if path and path != ":memory:":                       # MLflow makes the file's folder too
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sqlalchemy.create_engine(uri)
        try:
            with engine.connect() as connection:
                sqlalchemy.inspect(connection).get_table_names()
        finally:
            engine.dispose()
    except Exception as exc:  # noqa: BLE001 - tracking never fails a run
        return f"could not open the tracking database: {_why(exc)}"
    return None


def promote_version(run_dir: Path, alias: str) -> str | None:
    """Move ``alias`` of the registered model the run at ``run_dir`` became a version of (its
    tracking.json's ``registered``) to that version, as ``pipeline runs promote`` moves the run
    folder's pointer. Returns what it did, None for a run that registered no version; a
    registry that cannot be reached is a warning (the run folder's pointer has moved all the same)."""
    try:
        entry = json.loads((run_dir / TRACKING_FILE).read_text(encoding="utf-8")).get("mlflow") or {}
    except (OSError, ValueError, AttributeError):
        return None
    registered = entry.get("registered") if isinstance(entry, dict) else None
    if not isinstance(registered, dict) or not registered.get("name") or registered.get("version") is None:
        return None
    name, version, uri = str(registered["name"]), str(registered["version"]), entry.get("uri")
    moving = f"{name}@{alias} to version {version}"
    try:
        client_class = _client_class()
        problem = unusable_store(uri) if isinstance(uri, str) else None
        if problem:
            raise RuntimeError(problem)
        client_class(tracking_uri=uri, registry_uri=uri).set_registered_model_alias(name, alias, version)
    except Exception as exc:  # noqa: BLE001 - the run folder's champion has moved; the registry is told if it can be
        why = str(exc) if isinstance(exc, RuntimeError) else _why(exc)
        log.warning("tracking: MLflow at %s: could not move %s: %s; models:/%s@%s still names the version it "
                    "did", uri or "the default URI", moving, why, name, alias)
        return None
    return f"MLflow at {uri or 'the default URI'}: moved {moving}"


def _why(exc: BaseException) -> str:
    """``Type: message`` of ``exc`` in one line a reader can finish: its first line; where that
    nests its causes' text (urllib3's reprs in requests' in MLflow's) and is long, up to where
    its first cause's text begins, then the innermost cause's type and message."""
    chain = [exc]
    while len(chain) < 16:
        last = chain[-1]
        cause = last.__cause__ or (None if last.__suppress_context__ else last.__context__)
        if cause is None or cause in chain:
            break
        chain.append(cause)
    head, root = _first_line(exc), chain[-1]
    if root is not exc:
        cause = f"{type(root).__name__}: {_first_line(root)}"
        if len(head) > _WHY:
            at = next((at for at in (head.find(_first_line(inner)) for inner in chain[1:] if _first_line(inner))
                       if at > 0), -1)
            head = f"{head[:at].rstrip(' :(') if at > 0 else head[:_WHY // 2]}: {cause}"
        elif _first_line(root) not in head:
            head = f"{head}: {cause}"
    if len(head) > _WHY:                                     # the start and the end: what failed, and why
        head = f"{head[:_WHY // 2 - 2]} ... {head[-(_WHY // 2 - 3):]}"
    return f"{type(exc).__name__}: {head}"


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), "")


def best_model(models: Mapping[str, str], metrics: Mapping[str, Any]) -> str | None:
    """The model ``pipeline predict`` scores with when none is named
    (``pipeline.predict.batch.choose_model``): the evaluation's best if it was exported, else the
    best exported one by the evaluation's ranking metric, else the only one; None otherwise."""
    from pipeline.metrics import best_of

    best = metrics.get("best")
    if isinstance(best, str) and best in models:
        return best
    ranked = best_of(metrics.get("models"), models, metrics.get("rank_by"))
    if ranked is not None:
        return ranked
    return next(iter(models)) if len(models) == 1 else None


def stage_aliases(manifest: RunManifest) -> list[str]:
    """The run aliases the run's stages ask for (their facts' ``aliases``: text values, in stage
    order, each once); the record is data, so anything but text is skipped."""
    found: list[str] = []
    for record in manifest.stages.values():
        values = (record.facts or {}).get(ALIASES_FACT)
        for alias in values if isinstance(values, list) else []:
            if isinstance(alias, str) and alias and alias not in found:
                found.append(alias)
    return found


def _config_dict(config: Any) -> dict[str, Any]:
    if config is None:
        return {}
    return config.model_dump(mode="json", exclude_none=True) if hasattr(config, "model_dump") else dict(config)


def _flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted keys to leaf values; lists stay whole (as JSON text)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _flatten(inner, f"{prefix}.{key}" if prefix else str(key))
    elif prefix:
        yield prefix, value


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= _PARAM_VALUE else text[:_PARAM_VALUE - 12] + " [truncated]"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and abs(value) != float("inf")


def _git_commit(run: RunInfo) -> str | None:
    """The commit checked out where the run was started (None outside a git checkout)."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None
