"""``promote``: the promotion gate of a nightly retrain. The run's best model becomes the
pipeline's ``champion`` (the run ``pipeline serve champion`` and ``pipeline predict champion``
use) only when it scores at least as well as the current champion on the same rows.

The new model is the evaluation's best: the one ``pipeline predict`` serves from this run. The
champion is the run ``runs/<pipeline>/champion`` points to and its best exported model, opened
with the checks ``predict`` makes (``pipeline.scoring.run_models``: the run succeeded, its
config and the model's files match the sha256 its manifest lists). Both are compared on one
set of rows, with the evaluation's metric definitions (``pipeline.metrics``) and threshold:

- by default this run's test split as the split stage produced it (raw columns): the champion
  scores it through its own fitted feature workflow; the new model's value is the evaluation's
  on the same split (its scores of those rows, through this run's workflow);
- with ``holdout:``, a labelled file both models score through their exported folders, read
  as ``pipeline predict`` reads input (the columns each model was fitted on, their types checked).

The decision, in the metric's direction (``HIGHER_IS_BETTER``):

- no champion yet: promoted (``first``);
- a champion whose run is gone, did not succeed, is corrupt or whose model cannot be loaded,
  or one of another task or target: kept, with the reason and a warning. The gate never
  replaces what it cannot compare with; a person decides (``pipeline runs promote RUN``);
- otherwise ``min_improvement`` (default 0: not worse, a tie promotes the fresher model):
  promoted when new - champion >= min_improvement (champion - new for losses); or
  ``max_regression``: promoted unless the new model is worse by more than it.

The decision and its numbers go to ``promote/promotion.json`` and to the stage's facts
(``promotion``); a promotion adds ``aliases: [champion]`` to the facts, and the runner points
the alias at the run once the whole run has succeeded, so a run that fails after this stage
leaves the champion where it was. The stage is never cached: its decision depends on where
the champion points when it runs, which no cache key of its inputs covers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator

from pipeline.backends.headers import HeaderReader
from pipeline.core.errors import ConfigError, ConfigIssue, DataError, PipelineError, input_not_found
from pipeline.core.problems import Task
from pipeline.metrics import ALL_METRICS, HIGHER_IS_BETTER, known_metric, metric_task_problem, task_metrics
from pipeline.runs.history import alias_target
from pipeline.runs.layout import CHAMPION, MODEL_DESCRIPTION, MODELS_DIR, RunLayout
from pipeline.runs.record import read_manifest
from pipeline.scoring.input_rows import input_files, read_input, training_read_options
from pipeline.scoring.model_folder import SavedModel, load_model
from pipeline.scoring.run_models import OpenedRun, open_run
from pipeline.stages.evaluate import Evaluation, resolve_rank_by
from pipeline.stages.export import ExportedFiles
from pipeline.stages.spec import ColumnRef, KeyPath, Preview, StageContext, StageSpec, register_stage
from pipeline.stages.split import SplitData, task_labels

__all__ = ["PROMOTION_FILE", "Promotion", "PromoteSpec", "decide_promotion", "wiring_problems"]

PROMOTION_FILE = "promotion.json"
PROMOTED, KEPT = "promoted", "kept"
# Differences this small are rounding, not a model being better or worse (two runs of one
# config on one machine give equal scores; summed in another order they differ in the last bits).
_ROUNDING = 1e-12


def _metric_schema(schema: dict[str, Any]) -> None:
    schema["enum"] = [*ALL_METRICS, None]


class PromoteSpec(StageSpec):
    kind: Literal["promote"]
    metric: str | None = Field(None, json_schema_extra=_metric_schema, description=(
        "Metric the new model and the champion are compared by (its direction is known). Default: the "
        "evaluation's rank_by."))
    min_improvement: float | None = Field(None, ge=0, allow_inf_nan=False, description=(
        "Promote only when the new model beats the champion by at least this much of the metric, in its "
        "direction. Default 0 when max_regression is not set: not worse (a tie promotes the newer model)."))
    max_regression: float | None = Field(None, ge=0, allow_inf_nan=False, description=(
        "Instead of min_improvement: promote unless the new model is worse than the champion by more than this."))
    holdout: str | None = Field(None, min_length=1, description=(
        "A labelled CSV or Parquet file (or a folder of them) both models are scored on, read as pipeline "
        "predict reads input. Default: this run's test split (the split stage must be among the inputs)."))
    min_inputs = 1

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, metric: str | None) -> str | None:
        return known_metric(metric)

    @field_validator("max_regression")
    @classmethod
    def _one_rule(cls, max_regression: float | None, info: ValidationInfo) -> float | None:
        if max_regression is not None and info.data.get("min_improvement") is not None:
            raise ValueError("min_improvement and max_regression are two rules for one decision: set one of them")
        return max_regression

    def task_problems(self, task: str) -> list[tuple[KeyPath, str]]:
        """A ``metric`` of another task than the split's (known when the split declares it)."""
        problem = metric_task_problem(self.metric, task)
        return [(("metric",), problem)] if problem else []

    def columns_read(self, inputs: Mapping[str, Preview], headers: HeaderReader) -> list[ColumnRef]:
        """The ``holdout`` file must exist (a missing one is a ``DataError`` naming it, exit 3, as
        a load's) and hold the split's target, checked against its header when it is one file."""
        if self.holdout is None:
            return []
        path = Path(self.holdout)
        if not path.exists():
            raise input_not_found(path)
        target = next((p.target for p in inputs.values() if p.target is not None), None)
        if path.is_dir() or target is None or not path.is_file() or path.suffix.lower() not in (".csv", ".parquet",
                                                                                                ".pq"):
            return []
        found = headers.columns(self.holdout)
        return [ColumnRef(("holdout",), target, "holdout's target column", among=found)] if found is not None else []

    def input_problems(self, produced: Sequence[type]) -> list[str]:
        """The wiring, checked before any data is read (unknown outputs, a ``python`` stage's,
        leave it to the run)."""
        if any(t is object for t in produced):
            return []
        return wiring_problems(produced, holdout=self.holdout is not None)

    def rule(self) -> tuple[float | None, float | None]:
        """``(min_improvement, max_regression)`` as decided: min_improvement 0 when neither is set."""
        if self.max_regression is not None:
            return None, self.max_regression
        return (self.min_improvement or 0.0), None


@dataclass
class Promotion:
    """The gate's decision (the stage's output and, as a dict, its ``promotion`` fact)."""

    decision: str                       # "promoted" | "kept"
    reason: str
    metric: str
    new: dict[str, Any]                 # {"run_id", "model", "value"}
    champion: dict[str, Any] | None     # the same for the champion compared with; None: none usable
    rows: int
    min_improvement: float | None
    max_regression: float | None

    @property
    def promoted(self) -> bool:
        return self.decision == PROMOTED

    def to_dict(self) -> dict[str, Any]:
        return {"decision": self.decision, "reason": self.reason, "metric": self.metric, "new": self.new,
                "champion": self.champion, "rows": self.rows, "min_improvement": self.min_improvement,
                "max_regression": self.max_regression}


def decide_promotion(metric: str, new: float, champion: float | None, *, min_improvement: float | None = 0.0,
                     max_regression: float | None = None) -> tuple[str, str]:
    """``(decision, reason)`` for the new model's value against the champion's (None: there is
    no champion), in ``metric``'s direction."""
    if champion is None:
        return PROMOTED, "first: there is no champion yet"
    if not math.isfinite(new):
        return KEPT, f"the new model's {metric} is not a number on these rows"
    if not math.isfinite(champion):
        return PROMOTED, f"the champion's {metric} is not a number on these rows, the new model's is"
    gain = (new - champion) if HIGHER_IS_BETTER[metric] else (champion - new)
    direction = "higher" if HIGHER_IS_BETTER[metric] else "lower"
    told = f"{metric} {new:.6g} against the champion's {champion:.6g} ({direction} is better)"
    if max_regression is not None:
        if gain >= -max_regression - _ROUNDING:
            return PROMOTED, f"not worse than the champion by more than {max_regression:g}: {told}"
        return KEPT, f"worse than the champion by {-gain:.6g}, more than max_regression {max_regression:g}: {told}"
    needed = min_improvement or 0.0
    if gain >= needed - _ROUNDING:
        return PROMOTED, f"better than the champion by {gain:.6g}, at least min_improvement {needed:g}: {told}"
    return KEPT, f"improvement {gain:.6g} is less than min_improvement {needed:g}: {told}"


@dataclass
class _Inputs:
    evaluation: Evaluation
    split: SplitData | None
    exported: list[ExportedFiles]


def wiring_problems(produced: Sequence[type], *, holdout: bool) -> list[str]:
    """What is wrong with inputs producing ``produced``: one evaluation, at most one split (none
    needed with a holdout) and at least one export. Checked at validation
    (``PromoteSpec.input_problems``) and again on the outputs when the stage runs."""
    def count(kind: type) -> int:
        return sum(1 for t in produced if isinstance(t, type) and issubclass(t, kind))

    problems = []
    if count(Evaluation) != 1:
        problems.append(f"promote needs exactly one evaluate stage among its inputs (the evaluation it gates on), "
                        f"got {count(Evaluation)}")
    if count(SplitData) > 1:
        problems.append(f"promote takes at most one split stage (the rows both models are scored on), "
                        f"got {count(SplitData)}")
    if not count(SplitData) and not holdout:
        problems.append("promote needs the split stage among its inputs (both models are scored on its test rows) "
                        "or a holdout: file")
    if not count(ExportedFiles):
        problems.append("promote needs the export stage that saves the evaluation's best model among its inputs "
                        "(a champion is a run whose best model can be served)")
    return problems


def _sorted_inputs(stage: str, inputs: dict[str, Any], spec: PromoteSpec) -> _Inputs:
    """The evaluation, the split and the exports among ``inputs`` (the kind accepts these types)."""
    problems = wiring_problems([type(v) for v in inputs.values()], holdout=spec.holdout is not None)
    if problems:
        raise ConfigError([ConfigIssue(f"stages.{stage}.inputs", p) for p in problems])
    values = list(inputs.values())
    split = next((v for v in values if isinstance(v, SplitData)), None)
    return _Inputs(next(v for v in values if isinstance(v, Evaluation)), split,
                   [v for v in values if isinstance(v, ExportedFiles)])


def _new_model_folder(stage: str, best: str, exported: list[ExportedFiles], run_dir: Path) -> Path:
    """The folder ``best`` is in, in this run's folder (``run_dir``). An export taken from the
    cache names the files of the run that first wrote them, which may since have been pruned or
    moved with its project: this run holds the same files under the export stage's folder."""
    for files in exported:
        for written in files:
            path = PurePosixPath(Path(written).as_posix())
            if path.name == MODEL_DESCRIPTION and path.parent.name == best and path.parent.parent.name == MODELS_DIR:
                return run_dir / path.parent.parent.parent.name / MODELS_DIR / best
    raise ConfigError([ConfigIssue(f"stages.{stage}.inputs", (
        f"the evaluation's best model '{best}' is not exported by the export stage(s) among promote's inputs; "
        "export it (models: true) so the champion can be served"))])


def _champion(pipeline_dir: Path, run_id: str, backend: str) -> tuple[OpenedRun | None, str | None]:
    """The champion's model, or ``(None, why it cannot be used)``; ``(None, None)``: no champion."""
    target = alias_target(pipeline_dir, CHAMPION)
    if target is None:
        return None, None
    if target == run_id:
        return None, f"'{pipeline_dir / CHAMPION}' points to this run already"
    run_dir = pipeline_dir / target
    if not run_dir.is_dir():
        return None, f"the champion run {target} is gone ('{pipeline_dir / CHAMPION}' points to a missing folder)"
    try:
        return open_run(run_dir, device=backend), None
    except PipelineError as exc:
        return None, f"the champion run {target} cannot be used: {exc}"


def _mismatch(champion: OpenedRun, task: Task, target: str | None) -> str | None:
    """Why the champion does not predict what the new model predicts, or None."""
    if champion.saved.task.to_dict() != task.to_dict():
        return (f"the champion ({champion.run_id}, {champion.name}) is {champion.saved.task.describe()}, the new "
                f"model {task.describe()}")
    theirs = champion.saved.meta.get("target")
    if target is not None and theirs is not None and theirs != target:
        return f"the champion ({champion.run_id}, {champion.name}) predicts '{theirs}', the new model '{target}'"
    return None


def _test_rows(split: SplitData) -> Any:
    frame = split.frames.get("test")
    if frame is None:
        raise DataError("promote: the split has no test rows to compare the models on; give the split a test: "
                        "share or the promote stage a holdout: file")
    if split.partitioned:
        from pipeline.backends import compute_lazy

        (frame,) = compute_lazy(frame)
    if not len(frame):
        raise DataError("promote: the split's test rows are empty; give the split a test: share or the promote "
                        "stage a holdout: file")
    return frame


def _new_value_on_test(evaluation: Evaluation, best: str, metric: str) -> float:
    """The evaluation's value of ``metric`` for ``best`` on the test split."""
    values = evaluation.metrics if evaluation.split == "test" else (evaluation.splits.get("test") or {})
    value = (values.get(best) or {}).get(metric)
    if value is None:
        raise DataError(f"promote: the evaluation has no {metric} of '{best}' on the test split; evaluate the "
                        "test split (splits: [test] or split: test)")
    return float(value)


def _own_read_options(run_dir: Path, model: str) -> dict[str, Any]:
    """How this run read the rows ``model`` trained on (its ``na_values``, dtypes, dates, CSV
    dialect), from the record its stages have written so far: the holdout of a first promotion,
    with no champion's to use, is read as ``pipeline predict`` would read it for this run."""
    try:
        return training_read_options(run_dir, read_manifest(run_dir), model)
    except PipelineError:
        return {"na_values": [], "dtypes": {}, "dates": {}}


def _read_holdout(files: list[tuple[Path, str]], target: str, models: list[SavedModel], ctx: StageContext,
                  read: dict[str, Any]) -> Any:
    """The holdout's rows with every column the models read and the target, checked like
    ``pipeline predict``'s input (the first model's fitted type wins a column both read)."""
    from pipeline.backends.input_files import read_header

    for file, fmt in files:
        if target not in read_header(file, fmt):
            raise DataError(f"promote: holdout {file} has no target column '{target}' to score the models against")
    fitted: dict[str, str] = {}
    for saved in reversed(models):
        fitted.update(saved.workflow.input_columns_)
    fitted.pop(target, None)
    return read_input(files, fitted, ctx.backend, id_column=target, na_values=read["na_values"] or None,
                      dtypes=read["dtypes"], dates=read["dates"])


def _columns_missing(champion: OpenedRun, files: list[tuple[Path, str]]) -> str | None:
    """Why the champion cannot read the holdout (columns it was fitted on that a file lacks), or None."""
    from pipeline.backends.input_files import read_header

    for file, fmt in files:
        missing = [c for c in champion.saved.workflow.input_columns_ if c not in set(read_header(file, fmt))]
        if missing:
            return f"the champion ({champion.run_id}, {champion.name}) reads column(s) {missing} that holdout {file} lacks"
    return None


# The champion ranking this run's test rows below chance: the rows' labels, not the champion,
# are what changed (an extract whose Yes/No were swapped scored the champion 0.18 and promoted a
# model that ranks customers backwards, 0.15 on the true labels).
CHANCE = {"roc_auc": 0.5}


def _suspect_rows(metric: str, champion_value: float | None, champion: OpenedRun | None) -> str | None:
    """Why this run's own test rows cannot judge the champion, or None."""
    chance = CHANCE.get(metric)
    if chance is None or champion is None or champion_value is None or not champion_value < chance:
        return None
    return (f"the champion ({champion.run_id}, {champion.name}) scores {metric} {champion_value:.4f} on this run's "
            f"test rows, below chance ({chance:g}): their labels look inverted or scrambled (a bad extract), so "
            "they cannot judge either model; compare on a fixed labelled file with holdout:")


def _value(saved: SavedModel, frame: Any, labels: np.ndarray, task: Task, metric: str, threshold: float) -> float:
    return float(task_metrics(task, labels, saved.score(frame), threshold=threshold)[metric])


def _fingerprint(spec: PromoteSpec) -> None:
    """Never cached: the decision depends on where ``champion`` points when the stage runs."""
    return None


@register_stage("promote", PromoteSpec, produces=Promotion, accepts=(Evaluation, SplitData, ExportedFiles),
                fingerprint=_fingerprint)
def run_promote(spec: PromoteSpec, ctx: StageContext, inputs) -> Promotion:
    got = _sorted_inputs(ctx.stage, dict(inputs), spec)
    evaluation = got.evaluation
    task, best = evaluation.task, evaluation.best
    metric = resolve_rank_by(spec.metric or evaluation.rank_by, task, where=f"stages.{ctx.stage}.metric")
    if ctx.artifacts_dir is None:
        raise ConfigError([ConfigIssue(f"stages.{ctx.stage}", "promote compares with the pipeline's champion run: "
                                                              "run it inside a pipeline run (pipeline run), which "
                                                              "has a run folder")])
    run = RunLayout(ctx.artifacts_dir.parent)
    new_folder = _new_model_folder(ctx.stage, best, got.exported, run.path)
    pipeline_dir = run.path.parent
    champion, unusable = _champion(pipeline_dir, run.run_id, ctx.backend.name)
    new_saved = None
    if spec.holdout is not None:
        # This run's manifest is signed (with a key set) only when the run ends: its own folder is
        # the one its export wrote moments ago, so there is no signature to check it against yet.
        new_saved = load_model(new_folder, device=ctx.backend.name, verify_signature=False)
    target = got.split.target if got.split is not None else (new_saved.meta.get("target") if new_saved else None)
    if not isinstance(target, str):
        raise DataError(f"promote: {new_folder / MODEL_DESCRIPTION} names no target column to read from the holdout")
    if champion is not None:
        unusable = _mismatch(champion, task, target)
        if unusable is not None:
            champion = None

    threshold = evaluation.threshold
    if new_saved is None:
        assert got.split is not None
        frame = _test_rows(got.split)
        labels = np.asarray(ctx.backend.to_host(frame[target]))
        new_value = _new_value_on_test(evaluation, best, metric)
    else:
        assert spec.holdout is not None
        files = input_files(spec.holdout)
        if champion is not None:
            unusable = _columns_missing(champion, files)
            if unusable is not None:
                champion = None
        read = champion.read if champion is not None else _own_read_options(run.path, best)
        frame = _read_holdout(files, target, [new_saved] + ([champion.saved] if champion else []), ctx, read)
        labels = np.asarray(ctx.backend.to_host(task_labels(frame[target], task, ctx.backend, column=target)))
        new_value = _value(new_saved, frame, labels, task, metric, threshold)
    rows = len(frame)
    champion_value = None
    if champion is not None:
        try:
            champion_value = _value(champion.saved, frame, labels, task, metric, threshold)
        except Exception as exc:  # noqa: BLE001 - a champion that cannot score is a reason to keep, not to fail the run
            unusable = f"the champion ({champion.run_id}, {champion.name}) cannot score these rows: " \
                       f"{type(exc).__name__}: {exc}"
            champion = None

    min_improvement, max_regression = spec.rule()
    if unusable is None and spec.holdout is None:
        unusable = _suspect_rows(metric, champion_value, champion)
    if unusable is not None:
        decision, reason = KEPT, f"{unusable}; the champion stays where it is (move it with pipeline runs promote)"
        ctx.logger.warning("%s: %s", ctx.stage, reason)
    else:
        decision, reason = decide_promotion(metric, new_value, champion_value, min_improvement=min_improvement,
                                            max_regression=max_regression)
    promotion = Promotion(
        decision=decision, reason=reason, metric=metric,
        new={"run_id": run.run_id, "model": best, "value": _plain(new_value)},
        champion=None if champion is None else {"run_id": champion.run_id, "model": champion.name,
                                                "value": _plain(champion_value)},
        rows=int(rows), min_improvement=min_improvement, max_regression=max_regression)
    _record(promotion, spec, ctx)
    return promotion


def _plain(value: float | None) -> float | None:
    """A JSON number, or None for a value that is not one (NaN: an AUC on one-class rows)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _record(promotion: Promotion, spec: PromoteSpec, ctx: StageContext) -> None:
    """promotion.json, the stage's facts (with the alias the runner moves) and the log line."""
    from pipeline.runs.store import atomic_write_json

    decided = promotion.to_dict()
    atomic_write_json(ctx.artifact_path(PROMOTION_FILE), {
        **decided, "rows_from": spec.holdout or "test split",
        "higher_is_better": HIGHER_IS_BETTER[promotion.metric]})
    ctx.facts["promotion"] = decided
    if promotion.promoted:
        ctx.facts["aliases"] = [CHAMPION]
    champion = promotion.champion
    against = (f"champion {champion['model']} of run {champion['run_id']}: {champion['value']}"
               if champion else "no champion")
    ctx.logger.info("%s: %s %s of run %s (%s %s against %s, on %d rows): %s", ctx.stage, promotion.decision,
                    promotion.new["model"], promotion.new["run_id"], promotion.metric, promotion.new["value"],
                    against, promotion.rows, promotion.reason)
