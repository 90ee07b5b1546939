#!/usr/bin/env python
"""Do the feature ops' kernels release the GIL? The evidence the column threads rest on.

Each kernel (the pandas / pyarrow / NumPy call an op makes per column, on ``--rows`` rows) runs
5 times in one thread while a second thread counts in pure Python, handing the GIL back after
every 200 steps. With the switch interval at 5 s, a thread holding the GIL keeps it: the counter
runs only while the kernel's thread has released it. So the counter's CPU seconds over the
kernel's say how much of the kernel runs without the GIL, against two controls measured in the
same run: pure Python (holds the GIL: 0) and hashlib's sha256 of 50 MB (releases it throughout).
The counter gives its core away at every hand-back, so on a machine with other work even the
sha256 ratio is well below 1: compare each kernel with that row, not with 1. Thread CPU time,
not wall time, so it holds on a shared machine.

    python scripts/gil_release.py --rows 2000000
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.backends.cpu import CpuBackend  # noqa: E402


def kernels(rows: int) -> dict[str, Callable[[], Any]]:
    """What the ops call per column: one_hot / categorify / target_encode / fill_missing /
    standardize / log1p, on a text and a float column."""
    backend = CpuBackend()
    rng = np.random.default_rng(0)
    text = pd.Series(rng.choice(["Month-to-month", "One year", "Two year", "Bank transfer"], rows))
    numbers = pd.Series(rng.normal(size=rows))
    numbers[::9] = np.nan
    categories = ["One year", "Two year", "Month-to-month"]
    blob = b"x" * 50_000_000
    return {
        "value_counts (text)": lambda: text.value_counts(dropna=True),
        "category_codes (text)": lambda: backend.category_codes(text, categories),
        "one-hot comparison (text)": lambda: (text == "One year").fillna(False).astype("float32"),
        "standardize": lambda: (numbers.astype("float64") - 0.3) / 1.7,
        "mean and std": lambda: (numbers.mean(), numbers.std(ddof=0)),
        "median": lambda: numbers.median(),
        "fillna": lambda: numbers.fillna(0.5),
        "log1p": lambda: np.log1p(numbers.abs()),
        "sha256 of 50 MB (releases the GIL throughout)": lambda: hashlib.sha256(blob).digest(),
        "pure Python (holds the GIL)": lambda: sum(i for i in range(rows)),
    }


def released_share(fn: Callable[[], Any], repeats: int = 5) -> tuple[float, float]:
    """(the kernel's CPU seconds, the counter's CPU seconds meanwhile)."""
    stop = threading.Event()
    cpu: dict[str, float] = {}

    def counter() -> None:
        start = time.thread_time()
        while not stop.is_set():
            for _ in range(200):
                pass
            time.sleep(0)                 # hands the GIL back: it runs only while the kernel does not hold it
        cpu["counter"] = time.thread_time() - start

    def kernel() -> None:
        start = time.thread_time()
        for _ in range(repeats):
            fn()
        cpu["kernel"] = time.thread_time() - start

    counting = threading.Thread(target=counter)
    counting.start()
    working = threading.Thread(target=kernel)
    working.start()
    working.join()
    stop.set()
    counting.join()
    return cpu["kernel"], cpu["counter"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows per column (default 2,000,000)")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    work = kernels(args.rows)
    for fn in work.values():
        fn()                                  # first calls (imports, caches) outside the measurement
    previous = sys.getswitchinterval()
    sys.setswitchinterval(5.0)
    try:
        print("| kernel | kernel CPU (s) | counter CPU meanwhile (s) | ratio |")
        print("|---|--:|--:|--:|")
        for name, fn in work.items():
            kernel_s, counter_s = released_share(fn)
            print(f"| {name} | {kernel_s:.3f} | {counter_s:.3f} | {counter_s / kernel_s:.2f} |")
    finally:
        sys.setswitchinterval(previous)
    return 0


if __name__ == "__main__":
    sys.exit(main())
