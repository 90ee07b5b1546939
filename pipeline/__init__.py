"""pipeline: a YAML-defined DAG for tabular machine learning on GPUs (cuDF, cuML) or CPUs.

Library use::

    from pipeline import load_config, run_pipeline
    result = run_pipeline("configs/churn.yaml", overrides=["device=cpu"])
    print(result.evaluation.best, result.manifest.metrics)

    from pipeline import FeatureWorkflow
    from pipeline.features import OneHot, Standardize
    wf = FeatureWorkflow([OneHot(columns=["Contract"]), Standardize(columns=["tenure"])])
    X = wf.fit_transform(train_df)

Names are imported on first use (PEP 562), so ``pipeline --version`` and ``pipeline doctor``
do not pay for pandas and scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from pipeline.core.host_memory import arrow_pool_before_load
from pipeline.version import __version__

# Before pandas loads pyarrow, whose C++ readers pick their allocator once (core.host_memory).
arrow_pool_before_load()

_EXPORTS = {
    "PipelineConfig": "pipeline.config",
    "load_config": "pipeline.config",
    "BackendUnavailable": "pipeline.core.errors",
    "BudgetError": "pipeline.core.errors",
    "ConfigError": "pipeline.core.errors",
    "DataError": "pipeline.core.errors",
    "ExitCode": "pipeline.core.errors",
    "LockTimeout": "pipeline.core.errors",
    "OutOfMemory": "pipeline.core.errors",
    "PipelineError": "pipeline.core.errors",
    "StageError": "pipeline.core.errors",
    "StorageError": "pipeline.core.errors",
    "UsageError": "pipeline.core.errors",
    "Settings": "pipeline.core.settings",
    "FeatureWorkflow": "pipeline.features",
    "RunOptions": "pipeline.engine.run_options",
    "RunResult": "pipeline.engine.runner",
    "Runner": "pipeline.engine.runner",
    "run_pipeline": "pipeline.engine.runner",
}

__all__ = ["__version__", *sorted(_EXPORTS)]

if TYPE_CHECKING:
    from pipeline.config import PipelineConfig, load_config
    from pipeline.core.errors import (
        BackendUnavailable,
        BudgetError,
        ConfigError,
        DataError,
        ExitCode,
        LockTimeout,
        OutOfMemory,
        PipelineError,
        StageError,
        StorageError,
        UsageError,
    )
    from pipeline.core.settings import Settings
    from pipeline.engine.run_options import RunOptions
    from pipeline.engine.runner import Runner, RunResult, run_pipeline
    from pipeline.features import FeatureWorkflow


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
