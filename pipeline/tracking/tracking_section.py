"""The ``tracking:`` section of the config and the hooks it turns on: MLflow
(``tracking: {mlflow: {...}}``, ``pipeline.tracking.mlflow_hook``), after the report, whose page
it uploads.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pipeline.hooks.hook_registry import HookContext, register_hook
from pipeline.tracking.mlflow_hook import MlflowHook


class MlflowConfig(BaseModel):
    """Where ``pipeline.tracking.MlflowHook`` logs each run."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    uri: str | None = Field(None, min_length=1, description="Tracking URI (http://host:5000, sqlite:///mlflow.db, "
                                                            "databricks); absent: $MLFLOW_TRACKING_URI or MLflow's default.")
    experiment: str | None = Field(None, min_length=1, description="Experiment name; absent: the pipeline's name.")
    artifact_location: str | None = Field(None, min_length=1, description="Where a new experiment keeps artifacts "
                                          "(absent: the server's default; a local store's is ./mlruns).")
    artifacts: bool = Field(True, description="Also upload report.html, manifest.json, config.yaml and the "
                                              "exported models.")
    pyfunc: bool = Field(True, description="Log each exported model of a succeeded run as an MLflow pyfunc model "
                                           "(mlflow.pyfunc.load_model and `mlflow models serve` score with it).")
    # Named apart from its key: ``register`` is a method of every pydantic model's class.
    registered_model: str | None = Field(None, alias="register", min_length=1, description="Registered model name: the run's best model (the "
                                 "one `pipeline predict` scores with) becomes a new version of it, and the aliases "
                                 "a stage asks for (the promotion gate's champion) move to that version.")

    @model_validator(mode="after")
    def register_needs_pyfunc(self) -> MlflowConfig:
        """A registered version is made from the pyfunc model: one needs the other."""
        if self.registered_model is not None and not self.pyfunc:
            raise ValueError("register needs pyfunc: true (a registered version is made from the pyfunc model)")
        return self


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
                      artifact_location=mlflow.artifact_location, pyfunc=mlflow.pyfunc,
                      register=mlflow.registered_model)


# After the report: it uploads report.html.
register_hook("mlflow", mlflow_hook, config_key="tracking", section=TrackingConfig, default=True, order=200,
              description="Send each run to a tracking server (MLflow).")
