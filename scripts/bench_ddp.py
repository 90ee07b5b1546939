#!/usr/bin/env python
"""Data-parallel training of the torch stage: epoch time on 1 and on 2 ranks, and what the
ranks send each other per epoch, in one invocation.

Generates the Telco-schema churn table (``--rows``, default 1M; ``scripts/generate_churn.py``)
once, builds its features in memory with ``configs/churn.yaml``'s feature ops on the CPU
backend, then trains ``configs/churn.yaml``'s MLP (its layers and batch size) for ``--epochs``
epochs, early stopping off, in turns:

  (1) one process (``distributed`` unset): PyTorch on every core;
  (2) ``distributed: {processes: 2, launch: local}``: two ranks, gloo, each PyTorch on its
      share of the cores, each step's rows shared out between them.

Repeated ``--repeats`` times, the order rotating. The epoch time is the training loop's own
(the history's ``seconds``, validation included, the first epoch left out as warm-up); the
stage's wall time beside it adds the ranks' start and the shards' copies. Communication is
what rank 0 hands to its collectives per epoch, from the stage's facts: DDP's gradient
all-reduce, and the loss sums, validation gathers and stop decisions. Test AUC of each side
shows the two train the same model. Prints a Markdown table and, with ``--output``, JSON.

    python scripts/bench_ddp.py --output bench-ddp.json          # 1M rows, 3 epochs
    python scripts/bench_ddp.py --rows 50000 --epochs 2 --repeats 1   # a quick check

On a 2-core CPU the point is that the ranks agree, not speed: two ranks split two cores that
one process used alone, and add an all-reduce per step. The speed-up belongs to GPUs (NCCL).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_overhead import ensure_data, warm_page_cache  # noqa: E402

from pipeline.backends import get_backend  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.stages import build_features, evaluate_models, load_table, split_frame  # noqa: E402
from pipeline.stages.torch_mlp import train_torch  # noqa: E402

SIDES = {"1 process": None, "2 ranks (gloo)": {"processes": 2, "launch": "local"}}


def churn_features(path: Path) -> Any:
    """configs/churn.yaml's load, split and features, in memory on the CPU."""
    config = load_config(REPO / "configs" / "churn.yaml")
    stages = config.stages
    backend = get_backend("cpu")
    frame = load_table(path, backend=backend, na_values=stages["raw"].na_values)
    split = stages["split"]
    data = split_frame(frame, split.target, positive=split.positive, test=split.test, valid=split.valid,
                       seed=config.seed, backend=backend)
    return build_features(data, stages["features"].build_ops(), id_column=stages["features"].id)


def mlp_params(epochs: int) -> dict[str, Any]:
    spec = load_config(REPO / "configs" / "churn.yaml").stages["mlp"]
    params = spec.model_dump(exclude={"kind", "inputs", "description", "tune", "distributed"})
    params.update(epochs=epochs, early_stopping={"monitor": "val_loss", "patience": epochs + 1}, device="cpu")
    return params


def train(features: Any, params: dict[str, Any], distributed: dict[str, Any] | None) -> dict[str, Any]:
    started = time.perf_counter()
    trained = train_torch(features, name="mlp", seed=42, distributed=distributed, **params)
    wall = time.perf_counter() - started
    epochs = [row["seconds"] for row in trained.history][1:] or [trained.history[0]["seconds"]]
    facts = trained.distributed or {}
    return {"epoch_seconds": epochs, "wall_seconds": wall,
            "test_auc": evaluate_models([trained]).metrics["mlp"]["roc_auc"],
            "parameters": sum(p.numel() for p in trained.estimator.module.parameters()),
            "communication": facts.get("communication"), "steps_per_epoch": facts.get("steps_per_epoch"),
            "batch_per_rank": facts.get("batch_per_rank")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the generated table (default 1,000,000)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per training (default 3; the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=2, help="trainings per side, in rotating order (default 2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated data (default 0)")
    parser.add_argument("--data-dir", type=Path, default=REPO / "bench-data",
                        help="where the generated table is kept (default bench-data/, git-ignored)")
    parser.add_argument("--output", type=Path, help="also write the results as JSON here")
    args = parser.parse_args(argv)

    path = ensure_data(args.rows, args.seed, args.data_dir, regenerate=False)
    warm_page_cache(path)
    features = churn_features(path)
    params = mlp_params(args.epochs)
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
    order = list(SIDES)
    for repeat in range(args.repeats):
        for side in order[repeat % 2:] + order[:repeat % 2]:
            runs[side].append(train(features, params, SIDES[side]))
            print(f"{side}: epoch {statistics.median(runs[side][-1]['epoch_seconds']):.2f} s", file=sys.stderr)

    summary = {}
    for side, results in runs.items():
        epochs = [s for r in results for s in r["epoch_seconds"]]
        summary[side] = {"epoch_seconds_median": statistics.median(epochs),
                         "wall_seconds_median": statistics.median(r["wall_seconds"] for r in results),
                         "test_auc": [round(r["test_auc"], 4) for r in results],
                         "communication": results[-1]["communication"],
                         "steps_per_epoch": results[-1]["steps_per_epoch"],
                         "batch_per_rank": results[-1]["batch_per_rank"], "parameters": results[-1]["parameters"]}
    one, two = summary["1 process"], summary["2 ranks (gloo)"]
    comm = two["communication"]
    report = {"rows": args.rows, "train_rows": features.rows()["train"], "epochs": args.epochs,
              "repeats": args.repeats, "machine": platform.platform(), "sides": summary,
              "epoch_ratio_2_over_1": two["epoch_seconds_median"] / one["epoch_seconds_median"]}
    print(f"| | 1 process | 2 ranks (gloo) |\n|---|---:|---:|\n"
          f"| epoch (train + validation), median | {one['epoch_seconds_median']:.2f} s | "
          f"{two['epoch_seconds_median']:.2f} s ({report['epoch_ratio_2_over_1']:.2f}x) |\n"
          f"| whole training ({args.epochs} epochs), median | {one['wall_seconds_median']:.1f} s | "
          f"{two['wall_seconds_median']:.1f} s |\n"
          f"| test AUC | {', '.join(map(str, one['test_auc']))} | {', '.join(map(str, two['test_auc']))} |\n"
          f"| optimizer steps per epoch | — | {two['steps_per_epoch']} of {two['batch_per_rank']} rows per rank |\n"
          f"| gradient all-reduce per rank per epoch | — | {comm['gradient_bytes_per_epoch'] / 2**20:,.1f} MiB "
          f"({two['parameters']:,} parameters x 4 B x steps) |\n"
          f"| other collectives per rank per epoch | — | {comm['other_bytes_per_epoch'] / 2**10:,.1f} KiB |")
    if args.output:
        args.output.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
