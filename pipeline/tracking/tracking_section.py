"""The ``tracking:`` section of the config and the hooks it turns on: MLflow
(``tracking: {mlflow: {...}}``, ``pipeline.tracking.mlflow_hook``), after the report, whose page
it uploads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.tracking.mlflow_hook import MlflowHook


class MlflowConfig(BaseModel):
    """Where ``pipeline.tracking.MlflowHook`` logs each run."""

    model_config = ConfigDict(extra="forbid")

    uri: str | None = Field(None, min_length=1, description="Tracking URI (http://host:5000, sqlite:///mlflow.db, "
                                                            "databricks); absent: $MLFLOW_TRACKING_URI or MLflow's default.")
    experiment: str | None = Field(None, min_length=1, description="Experiment name; absent: the pipeline's name.")
    artifact_location: str | None = Field(None, min_length=1, description="Where a new experiment keeps artifacts "
                                          "(absent: the server's default; a local store's is ./mlruns).")
    artifacts: bool = Field(True, description="Also upload report.html, manifest.json, config.yaml and the "
                                              "exported models.")


class TrackingConfig(BaseModel):
    """Tracking servers each run is sent to (hooks on the run; never a reason for a run to fail)."""

    model_config = ConfigDict(extra="forbid")

    mlflow: MlflowConfig | None = Field(None, description="Log runs to MLflow (the mlflow extra).")


def mlflow_hook(section: TrackingConfig, context: HookContext) -> MlflowHook | None:
    """On when ``tracking.mlflow`` is set, unless the caller passed an ``MlflowHook`` of its own."""
    mlflow = section.mlflow
    if mlflow is None or any(isinstance(hook, MlflowHook) for hook in context.hooks):
        return None
    return MlflowHook(mlflow.uri, mlflow.experiment, artifacts=mlflow.artifacts,
                      artifact_location=mlflow.artifact_location)


# After the report: it uploads report.html.
register_hook("mlflow", mlflow_hook, config_key="tracking", section=TrackingConfig, default=True, order=200,
              description="Send each run to a tracking server (MLflow).")
