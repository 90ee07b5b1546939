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
from gpu_kit.prune import PruneError, PruneStats, parse_arch, prune_wheel  # noqa: E402
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
    parser.add_argument("--arch", default="sm_90",
                        help="the host card's architecture: GPU code for any other is zeroed in the wheels' "
                             "libraries (sm_90: H100/H200; sm_80: A100); 'all' keeps every architecture "
                             "(the unpruned fallback set)")
    parser.add_argument("--with-raft-dask", action="store_true",
                        help="also ship RAFT-Dask (cuML's multi-GPU estimators: +29 MiB, one more transfer)")
    parser.add_argument("--leave-out", action="append", default=[], metavar="NAME",
                        help="leave this requirement (and what only it needs) out of the kit, for a host "
                             "whose steps never import it: `--leave-out polars` (the CPU table engine, 31 "
                             "MiB pruned) saves a transfer; repeatable")
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
        arch = None if args.arch == "all" else parse_arch(args.arch)
    except ValueError as exc:
        print(f"error: --arch: {exc}", file=sys.stderr)
        return 2
    try:
        return prepare(target.profiles_for(args.profile), args.out, freeze_file=args.image_freeze,
                       part_limit=part_limit, delete_wheels=args.delete_wheels, arch=arch,
                       left_out=(frozenset() if args.with_raft_dask else target.RAPIDS_LEFT_OUT)
                       | {target._name(n) for n in args.leave_out})
    except (ResolveError, KitError, PruneError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def prepare(profiles: list[str], out: Path, *, freeze_file: Path | None, part_limit: int, delete_wheels: bool,
            arch: int | None = None, left_out: frozenset[str] = target.RAPIDS_LEFT_OUT) -> int:
    freeze = read_freeze(freeze_file) if freeze_file else None
    print(f"image: {'the host freeze ' + str(freeze_file) if freeze else 'assumed: ' + ', '.join(target.IMAGE_REQUIREMENTS)}")
    present = image_present(freeze)
    # rapids is shipped minus what base ships, so base is always worked out (not always packed).
    needed = ["base", *(p for p in profiles if p != "base")]
    roots = {p: target.profile_roots(p, left_out=left_out) for p in needed}
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
        shrunk = shrink(paths, out / ("wheels-" + (f"sm_{arch}" if arch else "lzma")), arch)
        for dist in dists:
            path, sha256 = shrunk.get(dist.name, (paths[dist.name], dist.sha256))
            wheels.append(WheelFile(path, profile, sha256))
            info[path.name] = {"distribution": dist.name, "version": dist.version,
                               **({"pruned_for": f"sm_{arch}", "index_sha256": dist.sha256}
                                  if dist.name in shrunk and arch else {})}
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
            "dropped": {p: selections[p].dropped for p in profiles},
            "arch": f"sm_{arch}" if arch else "all",
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


def shrink(paths: dict[str, Path], dest: Path, arch: int | None) -> dict[str, tuple[Path, str]]:
    """Every wheel over 1 MiB rewritten with LZMA members, GPU code of other architectures
    zeroed when ``arch`` is set: distribution -> (new wheel, its sha256). Two processes; a
    rewritten wheel newer than its source is reused."""
    from concurrent.futures import ProcessPoolExecutor

    from gpu_kit.parts import sha256_file

    big = {name: path for name, path in paths.items() if path.stat().st_size > 1 << 20}
    jobs = {name: (path, dest / path.name) for name, path in big.items()}
    todo = {n: j for n, j in jobs.items() if not (j[1].is_file() and j[1].stat().st_mtime >= j[0].stat().st_mtime)}
    total = PruneStats()
    if todo:
        print(f"rewriting {len(todo)} wheel(s) into {dest}" + (f", GPU code kept for sm_{arch} only" if arch else ""))
        with ProcessPoolExecutor(max_workers=2) as pool:
            # A library without GPU code has no .nv_fatbin section: pruning leaves it as it is.
            futures = {n: pool.submit(prune_wheel, src, dst, arch) for n, (src, dst) in todo.items()}
            for name, future in futures.items():
                stats = future.result()
                total.add(stats)
                src, dst = todo[name]
                print(f"  {src.name}: {src.stat().st_size / target.MiB:.1f} -> {dst.stat().st_size / target.MiB:.1f} MiB"
                      + (f" ({stats.libraries} librar{'y' if stats.libraries == 1 else 'ies'}, "
                         f"{stats.zeroed_bytes / target.MiB:.0f} MiB of GPU code zeroed, "
                         f"{stats.kept_bytes / target.MiB:.0f} MiB kept)" if stats.libraries else ""))
    return {name: (dst, sha256_file(dst)) for name, (_src, dst) in jobs.items()}


def report_selection(selection: Selection) -> None:
    print(f"{selection.profile}: {len(selection.ship)} wheel(s) to ship")
    for override in selection.overrides:
        print(f"  override: {override['name']} {override['shipped']} shadows the image's {override['image']} "
              f"({override['because']})")
    for dropped in selection.dropped:
        print(f"  dropped: {dropped} (compiler toolchain: only UDFs need it; the image's copy serves imports)")
    for conflict in selection.conflicts:
        print(f"  warning: {conflict} (not shipped: the image's core packages are never replaced)")


if __name__ == "__main__":
    sys.exit(main())
