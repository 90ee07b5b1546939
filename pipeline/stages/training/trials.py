"""Tuning trials: what one trial trains, how it reports for pruning, and where it runs.

``pipeline.stages.training.tuning`` drives the search; this module runs its trials. A trainer fits a
stage's model with a trial's params (``RegistryTrainer`` for ``train`` stages, ``TorchTrainer``
for ``torch``); the stage modules import the tuning modules, so they pass their training
function in, and functions pickle by name, so trainers travel to Dask workers as they are.
``run_trial`` scores one trial, here or as a Dask task, and returns its failure as its outcome.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from pipeline.core.interrupts import raise_if_stopped
from pipeline.featuresets import FeatureSet
from pipeline.featuresets.folds import HELD_OUT, SCORED, without_validation
from pipeline.metrics import task_metrics
from pipeline.models import get_model_spec


# ------------------------------------------------------------------ what a trial trains
class Report(Protocol):
    """Called with a training step's validation value; raises ``optuna.TrialPruned`` to stop."""

    def __call__(self, step: int, value: float, *, higher_is_better: bool) -> None: ...


class Trainer(Protocol):
    """Trains a stage's model with a trial's params (``fold_scores``: on a cross-validation
    fold, as the stage's own cross-validation does); ``pruning_signal`` says what it reports
    while training (None: it cannot be pruned). ``params`` are the stage's own (what trial 0,
    the baseline, trains); ``default_scoring`` is how trials are scored when ``tune.scoring``
    is not given ("cv" or "valid")."""

    warmup_steps: int
    params: dict[str, Any]
    default_scoring: str

    def fit(self, features: FeatureSet, params: dict[str, Any], report: Report | None,
            threads: int | None = None) -> Any: ...

    def fold_scores(self, fold: FeatureSet, params: dict[str, Any], report: Report | None,
                    threads: int | None = None) -> Any: ...

    def pruning_signal(self, features: FeatureSet) -> str | None: ...


@dataclass
class RegistryTrainer:
    """A ``train`` stage's model: ``train`` is ``pipeline.stages.train.train_model``, passed in
    (that module imports this one). A model whose registry entry has ``pruning`` reports its
    evaluation metric each step (XGBoost: each boosting round); the others cannot be pruned."""

    train: Callable[..., Any]
    model: str
    params: dict[str, Any]
    seed: int | None = 42
    external_memory: bool | None = None
    warmup_steps: int = 10
    default_scoring: str = "cv"

    def fit(self, features: FeatureSet, params: dict[str, Any], report: Report | None,
            threads: int | None = None) -> Any:
        merged = {**self.params, **params}
        if threads and features.backend.name == "cpu" and "n_jobs" not in merged and self._takes("n_jobs"):
            merged["n_jobs"] = threads       # a Dask worker's share of the cores (its nanny sets OMP to 1)
        pruning = get_model_spec(self.model).pruning
        extra = pruning.attach(report) if pruning is not None and report is not None and \
            self.pruning_signal(features) else None
        return self.train(features, self.model, merged, seed=self.seed, external_memory=self.external_memory,
                          estimator_kwargs=extra)

    def fold_scores(self, fold: FeatureSet, params: dict[str, Any], report: Report | None,
                    threads: int | None = None) -> Any:
        return self.fit(fold, params, report, threads).scores["valid"]

    def pruning_signal(self, features: FeatureSet) -> str | None:
        """What the model reports each step (its entry's ``pruning``), where a trial has rows
        to report on; None: the trial runs to its end."""
        pruning = get_model_spec(self.model).pruning
        if pruning is None or features.distributed:
            return None
        if not features.rows().get("valid") and not features.fold_count():
            return None
        return pruning.signal

    def _takes(self, param: str) -> bool:
        return param in get_model_spec(self.model).params


@dataclass
class TorchTrainer:
    """A ``torch`` stage's MLP: ``train`` is ``pipeline.stages.torch_mlp.train_torch``; it
    reports the validation loss of each epoch. Trials are scored on the valid split (the split's
    folds without one) unless ``tune.scoring: cv``: a fold trains every epoch without early
    stopping, k times per trial."""

    train: Callable[..., Any]
    params: dict[str, Any]
    seed: int = 42
    warmup_steps: int = 2
    default_scoring: str = "valid"

    def fit(self, features: FeatureSet, params: dict[str, Any], report: Report | None,
            threads: int | None = None) -> Any:
        on_epoch = EpochReport(report) if report is not None else None
        with _torch_threads(threads):
            return self.train(features, seed=self.seed, on_epoch=on_epoch, **{**self.params, **params})

    def fold_scores(self, fold: FeatureSet, params: dict[str, Any], report: Report | None,
                    threads: int | None = None) -> Any:
        """As the stage's cross-validation: every epoch on the fold's fit rows, no early stopping
        on the rows it is scored on (so nothing to report for pruning either)."""
        return self.fit(without_validation(fold), params, None, threads).scores[HELD_OUT]

    def pruning_signal(self, features: FeatureSet) -> str | None:
        if not features.rows().get("valid") or features.fold_count():
            return None
        return "the validation loss of each epoch"


@dataclass
class EpochReport:
    """``train_torch(on_epoch=...)``: the epoch's validation loss to the trial."""

    report: Report

    def __call__(self, epoch: int, row: dict[str, float]) -> None:
        if "val_loss" in row:
            self.report(epoch, float(row["val_loss"]), higher_is_better=False)


@contextlib.contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    """PyTorch on a Dask worker gets the worker's threads (its nanny set OMP to 1), then back."""
    if not threads or "torch" not in sys.modules:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# ------------------------------------------------------------------ one trial
@dataclass
class TrialOutcome:
    """What one trial came to: COMPLETE with a value, PRUNED at a step, or FAIL with an error."""

    state: str
    value: float | None = None
    seconds: float = 0.0
    note: str | None = None
    error: BaseException | None = None
    worker: str | None = None            # the Dask worker that ran it
    folds: list[float] | None = None     # each fold's value (one: the valid split's), when COMPLETE


def score_trial(trainer: Trainer, features: FeatureSet, params: dict[str, Any], metric: str,
                report: Report | None = None, threads: int | None = None) -> tuple[float, list[float]]:
    """Train with ``params`` and score ``metric``: the mean over the features' folds (each
    fold's score listed; the first fold reports for pruning), or the validation split's (a
    list of one)."""
    source = getattr(features, "folds", None)
    if features.fold_count() and source is not None:
        per_fold = []
        for i in range(source.count):
            fold = source.features(i)
            scores = trainer.fold_scores(fold, params, report if i == 0 else None, threads)
            per_fold.append(float(task_metrics(features.task, fold.labels(SCORED), scores)[metric]))
            del fold
        return float(np.mean(per_fold)), per_fold
    trained = trainer.fit(features, params, report, threads)
    value = float(task_metrics(features.task, features.labels("valid"), trained.scores["valid"])[metric])
    return value, [value]


def run_trial(trainer: Trainer, features: FeatureSet, params: dict[str, Any], metric: str,
              report: Report | None = None) -> TrialOutcome:
    """One trial, here or as a Dask task; its failure is its outcome, not an exception."""
    from optuna import TrialPruned

    worker = _current_worker()
    threads = max(1, int(worker.state.nthreads)) if worker is not None else None
    address = worker.address if worker is not None else None
    started = time.perf_counter()
    try:
        value, per_fold = score_trial(trainer, features, params, metric, report, threads)
    except TrialPruned as exc:
        return TrialOutcome("PRUNED", seconds=time.perf_counter() - started, note=str(exc) or "pruned",
                            worker=address)
    except Exception as exc:  # noqa: BLE001 - a trial's params can fail in any library; the search goes on
        raise_if_stopped()      # the budget's stop or SIGTERM, swallowed by the library: not a failed trial
        return TrialOutcome("FAIL", seconds=time.perf_counter() - started,
                            note=f"{type(exc).__name__}: {exc}", error=exc, worker=address)
    seconds = time.perf_counter() - started
    if not math.isfinite(value):
        return TrialOutcome("FAIL", seconds=seconds, note=f"{metric} is {value} (e.g. one class in the scored rows)",
                            worker=address)
    return TrialOutcome("COMPLETE", value=value, seconds=seconds, worker=address, folds=per_fold)


def _current_worker() -> Any | None:
    """The Dask worker this runs on, or None outside one."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_worker

    try:
        return get_worker()
    except ValueError:
        return None


class TrialPruner:
    """Reports a training's steps to an Optuna trial; raises ``TrialPruned`` when the pruner
    says so. Values are turned so that higher means better exactly when the study maximizes."""

    def __init__(self, trial: Any, maximize: bool) -> None:
        self.trial = trial
        self.maximize = maximize

    def __call__(self, step: int, value: float, *, higher_is_better: bool) -> None:
        from optuna import TrialPruned

        if not math.isfinite(value):
            return
        self.trial.report(value if higher_is_better == self.maximize else -value, step)
        if self.trial.should_prune():
            raise TrialPruned(f"pruned at step {step}")


# ------------------------------------------------------------------ where trials run
class LocalTrials:
    """Trials one after another in this process, pruned as they train."""

    def __init__(self, features: FeatureSet, parallel: int, where: str) -> None:
        self.features = features
        self.parallel = parallel
        self.where = where
        self.prunes = True
        self.remote = False

    def run(self, trainer: Trainer, metric: str, batch: Sequence[tuple[int, dict[str, Any]]],
            pruners: Sequence[Report | None]) -> list[TrialOutcome]:
        return [run_trial(trainer, self.features, params, metric, pruner)
                for (_, params), pruner in zip(batch, pruners)]

    def close(self) -> None:
        pass


class DaskTrials:
    """Trials as Dask tasks on the features scattered once to every worker; not pruned."""

    def __init__(self, client: Any, features: FeatureSet, parallel: int, workers: int) -> None:
        self.client = client
        self.parallel = parallel
        self.where = f"Dask cluster ({workers} workers, {parallel} trials at a time)"
        self.prunes = False
        self.remote = True
        self._features = client.scatter(features, broadcast=True, hash=False)

    def run(self, trainer: Trainer, metric: str, batch: Sequence[tuple[int, dict[str, Any]]],
            pruners: Sequence[Report | None]) -> list[TrialOutcome]:
        futures = [self.client.submit(run_trial, trainer, self._features, params, metric, None,
                                      key=f"tune-trial-{number}-{id(self):x}", pure=False, retries=0)
                   for number, params in batch]
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result())
            except Exception as exc:  # noqa: BLE001 - a lost worker or an unpicklable result fails that trial only
                outcomes.append(TrialOutcome("FAIL", note=f"{type(exc).__name__}: {exc}", error=exc))
        return outcomes

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.cancel([self._features])


def _cluster_client() -> Any | None:
    """The run's Dask client: the worker's when this runs as a task on a cluster, else the
    process's default client; None where there is no cluster."""
    if "distributed" not in sys.modules:
        return None
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        return None


@contextlib.contextmanager
def trial_runner(parallel: int | None, features: FeatureSet) -> Iterator[LocalTrials | DaskTrials]:
    """Where a search's trials run: ``parallel`` at a time on the run's Dask cluster (None: one
    per worker), or one after another here (see ``pipeline.stages.training.tuning``)."""
    if features.distributed:
        # Each trial is itself a fit across the cluster; running several at once would only
        # make them compete for the same workers.
        yield LocalTrials(features, 1, "in this process, each trial a distributed fit on the cluster")
        return
    client = _cluster_client()
    workers = _worker_count(client) if client is not None else 0
    parallel = parallel or max(workers, 1)
    if client is None or parallel == 1:
        where = "in this process" + (f" (batches of {parallel})" if parallel > 1 else "")
        yield LocalTrials(features, parallel, where)
        return
    with _submitting(client) as submitting:
        runner = DaskTrials(submitting, features, parallel, workers)
        try:
            yield runner
        finally:
            runner.close()


def _worker_count(client: Any) -> int:
    from pipeline.backends.clusters.startup import cluster_workers

    try:
        return len(cluster_workers(client))
    except Exception:  # noqa: BLE001 - a client that cannot answer: run here
        return 0


@contextlib.contextmanager
def _submitting(client: Any) -> Iterator[Any]:
    """A client to submit trials with: inside a worker's task, ``worker_client()``, which
    secedes from the worker's thread pool while the trials run (a one-thread worker would
    otherwise wait on its own busy thread)."""
    from distributed import get_worker, worker_client

    try:
        get_worker()
    except ValueError:
        yield client
        return
    with worker_client() as inner:
        yield inner
