#!/usr/bin/env python
"""The PyTorch side, measured in one invocation against the usual way of doing it.

1. Hand-off time vs matrix size (``--handoff-rows``, default 1e5, 1e6, 1e7 rows x 32 float32):
   ``pipeline.tensors.to_torch`` (DLPack, zero-copy, with its bookkeeping) against
   ``torch.tensor(array)``, which copies. Zero-copy: median of 5 loops of 200 calls (one call
   is too short to time alone); copy: median of ``--repeats`` calls.
2. Batches per second with no model, ``--rows`` x 32 float32 (default 1e6): the pipeline's
   ``TensorBatches`` against ``DataLoader(TensorDataset(X, y), batch_size=1024, shuffle=True)``.
3. Epoch time of the MLP the shipped config trains (configs/churn.yaml: hidden [64, 32],
   dropout 0.2, BatchNorm, AdamW) on the same data with batch size 1024: the pipeline's training
   loop (``pipeline.tensors.fit_loop.fit``, one epoch, no validation) against the textbook loop
   over that DataLoader with the same model, optimizer and loss.

The device is the CPU unless ``--device cuda`` (then the hand-off starts from CuPy arrays
when CuPy is installed). Results go to stdout as a Markdown table and, with ``--output``, as
JSON. Exit status 0 unless a measurement failed; the targets (zero-copy under 1 ms at every
size, >= 20x batches, >= 5x epoch) are reported, not enforced.

    python scripts/bench_torch.py --output bench-torch.json
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.backends import get_backend  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.tensors import to_torch  # noqa: E402
from pipeline.tensors.batches import TensorBatches  # noqa: E402
from pipeline.tensors.mlp import MLPArchitecture  # noqa: E402
from pipeline.tensors.fit_loop import FitOptions, Split, fit, make_optimizer  # noqa: E402

COLUMNS = 32
BATCH = 1024


def timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        del result
    return times


def per_call(fn: Callable[[], Any], calls: int = 200, samples: int = 5) -> list[float]:
    """Seconds per call for a call too cheap to time alone (no gc.collect in between)."""
    out = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls)
    return out


def alternating(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Medians of a and b timed in turns (ab, ba, ab, ...) so machine drift falls on both."""
    times_a, times_b = [], []
    for i in range(repeats):
        order = ((a, times_a), (b, times_b)) if i % 2 == 0 else ((b, times_b), (a, times_a))
        for fn, sink in order:
            sink += timed(fn, 1)
    return statistics.median(times_a), statistics.median(times_b)


def handoff(rows_list: list[int], repeats: int) -> list[dict[str, Any]]:
    backend = get_backend("cpu")
    out = []
    for rows in rows_list:
        X = np.random.default_rng(0).random((rows, COLUMNS), dtype=np.float32)
        zero = per_call(lambda: to_torch(X, backend, "X"))
        tensor, record = to_torch(X, backend, "X")
        assert record.zero_copy and tensor.data_ptr() == X.__array_interface__["data"][0]
        copy = timed(lambda: torch.tensor(X), repeats)
        out.append({"rows": rows, "bytes": int(X.nbytes), "zero_copy_ms": statistics.median(zero) * 1e3,
                    "torch_tensor_ms": statistics.median(copy) * 1e3})
        print(f"hand-off {rows:>10,} rows: zero-copy {out[-1]['zero_copy_ms']:.3f} ms, "
              f"torch.tensor {out[-1]['torch_tensor_ms']:.1f} ms", file=sys.stderr)
        X = tensor = None             # free the matrix before the next, larger one
    return out


def make_data(rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((rows, COLUMNS), dtype=np.float32)
    y = (X[:, 0] + 0.5 * X[:, 1] + rng.standard_normal(rows, dtype=np.float32) > 0).astype(np.int32)
    backend = get_backend("cpu")
    return to_torch(X, backend, "X")[0], to_torch(y, backend, "y")[0]


def batches_per_second(X: torch.Tensor, y: torch.Tensor, repeats: int) -> dict[str, float]:
    ours = TensorBatches([X, y], BATCH, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(TensorDataset(X, y), batch_size=BATCH, shuffle=True)

    def drain(iterable) -> int:
        n = 0
        for _ in iterable:
            n += 1
        return n

    t_ours, t_loader = alternating(lambda: drain(ours), lambda: drain(loader), repeats)
    n = len(ours)
    result = {"batches": n, "ours_per_s": n / t_ours, "dataloader_per_s": n / t_loader}
    print(f"batches/s: ours {result['ours_per_s']:,.0f}, DataLoader {result['dataloader_per_s']:,.0f}", file=sys.stderr)
    return result


def shipped_mlp() -> torch.nn.Module:
    """The network configs/churn.yaml's ``mlp`` stage builds, for COLUMNS inputs."""
    spec = load_config(REPO / "configs" / "churn.yaml").stages["mlp"]
    torch.manual_seed(0)
    return MLPArchitecture(n_features=COLUMNS, continuous_index=list(range(COLUMNS)),
                           hidden=list(spec.hidden), dropout=spec.dropout, batch_norm=spec.batch_norm).build()


def epoch_time(X: torch.Tensor, y: torch.Tensor, repeats: int, device: torch.device) -> dict[str, float]:
    def ours() -> None:
        fit(shipped_mlp(), Split(X, None, y), None, options, device=device)

    options = FitOptions(epochs=1, batch_size=BATCH, precision="fp32")

    def textbook() -> None:
        # The same model, optimizer (make_optimizer) and loss: only the batches differ.
        model = shipped_mlp().to(device)
        optimizer = make_optimizer(model, options, device)
        model.train()
        for xb, yb in DataLoader(TensorDataset(X, y), batch_size=BATCH, shuffle=True):
            xb, yb = xb.to(device), yb.to(device)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(model(xb), yb.float())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    ours(), textbook()            # warm-up: thread pools, allocator, first-call dispatch
    t_ours, t_loader = alternating(ours, textbook, repeats)
    print(f"epoch: ours {t_ours:.2f} s, DataLoader loop {t_loader:.2f} s", file=sys.stderr)
    return {"ours_s": t_ours, "dataloader_s": t_loader}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handoff-rows", type=int, nargs="+", default=[10**5, 10**6, 10**7])
    parser.add_argument("--rows", type=int, default=10**6, help="rows for the batch and epoch measurements")
    parser.add_argument("--repeats", type=int, default=5, help="repeats for hand-off and batches")
    parser.add_argument("--epoch-repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    result: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "torch": torch.__version__, "cpus": torch.get_num_threads(),
                    "device": str(device)},
        "handoff": handoff(args.handoff_rows, args.repeats),
    }
    X, y = make_data(args.rows)
    result["batches"] = batches_per_second(X, y, args.repeats)
    result["epoch"] = epoch_time(X, y, args.epoch_repeats, device)
    batches, epoch = result["batches"], result["epoch"]
    result["ratios"] = {
        "batches_per_s": batches["ours_per_s"] / batches["dataloader_per_s"],
        "epoch_time": epoch["dataloader_s"] / epoch["ours_s"],
        "zero_copy_max_ms": max(h["zero_copy_ms"] for h in result["handoff"]),
    }
    print(markdown(result, args.rows))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2))
    return 0


def markdown(result: dict[str, Any], rows: int) -> str:
    lines = ["| measurement | pipeline | baseline | ratio (target) |", "|---|---:|---:|---:|"]
    for h in result["handoff"]:
        lines.append(f"| hand-off, {h['rows']:,} x {COLUMNS} float32 ({h['bytes'] / 2**20:,.0f} MiB) | "
                     f"{h['zero_copy_ms']:.3f} ms (DLPack) | {h['torch_tensor_ms']:.1f} ms (`torch.tensor`) | "
                     f"{h['torch_tensor_ms'] / h['zero_copy_ms']:,.0f}x (< 1 ms) |")
    b, e, r = result["batches"], result["epoch"], result["ratios"]
    lines.append(f"| batches/s, {rows:,} x {COLUMNS}, batch {BATCH}, no model | {b['ours_per_s']:,.0f} | "
                 f"{b['dataloader_per_s']:,.0f} (`DataLoader`) | {r['batches_per_s']:.0f}x (>= 20x) |")
    lines.append(f"| epoch of the shipped MLP, same data | {e['ours_s']:.2f} s | {e['dataloader_s']:.2f} s | "
                 f"{r['epoch_time']:.1f}x (>= 5x) |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
