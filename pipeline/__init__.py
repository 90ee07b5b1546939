"""pipeline: a YAML-defined DAG for tabular machine learning on GPUs (cuDF, cuML) or CPUs.

Library use::

    from pipeline import load_config, run_pipeline
    result = run_pipeline("configs/churn.yaml", overrides=["device=cpu"])
    print(result.evaluation.best, result.manifest["metrics"])

    from pipeline import FeatureWorkflow
    from pipeline.features import OneHot, Standardize
    wf = FeatureWorkflow([OneHot(columns=["Contract"]), Standardize(columns=["tenure"])])
    X = wf.fit_transform(train_df)
"""

__version__ = "0.1.0"

from pipeline.config import PipelineConfig, load_config  # noqa: E402
from pipeline.errors import (  # noqa: E402
    BackendUnavailable, ConfigError, DataError, ExitCode, PipelineError, StageError,
)
from pipeline.features import FeatureWorkflow  # noqa: E402
from pipeline.runner import RunResult, Runner, run_pipeline  # noqa: E402

__all__ = [
    "BackendUnavailable", "ConfigError", "DataError", "ExitCode", "FeatureWorkflow",
    "PipelineConfig", "PipelineError", "RunResult", "Runner", "StageError", "__version__",
    "load_config", "run_pipeline",
]
