#!/usr/bin/env python3
"""Check the kit's parts, join the wheels they complete, and install them into a folder.

    python scripts/gpu_kit/unpack.py PARTS_DIR --target DIR [--profile base|rapids|all]

Run it after every transfer: it checks each part that has arrived (size and sha256 against
manifest.json), installs the wheels whose parts are all there and were not installed before,
and names the parts the others still wait for. Exit status: 0 when every wheel is installed,
2 while parts are still missing, 1 when a part is corrupt or an install failed (the wheels
that could be installed are installed all the same). Standard library only.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):                   # run as a file: make `gpu_kit` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpu_kit.install import (  # noqa: E402
    InstallError, install_batch, kit_environment, read_state, write_pth_bridge, write_state,
)
from gpu_kit.parts import KitError, check_parts, join_wheel, load_manifest, readiness  # noqa: E402

CHECKOUT = Path(__file__).resolve().parents[2]
EXIT_OK, EXIT_FAILED, EXIT_INCOMPLETE = 0, 1, 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts_dir", type=Path, help="folder with manifest.json and the parts received so far")
    parser.add_argument("--target", type=Path, required=True, help="folder to install into (goes on PYTHONPATH)")
    parser.add_argument("--profile", default="all", help="base, rapids or all (default: every profile in the kit)")
    parser.add_argument("--installer", choices=("auto", "pip", "builtin"), default="auto",
                        help="pip (python -m pip install --no-index --no-deps), builtin (unpack the wheels "
                             "here), or auto: pip when this Python has it")
    parser.add_argument("--work", type=Path, help="where joined wheels are staged (default: a temporary "
                                                   "folder beside --target, removed afterwards)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return unpack(args.parts_dir, args.target.resolve(), profile=args.profile, installer=args.installer,
                      work=args.work)
    except KitError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def unpack(parts_dir: Path, target: Path, *, profile: str = "all", installer: str = "auto",
           work: Path | None = None) -> int:
    manifest = load_manifest(parts_dir)
    known = list(manifest["profiles"])
    profiles = known if profile == "all" else [profile]
    if any(p not in known for p in profiles):
        raise KitError(f"profile {profile!r} is not in this kit (it has: {', '.join(known)})")
    states = check_parts(manifest, parts_dir, profiles)
    transfer_of = {name: t["transfer"] for t in manifest["transfers"] for name in t["parts"]}
    print_part_states(states, transfer_of)
    ready = readiness(manifest, states)
    target.mkdir(parents=True, exist_ok=True)
    installed = read_state(target)
    todo = [w for w in ready.ready if installed.get(w["name"]) != w["sha256"]]
    failed = False
    if todo:
        failed = not install_ready(todo, parts_dir, target, installed, installer=installer, work=work)
    else:
        print("nothing new to install")
    print_waiting(ready.waiting, ready.blocked, transfer_of)
    print_environment(target, write_pth_bridge(target), native_overrides(manifest, target, profiles))
    if ready.blocked or failed:
        return EXIT_FAILED
    return EXIT_INCOMPLETE if ready.waiting else EXIT_OK


def install_ready(wheels: list[dict], parts_dir: Path, target: Path, installed: dict[str, str], *,
                  installer: str, work: Path | None) -> bool:
    """Join and install ``wheels`` as one batch; record them. False when the batch failed."""
    staging = Path(tempfile.mkdtemp(prefix=".gpu-kit-join-", dir=work or target.parent))
    try:
        joined = [join_wheel(w, parts_dir, staging) for w in wheels]
        used = install_batch(joined, target, installer=installer)
    except (InstallError, KitError) as exc:
        print(f"error: installing {len(wheels)} wheel(s) failed: {exc}", file=sys.stderr)
        return False
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    installed.update({w["name"]: w["sha256"] for w in wheels})
    write_state(target, installed)
    print(f"installed {len(wheels)} wheel(s) into {target} with {used}:")
    for wheel in wheels:
        print(f"  {wheel['name']}")
    return True


def print_part_states(states: dict, transfer_of: dict[str, int]) -> None:
    ok = sum(1 for s in states.values() if s.state == "ok")
    print(f"parts: {ok} of {len(states)} present and verified (sha256)")
    for state in states.values():
        if state.state == "corrupt":
            print(f"error: part {state.name} (transfer {transfer_of.get(state.name, '?')}) is corrupt: "
                  f"{state.detail}; copy it again", file=sys.stderr)


def print_waiting(waiting: dict[str, list[str]], blocked: dict[str, list[str]], transfer_of: dict[str, int]) -> None:
    parts = sorted({p for ps in waiting.values() for p in ps})
    if parts:
        transfers = sorted({transfer_of.get(p, 0) for p in parts})
        print(f"still missing: {len(parts)} part(s) (transfer(s) {', '.join(map(str, transfers))}); "
              f"{len(waiting)} wheel(s) wait for them:")
        for wheel, missing in sorted(waiting.items()):
            print(f"  {wheel}: needs {', '.join(missing)}")
    for wheel, corrupt in sorted(blocked.items()):
        print(f"error: {wheel} not installed: part(s) {', '.join(corrupt)} corrupt", file=sys.stderr)
    if not parts and not blocked:
        print("every wheel of the kit is installed")


def native_overrides(manifest: dict, target: Path, profiles: list[str]) -> list[tuple[dict, list[Path]]]:
    """Installed overrides of image packages, with the shared libraries each one carries."""
    found = []
    for profile in profiles:
        for override in manifest.get("overrides", {}).get(profile, []):
            wheel = next((w for w in manifest["wheels"] if w.get("distribution") == override["name"]), None)
            if wheel is None:
                continue
            record = target / ("-".join(wheel["name"].split("-")[:2]) + ".dist-info") / "RECORD"
            if not record.is_file():
                continue                                  # not installed yet
            paths = [target / line.split(",")[0] for line in record.read_text().splitlines()]
            found.append((override, [p for p in paths if ".so" in p.name and p.is_file()]))
    return found


def override_libraries(overrides: list[tuple[dict, list[Path]]]) -> list[Path]:
    return [lib for _override, libraries in overrides for lib in libraries]


def print_environment(target: Path, bridge: str | None, overrides: list[tuple[dict, list[Path]]]) -> None:
    """The lines that put the checkout and the installed wheels on the import path, their
    native libraries on the loader's path, and the overrides' libraries first."""
    env = kit_environment(target, CHECKOUT, override_libraries(overrides), base={})
    print("\nuse them with (exactly these variables; nothing else is needed):")
    for name in ("PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PATH"):
        if env.get(name):
            print(f'export {name}="{env[name]}${{{name}:+:${name}}}"')
    if bridge:
        print(f"note: {bridge}")
    for override, _libraries in overrides:
        print(f"note: {override['name']} {override['shipped']} replaces the image's {override['image']} "
              f"({override['because']}); its libraries are in LD_PRELOAD above")
    print(f"then: python {CHECKOUT / 'scripts' / 'gpu_kit' / 'probe.py'} --out probe-results")


if __name__ == "__main__":
    sys.exit(main())
