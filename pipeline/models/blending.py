"""An ensemble: a weighted average of other models' scores, saved as its members' own files.

The ``ensemble`` stage fits the weights; this module holds what outlives the run: the
estimator (``Ensemble``: members and weights), how scores are blended (``blend``, the same
arithmetic in the run and in ``predict``) and the file format. The format writes each member
with its own registry format into ``members/<name>/`` beside a ``model.json`` like the one
``export`` writes for a model on its own, plus ``ensemble.json`` (members and weights), and
lists every member file in the ensemble's ``files``, so ``predict`` verifies all of them
against the run's checksums before any is read.

The format finds a member's format by its registry name through the lookup it is given
(``EnsembleFormat(format_of)``): the registry imports this module for its entry, so this module
cannot import the registry back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.core.errors import DataError
from pipeline.models.formats import ModelFormat, Predictor
from pipeline.core.problems import BINARY, Task

if TYPE_CHECKING:
    from pipeline.backends import Backend

__all__ = ["MEMBERS_DIR", "META_DIR", "Bagged", "BaggedFormat", "Ensemble", "EnsembleFormat", "EnsembleMember",
           "EnsemblePredictor", "StackFormat", "StackPredictor", "Stacked", "blend", "stack_columns", "stack_matrix"]

# Member folders inside an exported ensemble: members/<member name>/.
MEMBERS_DIR = "members"
# The meta-model's folder inside an exported stack.
META_DIR = "meta"
# A member's name becomes a folder name: a plain name only (stage names are).
_MEMBER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# Fitted weights are rounded sums of floats: this far from 1 is still a distribution.
WEIGHT_SUM_TOLERANCE = 1e-6


@dataclass
class EnsembleMember:
    """One model of an ensemble: what its registry format needs to save it, and its weight."""

    name: str
    model: str                       # registry name: its format writes and reads the member's files
    estimator: Any
    weight: float
    # The member's model.json keys beyond its files (task, features, categorical columns...).
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class Ensemble:
    """The estimator of an ensemble model: its members, with weights that sum to 1."""

    members: list[EnsembleMember]
    task: Task = BINARY

    @property
    def weights(self) -> dict[str, float]:
        return {member.name: member.weight for member in self.members}


def blend(scores: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    """The weighted average of score arrays (vectors, or ``n x K`` matrices for multiclass),
    host float64; the weights are used as given (they sum to 1). Callers leave members of
    weight 0 out, so a model the fit dropped is not even scored."""
    if not len(scores):
        raise ValueError("an ensemble needs at least one member with a weight above 0")
    total = float(weights[0]) * np.asarray(scores[0], dtype="float64")
    for score, weight in zip(scores[1:], weights[1:], strict=True):
        total = total + float(weight) * np.asarray(score, dtype="float64")
    return total


@dataclass
class EnsemblePredictor:
    """Scores of the members' predictors, averaged with the ensemble's weights (members of
    weight 0 are not scored)."""

    predictors: list[Predictor]
    weights: list[float]

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        used = [(predictor, weight) for predictor, weight in zip(self.predictors, self.weights) if weight > 0]
        return blend([predictor(X, codes) for predictor, _ in used], [weight for _, weight in used])


@dataclass
class ColumnsPredictor:
    """A member that reads some of its ensemble's columns (``auto`` gives CatBoost a category
    column's codes and the other members its target encoding): its columns of the matrix, and
    its categorical ones of the code matrix, in the order it was trained on."""

    predictor: Predictor
    columns: list[int]
    code_columns: list[int]

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        mine = codes[:, self.code_columns] if codes is not None and self.code_columns else None
        return self.predictor(X[:, self.columns], mine)


def member_columns(member: dict[str, Any], whole: dict[str, Any], where: Path) -> tuple[list[int], list[int]] | None:
    """Where a member's columns (its model.json ``features`` and ``categorical_columns``) are in
    its ensemble's (``whole``); None when it reads them all, as they are. A ``DataError``
    naming ``where`` when it names a column the ensemble does not have."""
    mine, columns = member.get("features"), whole.get("features")
    if not mine or not columns or list(mine) == list(columns):
        return None
    index = {str(name): i for i, name in enumerate(columns)}
    codes = {str(name): i for i, name in enumerate(whole.get("categorical_columns") or [])}
    my_codes = [str(name) for name in member.get("categorical_columns") or []]
    unknown = [name for name in mine if str(name) not in index] + [name for name in my_codes if name not in codes]
    if unknown:
        raise DataError(f"{where}: the member reads column(s) {unknown} that its ensemble's model.json does not "
                        "list; it was not loaded")
    return [index[str(name)] for name in mine], [codes[name] for name in my_codes]


class EnsembleFormat(ModelFormat):
    """``ensemble.json`` (members, weights, task) and each member's own files under
    ``members/<name>/``; ``format_of(model)`` is the registry entry's format of a member."""

    name = "ensemble"

    def __init__(self, format_of: Callable[[str], ModelFormat], filename: str = "ensemble.json") -> None:
        self.format_of = format_of
        self.filename = filename

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_write_json

        members: list[EnsembleMember] = list(estimator.members)
        written: list[Path] = []
        for member in members:
            written += self._save_member(member, folder / MEMBERS_DIR / _member_name(member.name), backend)
        path = folder / self.filename
        atomic_write_json(path, {
            "task": estimator.task.to_dict(),
            "members": [{"name": m.name, "model": m.model, "weight": float(m.weight)} for m in members],
        })
        return [path, *written], {"file": path.name}

    def _save_member(self, member: EnsembleMember, folder: Path, backend: Backend) -> list[Path]:
        """The member's files through its own format, and its model.json beside them."""
        from pipeline.runs.store import atomic_write_json

        model_format = self._member_format(member.model, member.name)
        folder.mkdir(parents=True, exist_ok=True)
        files, extra = model_format.save(member.estimator, folder, backend=backend)
        meta = {**member.meta, "name": member.name, "model": member.model, **extra, "format": model_format.name,
                "files": [path.relative_to(folder).as_posix() for path in files]}
        atomic_write_json(folder / "model.json", meta)
        return [*files, folder / "model.json"]

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        listed = set(self.files(meta))
        # Members the fit gave no weight are not read at all (predict verifies their files all the same).
        used = [entry for entry in self._read_members(self.main_file(folder, meta)) if entry["weight"] > 0]
        predictors = [self._load_member(folder, f"{MEMBERS_DIR}/{entry['name']}", listed, backend, within=meta)
                      for entry in used]
        return EnsemblePredictor(predictors, [entry["weight"] for entry in used])

    def _read_members(self, file: Path) -> list[dict[str, Any]]:
        """The members of ``ensemble.json``, each a plain name with a weight; the weights a
        distribution (non-negative, summing to 1)."""
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            members = [{"name": _member_name(str(m["name"])), "weight": float(m["weight"])} for m in body["members"]]
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{file}: not a readable ensemble description ({type(exc).__name__}: {exc})") from None
        weights = np.asarray([m["weight"] for m in members], dtype="float64")
        if not members or not np.isfinite(weights).all() or (weights < 0).any() \
                or abs(weights.sum() - 1.0) > WEIGHT_SUM_TOLERANCE:
            raise DataError(f"{file}: ensemble weights must be non-negative numbers that sum to 1 "
                            f"(got {weights.tolist()})")
        return members

    def _load_member(self, folder: Path, relative: str, listed: set[str], backend: Backend | None,
                     within: dict[str, Any] | None = None) -> Predictor:
        """The predictor of the member saved in ``folder``/``relative``, once every file it names
        is one the ensemble lists (so ``predict`` verified it against the run's checksums);
        reading its own columns of the matrix of ``within`` (the ensemble's model.json) when
        given (a meta-model reads the members' scores instead)."""
        name = relative
        meta_path = folder / relative / "model.json"
        if f"{relative}/model.json" not in listed:
            raise DataError(f"{folder}: member '{name}' is not among the ensemble's files; it was not loaded")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            model_format = self._member_format(str(meta["model"]), name)
            files = model_format.files(meta)
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{meta_path}: not a model description ({type(exc).__name__}: {exc})") from None
        unlisted = [f for f in files if f"{relative}/{f}" not in listed]
        if unlisted:
            raise DataError(f"{folder}: member '{name}' names file(s) {unlisted} that the ensemble does not list; "
                            "it was not loaded")
        predictor = model_format.load(folder / relative, meta, backend=backend)
        columns = member_columns(meta, within, meta_path) if within is not None else None
        return predictor if columns is None else ColumnsPredictor(predictor, *columns)

    def _member_format(self, model: str, member: str) -> ModelFormat:
        try:
            return self.format_of(model)
        except KeyError as exc:
            raise DataError(f"ensemble member '{member}': {exc.args[0]}; if a plugin registers model '{model}', "
                            "load that plugin") from None


@dataclass
class Bagged(Ensemble):
    """The estimator of a bagged model: one registry model fitted k times, each on all but one
    of k folds of the training rows, its scores the members' plain average (weights 1/k)."""


class BaggedFormat(EnsembleFormat):
    """A bagged model: an ensemble of equal weights, saved as one (``bagged.json`` and each
    member in its base model's format under ``members/<i>/``); its own name in model.json."""

    name = "bagged"

    def __init__(self, format_of: Callable[[str], ModelFormat], filename: str = "bagged.json") -> None:
        super().__init__(format_of, filename)


@dataclass
class Stacked:
    """The estimator of a stacked model: the members whose scores are the meta-model's
    features (``stack_matrix``), and the meta-model fitted on their out-of-fold scores."""

    members: list[EnsembleMember]
    meta: EnsembleMember
    passthrough: bool = False
    task: Task = BINARY


def stack_matrix(scores: Sequence[np.ndarray], task: Task, X: Any = None) -> np.ndarray:
    """The meta-model's features from the members' scores: one column per member (binary,
    regression) or one per class per member (multiclass), then ``X`` (host, the model's own
    features) when the stack passes them through. Host float32, like every feature matrix;
    the run and ``predict`` both build it here, so they feed the meta-model the same numbers."""
    if not len(scores):
        raise ValueError("a stack needs at least one member")
    rows = len(scores[0])
    width = task.n_outputs if task.kind == "multiclass" else 1
    parts = [np.asarray(score, dtype="float64").reshape(rows, width) for score in scores]
    if X is not None:
        parts.append(np.asarray(X, dtype="float32").reshape(rows, -1))
    return np.ascontiguousarray(np.hstack(parts), dtype="float32")


def stack_columns(members: Sequence[str], task: Task, features: Sequence[str] = ()) -> list[str]:
    """Names of ``stack_matrix``'s columns: ``<member>`` or ``<member>_<class>``, then ``features``."""
    if task.kind == "multiclass":
        names = [f"{member}_{value}" for member in members for value in task.classes]
    else:
        names = list(members)
    return [*names, *features]


@dataclass
class StackPredictor:
    """The members' scores of the rows, made the meta-model's features (``stack_matrix``), scored
    by the meta-model's predictor."""

    predictors: list[Predictor]
    meta: Predictor
    passthrough: bool
    task: Task

    def __call__(self, X: Any, codes: Any) -> np.ndarray:
        from pipeline.backends import backend_for

        backend = backend_for(X)
        scores = [predictor(X, codes) for predictor in self.predictors]
        matrix = stack_matrix(scores, self.task, backend.to_host(X) if self.passthrough else None)
        return self.meta(backend.asarray(matrix), None)


class StackFormat(EnsembleFormat):
    """``stack.json`` (members, task, passthrough, the meta-model's columns), each member in its
    own format under ``members/<name>/`` and the meta-model in its own under ``meta/``: a
    stack of stacks nests the same way, and every file is listed for ``predict`` to verify."""

    name = "stacked"

    def __init__(self, format_of: Callable[[str], ModelFormat], filename: str = "stack.json") -> None:
        super().__init__(format_of, filename)

    def save(self, estimator: Any, folder: Path, *, backend: Backend) -> tuple[list[Path], dict[str, Any]]:
        from pipeline.runs.store import atomic_write_json

        stacked: Stacked = estimator
        written: list[Path] = []
        for member in stacked.members:
            written += self._save_member(member, folder / MEMBERS_DIR / _member_name(member.name), backend)
        written += self._save_member(stacked.meta, folder / META_DIR, backend)
        path = folder / self.filename
        atomic_write_json(path, {
            "task": stacked.task.to_dict(), "passthrough": bool(stacked.passthrough),
            "members": [{"name": m.name, "model": m.model} for m in stacked.members],
            "meta": {"model": stacked.meta.model, "columns": list(stacked.meta.meta.get("features") or [])},
        })
        return [path, *written], {"file": path.name}

    def load(self, folder: Path, meta: dict[str, Any], *, backend: Backend | None) -> Predictor:
        listed = set(self.files(meta))
        file = self.main_file(folder, meta)
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            names = [_member_name(str(m["name"])) for m in body["members"]]
            passthrough = bool(body.get("passthrough", False))
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise DataError(f"{file}: not a readable stack description ({type(exc).__name__}: {exc})") from None
        if not names:
            raise DataError(f"{file}: a stack needs at least one member")
        from pipeline.models.formats import task_of

        predictors = [self._load_member(folder, f"{MEMBERS_DIR}/{name}", listed, backend, within=meta)
                      for name in names]
        return StackPredictor(predictors, self._load_member(folder, META_DIR, listed, backend), passthrough,
                              task_of(folder, meta))


def _member_name(name: str) -> str:
    """A member name that is safe as one folder name (no separators, no '..')."""
    if not _MEMBER_NAME.fullmatch(name):
        raise DataError(f"ensemble member name {name!r} is not a plain name (letters, digits, _ . -)")
    return name
