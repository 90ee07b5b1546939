"""How ``pipeline predict`` scores, as one frozen object: built by the CLI from its flags or by
``predict_batch``'s caller, and read by the steps of batch scoring."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from pipeline.core.option_objects import Options, names


@dataclass(frozen=True)
class PredictOptions(Options):
    """The options of one batch scoring (``pipeline predict``'s flags; ``predict_batch``'s
    keyword arguments).

    ``model``: the run's best when None. ``runs_dir``/``pipeline``: where ``latest`` and run ids
    are looked up. ``device``: cpu, gpu or auto (None: auto). ``threshold``: binary models only
    (None: the run's evaluation's, else 0.5). ``na_values``: None reads the input as the run read
    its rows; a list, even empty, replaces that. ``csv_options``: ``sep``, ``encoding``,
    ``decimal``, ``thousands`` in place of the run's. ``partitioned``: score partition by
    partition into a Parquet folder (on the Dask cluster at ``scheduler``, else local threads).
    ``as_of``: the input is raw events, rebuilt into the model's table at that cut-off.
    ``drift_threshold``: the PSI over which a feature is named in the drift warning.

    Examples:
        >>> from pipeline.predict import PredictOptions
        >>> options = PredictOptions(model="xgb", na_values=[" "])
        >>> options.na_values, options.replace(device="cpu").device
        ((' ',), 'cpu')
    """

    model: str | None = None
    runs_dir: str | os.PathLike[str] = "runs"
    pipeline: str | None = None
    device: str | None = None
    threshold: float | None = None
    na_values: tuple[str, ...] | None = None
    csv_options: Mapping[str, str | None] | None = None
    partitioned: bool = False
    scheduler: str | None = None
    as_of: str | None = None
    drift_threshold: float | None = None

    what: ClassVar[str] = "predict option"

    def __post_init__(self) -> None:
        if self.na_values is not None:
            object.__setattr__(self, "na_values", names(self.na_values))
        if self.csv_options is not None:
            object.__setattr__(self, "csv_options", {k: v for k, v in self.csv_options.items() if v is not None})


__all__ = ["PredictOptions"]
