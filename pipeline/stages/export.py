"""``export``: predictions as Parquet with the id column, and each model as a self-contained
folder (estimator, fitted feature workflow, metadata) that ``pipeline.scoring.model_folder.load_model``
loads later.

The model file is written by the registry entry's format (``pipeline.models.formats``:
XGBoost's JSON, an MLP's ``state_dict``, scikit-learn's in skops' format: none runs code when
loaded), so this module never asks which model it is; ``model.json`` names the format
(``format``) and lists the files it wrote (``files``) for ``predict`` to verify.

Each model folder also holds ``reference.json`` (listed in ``files`` too): the drift profile
of the training split's feature matrix (``FeatureSet.drift_reference``), which ``predict``
bins the scored rows against; the features work it out once for every model trained on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import Field

from pipeline.core.errors import DataError
from pipeline.runs.store import finite_or_null
from pipeline.featuresets import FeatureSet
from pipeline.runs.layout import MODEL_DESCRIPTION, MODELS_DIR, REFERENCE_FILE, model_folder
from pipeline.stages.ensemble import mixed_features
from pipeline.stages.spec import KeyPath, Preview, StageContext, StageSpec, no_rows_in, register_stage
from pipeline.stages.train import TrainedModel
from pipeline.stages.training.trained import model_meta


class ExportSpec(StageSpec):
    kind: Literal["export"]
    split: Literal["test", "valid", "train", "all"] = Field("test", description="Rows to write predictions for.")
    models: bool = Field(True, description="Also save each model with its feature workflow.")
    min_inputs = 1

    def preview_problems(self, inputs: Mapping[str, Preview]) -> list[tuple[KeyPath, str]]:
        """Models from different features stages: one predictions table needs one set of rows
        (found at the export, after every model had trained, otherwise)."""
        problems: list[tuple[KeyPath, str]] = []
        empty = no_rows_in(self.split, inputs)
        if empty:
            default = ", the default" if self.split == "test" else ""
            problems.append((("split",), f"export writes predictions for the {self.split} split (split: {self.split}"
                                         f"{default}), but {empty}, so it has no rows; set split: all (or train), "
                                         "or give the split stage those rows"))
        sources = {name: p.features for name, p in inputs.items()}
        if len(sources) < 2 or None in sources.values():
            return problems
        mixed = mixed_features(sources, "export")
        if mixed is None:
            return problems
        shown = ", ".join(f"{name}: {source}" for name, source in sources.items())
        return problems + [(("inputs",), f"{mixed}, so they cannot share one predictions table ({shown}); export "
                                         "each features stage's models separately")]


def _same_features(models: list[TrainedModel]) -> FeatureSet:
    """The one FeatureSet every model was trained on (one predictions table needs one)."""
    first = models[0].features
    for model in models[1:]:
        if model.features.uid != first.uid:
            raise DataError("export: all models must be trained on the same features stage to share one "
                            f"predictions table ('{models[0].name}' and '{model.name}' differ)")
    return first


def predictions_frame(models: list[TrainedModel], split: str = "test") -> pd.DataFrame:
    """One row per scored row: id, split, true label, then one score column per model."""
    return _same_features(models).predictions_frame(models, split)


def save_model(model: TrainedModel, folder: str | Path) -> list[Path]:
    """Write ``folder``/{model files, reference.json, workflow.json, model.json}; returns the
    files written.

    Examples:
        >>> import tempfile
        >>> from pathlib import Path
        >>> from pipeline.stages import save_model, train_model
        >>> model = train_model(features, "logistic_regression", {"max_iter": 1000})
        >>> sorted(path.name for path in save_model(model, Path(tempfile.mkdtemp())))
        ['coefficients.json', 'model.json', 'reference.json', 'workflow.json']
    """
    from pipeline.models import get_model_spec
    from pipeline.runs.store import atomic_write_json

    backend = model.features.backend
    folder = Path(folder)                       # a str folder failed on .mkdir
    folder.mkdir(parents=True, exist_ok=True)
    meta = model_meta(model)
    try:
        model_format = get_model_spec(model.model).format
    except KeyError as exc:
        raise DataError(f"export: cannot save '{model.name}': {exc.args[0]}") from None
    written, extra = model_format.save(model.estimator, folder, backend=backend)
    atomic_write_json(folder / REFERENCE_FILE, model.features.drift_reference())
    written.append(folder / REFERENCE_FILE)
    meta.update(extra)
    meta["format"] = model_format.name
    meta["files"] = [path.relative_to(folder).as_posix() for path in written]
    meta.update(model.export_meta())
    model.features.workflow.save(folder / "workflow.json")
    written.append(folder / "workflow.json")
    _refuse_non_finite(meta, model.name)
    atomic_write_json(folder / "model.json", meta)
    written.append(folder / "model.json")
    return written


class ExportedFiles(list):
    """The export stage's output: the paths of the files it wrote."""


@register_stage("export", ExportSpec, produces=ExportedFiles, accepts=(TrainedModel,), records=("models",))
def run_export(spec: ExportSpec, ctx: StageContext, inputs) -> ExportedFiles:
    models = list(inputs.values())
    # One Parquet file in memory; a folder of files, one per partition, for partitioned data.
    written = _same_features(models).write_predictions(models, spec.split, ctx.artifact_path("predictions.parquet"))
    if spec.models:
        for model in models:
            written += save_model(model, ctx.artifact_path(MODELS_DIR, model.name, MODEL_DESCRIPTION).parent)
        ctx.run_record["models"] = {model.name: model_folder(ctx.stage, model.name) for model in models}
    ctx.facts["files"] = len(written)
    return ExportedFiles(str(p) for p in written)


def _refuse_non_finite(meta: dict[str, Any], name: str) -> None:
    """A model whose saved numbers are not finite (coefficients of a diverged fit) would score
    NaN for every row: refuse to export it rather than write a model that cannot work."""
    bad = [key for key, value in meta.items() if finite_or_null(value) != value]
    if bad:
        raise DataError(f"export: model '{name}' has values that are not finite numbers in {bad} "
                        "(the fit diverged); it is not exported")
