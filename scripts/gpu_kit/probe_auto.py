"""The ``auto`` stage on a GPU host: its portfolio's MLP member trains on the GPU, bagged.

    PYTHONPATH=.:/opt/gpu-kit-site python scripts/gpu_kit/probe_auto.py --out result.json

A generated table (numbers with gaps, text, a flag) goes through ``default_ops`` (selectors,
no column named) and ``fit_auto`` with the MLP and a linear model, bagged on 3 folds. It
records the leaderboard, the device each MLP fold trained on, and the blend's test ROC AUC;
the check passes when every MLP fold trained on ``cuda`` and the blend scores every test row.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from pipeline.features.auto_ops import default_ops
    from pipeline.metrics import task_metrics
    from pipeline.stages import build_features, fit_auto, split_frame

    rng = np.random.default_rng(0)
    n = args.rows
    frame = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.normal(size=n),
                          "plan": rng.choice(["basic", "plus", "pro"], n), "flag": rng.random(n) < 0.4})
    signal = frame.x1 + 0.8 * (frame.plan == "pro") - 0.5 * frame.flag + 0.3 * frame.x2 ** 2
    frame.loc[rng.random(n) < 0.1, "x2"] = np.nan
    frame["target"] = (signal + rng.normal(scale=0.8, size=n) > 0.4).astype(int)
    data = split_frame(frame, "target", test=0.2, backend="cpu", task="binary")
    features = build_features(data, default_ops("binary"))
    started = time.perf_counter()
    result = fit_auto(features, time_limit=300, models=["mlp", "logistic_regression"], bag=3)
    seconds = time.perf_counter() - started
    mlp = next((m for m in result.model.members if m.name == "mlp"), None)
    # Each bag member's fitted network, and the device its weights live on.
    devices = [str(getattr(member.estimator, "device", "?")) for member in mlp.estimator.members] if mlp else []
    test = task_metrics(features.task, np.asarray(features.labels("test")), result.model.scores["test"])
    report = {"seconds": round(seconds, 2), "leaderboard": [r.to_dict() for r in result.leaderboard],
              "weights": result.model.weights, "test_roc_auc": test["roc_auc"],
              "mlp_fold_devices": devices}
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
