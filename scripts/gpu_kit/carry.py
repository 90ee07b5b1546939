#!/usr/bin/env python3
"""Group the kit's parts into carry folders, one per call, each fitting beside the checkout.

    python scripts/gpu_kit/carry.py [--parts gpu-kit/parts] [--out gpu-kit/carry] [--limit-mib 64]

A call to a lent host carries the checkout (tracked and untracked files git does not ignore)
plus the folders it names, 64 MiB in all. This measures the checkout, then packs the parts into
as few folders ``t1``, ``t2``, ... as fit the room left (first fit, largest first; base's parts
first so the CPU side can start early), each with a copy of ``manifest.json``. Parts are hard
links, so nothing is copied. Prints the folders in call order.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


def checkout_bytes(root: Path = CHECKOUT) -> int:
    """Bytes of what travels with every call: tracked and untracked, not ignored, files."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum((root / os.fsdecode(p)).stat().st_size for p in listed if p and (root / os.fsdecode(p)).is_file())


def plan(sizes: dict[str, int], room: int) -> list[list[str]]:
    """Parts grouped into bins of at most ``room`` bytes: base's parts open the first bins."""
    bins: list[tuple[int, list[str]]] = []
    order = sorted(sizes, key=lambda n: ("-base-" not in n, -sizes[n], n))
    for name in order:
        if sizes[name] > room:
            raise SystemExit(f"{name} ({sizes[name] / MiB:.1f} MiB) does not fit the {room / MiB:.1f} MiB "
                             "a call leaves beside the checkout: prepare with a smaller --part-mib")
        for i, (used, names) in enumerate(bins):
            if used + sizes[name] <= room:
                bins[i] = (used + sizes[name], [*names, name])
                break
        else:
            bins.append((sizes[name], [name]))
    return [names for _used, names in bins]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", type=Path, default=CHECKOUT / "gpu-kit" / "parts")
    parser.add_argument("--out", type=Path, default=CHECKOUT / "gpu-kit" / "carry")
    parser.add_argument("--limit-mib", type=float, default=64.0)
    args = parser.parse_args(argv)
    manifest = args.parts / "manifest.json"
    sizes = {p.name: p.stat().st_size for p in sorted(args.parts.glob("*.tar"))}
    checkout = checkout_bytes()
    room = int(args.limit_mib * MiB) - checkout - manifest.stat().st_size - MiB // 2
    bins = plan(sizes, room)
    shutil.rmtree(args.out, ignore_errors=True)
    print(f"checkout {checkout / MiB:.1f} MiB; room for parts per call {room / MiB:.1f} MiB; {len(bins)} call(s)")
    for i, names in enumerate(bins, 1):
        folder = args.out / f"t{i}"
        folder.mkdir(parents=True)
        shutil.copyfile(manifest, folder / "manifest.json")
        for name in names:
            os.link(args.parts / name, folder / name)
        total = sum(sizes[n] for n in names)
        print(f"  {folder.relative_to(CHECKOUT) if folder.is_relative_to(CHECKOUT) else folder}: "
              f"{', '.join(names)} ({total / MiB:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
