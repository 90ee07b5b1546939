"""LightGBM's scikit-learn estimators as the registry's ``lightgbm`` entry builds them.

Why a subclass and not ``lightgbm:LGBMClassifier`` itself:

- the LightGBM wheel has no CUDA build, so on the GPU backend the estimator is handed CuPy
  matrices; it trains and predicts from a host copy (``.get()``, found by duck typing: this
  layer does not import CuPy);
- ``early_stopping_rounds`` becomes ``lightgbm.early_stopping(..., verbose=False)`` when the fit
  has an evaluation set (LightGBM's own parameter alias would fail a fit without one), and an
  evaluation set is passed as ``eval_X``/``eval_y`` where the installed LightGBM has them;
- the LightGBM parameters users write that are not in LGBMModel's signature (``max_bin``,
  ``cat_smooth``...) are constructor arguments here, so ``get_params`` names them and
  scikit-learn's ``clone`` keeps them;
- ``evals_result()`` gives the per-round metrics in XGBoost's shape, which ``train`` writes.

``import lightgbm`` is at the top on purpose: a machine without it fails the backend's import
of this module with ``ModuleNotFoundError('lightgbm')``, which names the extra to install.
"""

from __future__ import annotations

import inspect
from typing import Any

import lightgbm

from pipeline.backends.matrices import host_array as host

# LightGBM parameters offered beyond LGBMModel's signature (None: LightGBM's default).
EXTRA_PARAMS: tuple[str, ...] = (
    "early_stopping_rounds", "max_bin", "cat_smooth", "cat_l2", "max_cat_threshold", "min_data_per_group",
    "max_cat_to_onehot", "extra_trees", "path_smooth", "scale_pos_weight", "is_unbalance", "verbose",
)



def _takes_eval_xy() -> bool:
    """LightGBM 4.7 takes ``eval_X``/``eval_y`` and deprecates ``eval_set``; older 4.x only the latter."""
    return "eval_X" in inspect.signature(lightgbm.LGBMModel.fit).parameters


class _HostLightGBM:
    """What both tasks' estimators add to LightGBM's (see the module docstring)."""

    def __init__(self, *, early_stopping_rounds: int | None = None, max_bin: int | None = None,
                 cat_smooth: float | None = None, cat_l2: float | None = None, max_cat_threshold: int | None = None,
                 min_data_per_group: int | None = None, max_cat_to_onehot: int | None = None,
                 extra_trees: bool | None = None, path_smooth: float | None = None,
                 scale_pos_weight: float | None = None, is_unbalance: bool | None = None,
                 verbose: int | None = None, step_callbacks: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # type: ignore[call-arg]
        self.early_stopping_rounds = early_stopping_rounds
        self.max_bin = max_bin
        self.cat_smooth = cat_smooth
        self.cat_l2 = cat_l2
        self.max_cat_threshold = max_cat_threshold
        self.min_data_per_group = min_data_per_group
        self.max_cat_to_onehot = max_cat_to_onehot
        self.extra_trees = extra_trees
        self.path_smooth = path_smooth
        self.scale_pos_weight = scale_pos_weight
        self.is_unbalance = is_unbalance
        self.verbose = verbose
        # Callbacks that count rounds for a progress bar (``pipeline.models.steps``): set by
        # ``train`` for the fit only, so a fitted estimator never holds them.
        self.step_callbacks = step_callbacks

    def _process_params(self, stage: str) -> dict[str, Any]:
        """LightGBM's parameters without ``early_stopping_rounds`` and ``step_callbacks`` (``fit``
        turns them into callbacks) and without the unset extras (None)."""
        params = super()._process_params(stage)  # type: ignore[misc]
        params.pop("early_stopping_rounds", None)
        params.pop("step_callbacks", None)
        return {key: value for key, value in params.items() if not (key in EXTRA_PARAMS and value is None)}

    def fit(self, X: Any, y: Any, eval_set: list[tuple[Any, Any]] | None = None,
            categorical_feature: list[int] | str = "auto", callbacks: list[Any] | None = None, **kwargs: Any) -> Any:
        evaluation = [(host(ex), host(ey)) for ex, ey in eval_set or []]
        callbacks = [*(callbacks or []), *(self.step_callbacks or [])]
        if self.early_stopping_rounds:
            if not evaluation:
                raise ValueError(f"lightgbm: early_stopping_rounds ({self.early_stopping_rounds}) needs an evaluation "
                                 "set, and the split has no valid rows: give the split a valid share, or remove "
                                 "early_stopping_rounds")
            callbacks.append(lightgbm.early_stopping(int(self.early_stopping_rounds), verbose=False))
        if evaluation and _takes_eval_xy():
            kwargs["eval_X"] = tuple(ex for ex, _ in evaluation)
            kwargs["eval_y"] = tuple(ey for _, ey in evaluation)
        elif evaluation:
            kwargs["eval_set"] = evaluation
        return super().fit(host(X), host(y), categorical_feature=categorical_feature,  # type: ignore[misc]
                           callbacks=callbacks or None, **kwargs)

    def predict(self, X: Any, **kwargs: Any) -> Any:
        return super().predict(host(X), **kwargs)  # type: ignore[misc]

    def evals_result(self) -> dict[str, dict[str, list[float]]]:
        """The metric of each round on the evaluation set (``{"valid": {metric: values}}``)."""
        recorded = getattr(self, "evals_result_", None) or {}
        return {("valid" if name == "valid_0" else name): dict(metrics) for name, metrics in recorded.items()
                if name != "training"}


class LightGBMClassifier(_HostLightGBM, lightgbm.LGBMClassifier):
    """``lightgbm.LGBMClassifier`` fed host matrices (binary and multiclass)."""

    def predict_proba(self, X: Any, **kwargs: Any) -> Any:
        return super().predict_proba(host(X), **kwargs)


class LightGBMRegressor(_HostLightGBM, lightgbm.LGBMRegressor):
    """``lightgbm.LGBMRegressor`` fed host matrices."""
