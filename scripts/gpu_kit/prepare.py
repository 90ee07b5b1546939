#!/usr/bin/env python3
"""Download the wheels an air-gapped GPU host lacks and pack them into transfer-sized parts.

    python scripts/gpu_kit/prepare.py [--profile base|rapids|all] [--out gpu-kit]

Runs where pip reaches a package index. Profiles: ``base`` is what the project needs beyond
the image (pyproject's base requirements, XGBoost for CUDA 13, Dask-CUDA and RMM, with their
dependencies); ``rapids`` adds cuDF, cuML, Dask-cuDF and RAFT-Dask and their libraries (large);
``all`` is both, base's parts first. What the image is assumed to have is in ``target.py``;
``--image-freeze`` takes the host's ``pip freeze`` instead. Writes ``OUT/parts/`` (the parts
and manifest.json: what travels) and keeps the downloaded wheels in ``OUT/wheels/`` for the
next run unless ``--delete-wheels``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if __package__ in (None, ""):                   # run as a file: make `gpu_kit` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_kit import target  # noqa: E402
from gpu_kit.parts import KitError, WheelFile, pack, part_table  # noqa: E402
from gpu_kit.resolve import (  # noqa: E402
    ResolveError, Selection, download, image_present, image_requirements, read_freeze, resolution_requirements,
    resolve, select,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("base", "rapids", "all"), default="base")
    parser.add_argument("--out", type=Path, default=target.REPO / "gpu-kit", help="output folder (default: gpu-kit/)")
    parser.add_argument("--image-freeze", type=Path, metavar="FILE",
                        help="`python -m pip freeze` of the host: what its image really has")
    parser.add_argument("--part-mib", type=float, default=target.PART_LIMIT / target.MiB,
                        help="largest part in MiB (default 60: one part and the manifest fit a 64 MiB transfer)")
    parser.add_argument("--delete-wheels", action="store_true", help="remove OUT/wheels after packing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    part_limit = int(args.part_mib * target.MiB)
    if part_limit + target.MANIFEST_ALLOWANCE > target.TRANSFER_LIMIT:
        print(f"error: --part-mib {args.part_mib:g} leaves no room for the manifest in a 64 MiB transfer",
              file=sys.stderr)
        return 2
    try:
        return prepare(target.profiles_for(args.profile), args.out, freeze_file=args.image_freeze,
                       part_limit=part_limit, delete_wheels=args.delete_wheels)
    except (ResolveError, KitError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def prepare(profiles: list[str], out: Path, *, freeze_file: Path | None, part_limit: int, delete_wheels: bool) -> int:
    freeze = read_freeze(freeze_file) if freeze_file else None
    print(f"image: {'the host freeze ' + str(freeze_file) if freeze else 'assumed: ' + ', '.join(target.IMAGE_REQUIREMENTS)}")
    present = image_present(freeze)
    # rapids is shipped minus what base ships, so base is always worked out (not always packed).
    needed = ["base", *(p for p in profiles if p != "base")]
    roots = {p: target.profile_roots(p) for p in needed}
    print(f"resolving {', '.join(needed)} for CPython {target.PYTHON_VERSION} on manylinux x86-64 ...")
    resolved = resolve(resolution_requirements([r for p in needed for r in roots[p]], image_requirements(freeze)))
    selections: dict[str, Selection] = {}
    have = dict(present)
    for profile in needed:
        selections[profile] = select(profile, roots[profile], resolved, have)
        have.update({name: dist.version for name, dist in selections[profile].ship.items()})
    for profile in profiles:
        report_selection(selections[profile])

    wheels_dir = out / "wheels"
    wheels: list[WheelFile] = []
    info: dict[str, dict[str, str]] = {}
    for profile in profiles:
        dists = sorted(selections[profile].ship.values(), key=lambda d: d.name)
        print(f"downloading {len(dists)} wheel(s) of {profile} into {wheels_dir} ...")
        paths = download(dists, wheels_dir)
        for dist in dists:
            wheels.append(WheelFile(paths[dist.name], profile, dist.sha256))
            info[paths[dist.name].name] = {"distribution": dist.name, "version": dist.version}
    manifest = pack(
        wheels, out / "parts", part_limit=part_limit, transfer_limit=target.TRANSFER_LIMIT,
        manifest_allowance=target.MANIFEST_ALLOWANCE, wheel_info=info,
        extra={
            "target": {"python": target.PYTHON_VERSION, "implementation": target.IMPLEMENTATION,
                       "platforms": list(target.PLATFORMS)},
            "image": {"source": str(freeze_file) if freeze_file else "assumed",
                      "requirements": image_requirements(freeze)},
            "roots": {p: roots[p] for p in profiles},
            "overrides": {p: selections[p].overrides for p in profiles},
            "conflicts": {p: selections[p].conflicts for p in profiles},
        },
    )
    print()
    print(part_table(manifest))
    print(f"\nparts and manifest.json: {out / 'parts'}")
    print("send each transfer's parts with a copy of manifest.json; on the host run:\n"
          "  python scripts/gpu_kit/unpack.py PARTS_DIR --target DIR")
    if delete_wheels:
        for wheel in wheels:
            wheel.path.unlink(missing_ok=True)
        print(f"deleted the downloaded wheels in {wheels_dir}")
    return 0


def report_selection(selection: Selection) -> None:
    print(f"{selection.profile}: {len(selection.ship)} wheel(s) to ship")
    for override in selection.overrides:
        print(f"  override: {override['name']} {override['shipped']} shadows the image's {override['image']} "
              f"({override['because']})")
    for conflict in selection.conflicts:
        print(f"  warning: {conflict} (not shipped: the image's core packages are never replaced)")


if __name__ == "__main__":
    sys.exit(main())
