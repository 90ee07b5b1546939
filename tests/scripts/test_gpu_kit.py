"""The GPU verification kit (scripts/gpu_kit), on a machine without a GPU and without network.

Packing and joining run on synthetic files and on small wheels built here; the resolver's
selection runs on a made-up resolution; the probe suite runs as a subprocess and must skip
every probe for want of a device.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / "scripts" / "gpu_kit"
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_kit import parts, resolve, target  # noqa: E402
from gpu_kit.parts import WheelFile, check_parts, join_wheel, pack, readiness  # noqa: E402

RECORD = tarfile.RECORDSIZE
LIMIT = 20 * RECORD                      # 200 KiB parts: small files stand in for wheels


def random_file(path: Path, size: int, seed: int) -> Path:
    path.write_bytes(random.Random(seed).randbytes(size))
    return path


def pack_files(files: list[Path], out: Path, limit: int = LIMIT, profile: str = "base") -> dict:
    return pack([WheelFile(f, profile) for f in files], out, part_limit=limit, transfer_limit=limit + 4 * RECORD,
                manifest_allowance=4 * RECORD)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[list[Path], dict, Path]:
    source = tmp_path / "wheels"
    source.mkdir()
    files = [random_file(source / "big-1.0-py3-none-any.whl", int(4.6 * LIMIT), 1),
             random_file(source / "mid-1.0-py3-none-any.whl", LIMIT // 2, 2),
             *(random_file(source / f"small{i}-1.0-py3-none-any.whl", 3000 + 997 * i, 10 + i) for i in range(6))]
    out = tmp_path / "parts"
    return files, pack_files(files, out), out


# ----------------------------------------------------------------------------- split and join
def test_a_file_bigger_than_a_part_travels_in_several_parts_and_is_rebuilt_identical(synthetic, tmp_path):
    files, manifest, out = synthetic
    big = next(w for w in manifest["wheels"] if w["name"].startswith("big"))
    assert len({s["part"] for s in big["slices"]}) >= 5
    joined = tmp_path / "joined"
    for wheel, original in zip(manifest["wheels"], files):
        rebuilt = join_wheel(wheel, out, joined)
        assert rebuilt.read_bytes() == original.read_bytes()


def test_no_part_exceeds_the_limit_and_all_but_the_last_are_nearly_full(tmp_path):
    for seed in range(5):
        rng = random.Random(seed)
        source = tmp_path / f"w{seed}"
        source.mkdir()
        files = [random_file(source / f"p{i}-1.0-py3-none-any.whl", rng.randint(500, 3 * LIMIT), seed * 100 + i)
                 for i in range(rng.randint(3, 12))]
        manifest = pack_files(files, tmp_path / f"out{seed}")
        sizes = [(tmp_path / f"out{seed}" / p["name"]).stat().st_size for p in manifest["parts"]]
        assert sizes == [p["size"] for p in manifest["parts"]]
        assert max(sizes) <= LIMIT
        assert all(size >= 0.9 * LIMIT for size in sizes[:-1]), sizes
        total = sum(f.stat().st_size for f in files)
        assert len(sizes) <= math.ceil(total / (0.9 * LIMIT))


def test_a_part_is_a_plain_tar_whose_slices_join_with_cat(synthetic):
    files, manifest, out = synthetic
    big = next(w for w in manifest["wheels"] if w["name"].startswith("big"))
    pieces = []
    for piece in big["slices"]:
        with tarfile.open(out / piece["part"]) as archive:
            pieces.append(archive.extractfile(piece["member"]).read())
    assert b"".join(pieces) == files[0].read_bytes()
    assert [p["member"] for p in big["slices"]] == [f"{big['name']}.slice-{k:03d}" for k in range(1, len(pieces) + 1)]


def test_profiles_never_share_a_part(tmp_path):
    source = tmp_path / "w"
    source.mkdir()
    wheels = [WheelFile(random_file(source / "a-1-py3-none-any.whl", 5000, 1), "base"),
              WheelFile(random_file(source / "b-1-py3-none-any.whl", 5000, 2), "rapids")]
    manifest = pack(wheels, tmp_path / "out", part_limit=LIMIT, transfer_limit=LIMIT * 3, manifest_allowance=RECORD * 4)
    assert [(p["profile"], p["wheels"]) for p in manifest["parts"]] == [
        ("base", ["a-1-py3-none-any.whl"]), ("rapids", ["b-1-py3-none-any.whl"])]


def test_the_manifest_lists_each_part_with_size_sha256_and_wheels_and_plans_transfers(synthetic):
    files, manifest, out = synthetic
    on_disk = json.loads((out / parts.MANIFEST_NAME).read_text())
    assert on_disk == manifest and manifest["format"] == parts.FORMAT
    for part in manifest["parts"]:
        path = out / part["name"]
        assert part["size"] == path.stat().st_size and part["sha256"] == sha(path)
        with tarfile.open(path) as archive:
            assert [m["member"] for m in part["members"]] == archive.getnames()
        assert part["wheels"] == list(dict.fromkeys(m["wheel"] for m in part["members"]))
    assert {w["name"] for w in manifest["wheels"]} == {f.name for f in files}
    for wheel, original in zip(manifest["wheels"], files):
        assert wheel["sha256"] == sha(original) and wheel["size"] == original.stat().st_size
        assert sum(s["length"] for s in wheel["slices"]) == wheel["size"]
    planned = [name for t in manifest["transfers"] for name in t["parts"]]
    assert planned == [p["name"] for p in manifest["parts"]]
    assert all(t["bytes"] + 4 * RECORD <= manifest["transfer_limit"] for t in manifest["transfers"])
    table = parts.part_table(manifest)
    for part in manifest["parts"]:
        assert part["name"] in table and str(part["size"]) in table


def test_a_corrupt_part_is_named_and_blocks_only_the_wheels_it_carries(synthetic):
    _, manifest, out = synthetic
    victim = manifest["parts"][1]
    with open(out / victim["name"], "r+b") as handle:
        handle.seek(700)
        byte = handle.read(1)
        handle.seek(700)
        handle.write(bytes([byte[0] ^ 0xFF]))
    states = check_parts(manifest, out)
    assert states[victim["name"]].state == "corrupt" and "sha256" in states[victim["name"]].detail
    assert all(s.state == "ok" for name, s in states.items() if name != victim["name"])
    ready = readiness(manifest, states)
    assert set(ready.blocked) == set(victim["wheels"])
    assert {w["name"] for w in ready.ready} == {w["name"] for w in manifest["wheels"]} - set(victim["wheels"])


def test_a_short_or_missing_part_is_named(synthetic):
    _, manifest, out = synthetic
    short, gone = manifest["parts"][0], manifest["parts"][-1]
    data = (out / short["name"]).read_bytes()
    (out / short["name"]).write_bytes(data[:-RECORD])
    states = check_parts(manifest, out)
    assert states[short["name"]].state == "corrupt" and "cut short" in states[short["name"]].detail
    (out / short["name"]).write_bytes(data)
    (out / gone["name"]).unlink()
    states = check_parts(manifest, out)
    assert states[gone["name"]].state == "missing"
    ready = readiness(manifest, states)
    assert set(ready.waiting) == set(gone["wheels"]) and all(v == [gone["name"]] for v in ready.waiting.values())
    assert len(ready.ready) == len(manifest["wheels"]) - len(gone["wheels"])


def test_join_refuses_a_wheel_whose_bytes_do_not_match(synthetic, tmp_path):
    _, manifest, out = synthetic
    wheel = dict(manifest["wheels"][0], sha256="0" * 64)
    with pytest.raises(parts.KitError, match="expected 0000"):
        join_wheel(wheel, out, tmp_path / "joined")
    assert not list((tmp_path / "joined").glob("*.whl"))


# ----------------------------------------------------------------------------- unpack on the host
def make_wheel(folder: Path, name: str, files: dict[str, bytes], version: str = "1.0") -> Path:
    """A minimal pure-Python wheel that pip installs."""
    info = f"{name}-{version}.dist-info"
    entries = {**files,
               f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    lines = []
    for path, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    lines.append(f"{info}/RECORD,,")
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name_, data in entries.items():
            archive.writestr(name_, data)
        archive.writestr(f"{info}/RECORD", "\n".join(lines) + "\n")
    return path


@pytest.fixture
def demo_kit(tmp_path: Path) -> tuple[dict, Path, bytes]:
    """Three wheels sharing the namespace package ``kitdemo``; one is larger than a part."""
    source = tmp_path / "src"
    source.mkdir()
    blob = random.Random(5).randbytes(int(2.5 * LIMIT))
    wheels = [make_wheel(source, "kitdemo_a", {"kitdemo/a.py": b"NAME = 'a'\n"}),
              make_wheel(source, "kitdemo_b", {"kitdemo/b.py": b"NAME = 'b'\n"}),
              make_wheel(source, "kitdemo_big", {"kitdemo/big/__init__.py": b"", "kitdemo/big/blob.bin": blob})]
    out = tmp_path / "kit"
    return pack_files(wheels, out), out, blob


def unpack(parts_dir: Path, target_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KIT / "unpack.py"), str(parts_dir), "--target", str(target_dir), *extra],
                          capture_output=True, text=True, timeout=300)


def imports(target_dir: Path, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(target_dir)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("installer", ["pip", "builtin"])
def test_unpack_installs_what_has_arrived_names_what_is_missing_and_finishes_later(demo_kit, tmp_path, installer):
    manifest, kit, blob = demo_kit
    big = next(w for w in manifest["wheels"] if w["name"].startswith("kitdemo_big"))
    withheld = big["slices"][-1]["part"]
    inbox, installed = tmp_path / "inbox", tmp_path / "site"
    inbox.mkdir()
    for name in [parts.MANIFEST_NAME, *(p["name"] for p in manifest["parts"] if p["name"] != withheld)]:
        (inbox / name).write_bytes((kit / name).read_bytes())

    first = unpack(inbox, installed, "--installer", installer)
    assert first.returncode == 2, first.stderr
    assert f"needs {withheld}" in first.stdout and big["name"] in first.stdout
    assert f'export PYTHONPATH="{ROOT}:{installed}' in first.stdout
    assert imports(installed, "import kitdemo.a, kitdemo.b").returncode == 0
    assert imports(installed, "import kitdemo.big").returncode != 0

    (inbox / withheld).write_bytes((kit / withheld).read_bytes())
    second = unpack(inbox, installed, "--installer", installer)
    assert second.returncode == 0, second.stderr
    assert "every wheel of the kit is installed" in second.stdout
    assert "kitdemo_a" not in second.stdout.split("use them with")[0]       # not installed twice
    check = imports(installed, "import kitdemo.a, kitdemo.b, pathlib, kitdemo.big as big; "
                               "print(pathlib.Path(big.__file__).with_name('blob.bin').stat().st_size)")
    assert check.returncode == 0, check.stderr
    assert int(check.stdout) == len(blob)
    assert unpack(inbox, installed, "--installer", installer).stdout.count("nothing new to install") == 1


def test_pth_files_of_the_kit_run_at_start_up_and_an_image_sitecustomize_still_runs(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    hook = b"import builtins; builtins.KIT_PTH_RAN = True\n"
    wheel = make_wheel(source, "kitdemo_pth", {"kitdemo_pth_hook.py": hook, "kitdemo_pth.pth": b"import kitdemo_pth_hook\n"})
    kit, installed, image = tmp_path / "kit", tmp_path / "site", tmp_path / "image"
    pack_files([wheel], kit)
    image.mkdir()
    (image / "sitecustomize.py").write_text("import builtins; builtins.IMAGE_SITECUSTOMIZE_RAN = True\n")
    done = unpack(kit, installed, "--installer", "builtin")
    assert done.returncode == 0 and "kitdemo_pth.pth are read at start-up" in done.stdout
    env = {**os.environ, "PYTHONPATH": f"{installed}{os.pathsep}{image}"}
    check = subprocess.run([sys.executable, "-c", "import builtins; print(getattr(builtins, 'KIT_PTH_RAN', False), "
                                                  "getattr(builtins, 'IMAGE_SITECUSTOMIZE_RAN', False))"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert check.stdout.split() == ["True", "True"], check.stderr


def test_unpack_names_a_corrupt_part_and_exits_1(demo_kit, tmp_path):
    manifest, kit, _ = demo_kit
    victim = manifest["parts"][0]
    data = bytearray((kit / victim["name"]).read_bytes())
    data[600] ^= 0xFF
    (kit / victim["name"]).write_bytes(bytes(data))
    done = unpack(kit, tmp_path / "site", "--installer", "builtin")
    assert done.returncode == 1
    assert f"part {victim['name']}" in done.stderr and "corrupt" in done.stderr
    for wheel in victim["wheels"]:
        assert f"{wheel} not installed" in done.stderr


def test_unpack_without_a_manifest_says_what_is_missing(tmp_path):
    done = unpack(tmp_path, tmp_path / "site")
    assert done.returncode == 1 and "manifest.json is missing" in done.stderr


# ----------------------------------------------------------------------------- what to ship
def dist(name: str, version: str, *requires: str) -> resolve.Dist:
    return resolve.Dist(name, version, requires, f"file:///w/{name}-{version}-py3-none-any.whl", "")


def test_select_ships_what_the_image_lacks_overrides_old_libraries_and_an_old_numpy():
    resolved = {d.name: d for d in (
        dist("kitpkg", "2.0", "libx>=2", "numpy<2.5", "dask[dataframe]>=1", "testonly; extra == 'test'",
             "oldpython; python_version < '3.11'", "torch"),
        dist("libx", "2.1", "liby"),
        dist("liby", "1.0"),
        dist("dask", "2026.1", "toolz", "pandas>=2; extra == 'dataframe'", "bokeh; extra == 'diagnostics'"),
        dist("numpy", "2.4.6"), dist("toolz", "1.2"), dist("pandas", "3.0.6"), dist("bokeh", "3.0"),
        dist("testonly", "1.0"), dist("oldpython", "1.0"),
    )}
    present = {"libx": "1.0", "numpy": "2.5.5", "torch": "2.11.0+cu130", "pandas": "3.0.6", "toolz": "1.0"}
    chosen = resolve.select("base", ["kitpkg>=1", "torch>=2.10,<2.14"], resolved, present)
    assert sorted(chosen.ship) == ["dask", "kitpkg", "libx", "liby", "numpy"]
    assert chosen.overrides == [
        {"name": "libx", "image": "1.0", "shipped": "2.1", "because": "kitpkg 2.0 needs libx>=2"},
        {"name": "numpy", "image": "2.5.5", "shipped": "2.4.6", "because": "kitpkg 2.0 needs numpy<2.5"}]
    assert chosen.conflicts == []


def test_select_reports_a_conflict_on_a_core_package_it_never_ships():
    resolved = {d.name: d for d in (dist("kitpkg", "2.0", "pandas<3"), dist("pandas", "2.3.3"))}
    chosen = resolve.select("base", ["kitpkg"], resolved, {"pandas": "3.0.6"})
    assert sorted(chosen.ship) == ["kitpkg"]
    assert chosen.conflicts == ["kitpkg 2.0 needs pandas<3, but the image has pandas 3.0.6"]


def test_select_cuts_at_an_earlier_profile_and_reports_a_missing_core_package():
    resolved = {d.name: d for d in (dist("cudf", "26.10", "rmm==26.10.*", "scipy"), dist("rmm", "26.10"))}
    chosen = resolve.select("rapids", ["cudf==26.10.*"], resolved, {"rmm": "26.10"})
    assert sorted(chosen.ship) == ["cudf"]
    assert chosen.conflicts == ["cudf 26.10 needs scipy, but the image has no scipy"]


def test_the_compiler_toolchain_is_never_shipped_and_is_reported_as_dropped():
    resolved = {d.name: d for d in (dist("cudf", "26.10", "numba<0.65,>=0.60", "numba-cuda-mlir[cu13]>=0.3", "libcudf"),
                                    dist("numba", "0.64.0", "llvmlite<0.47"), dist("numba-cuda-mlir", "0.3.0"),
                                    dist("llvmlite", "0.46.0"), dist("libcudf", "26.10"))}
    chosen = resolve.select("rapids", ["cudf==26.10.*"], resolved, {"numba": "0.68.0", "llvmlite": "0.50.0"})
    assert sorted(chosen.ship) == ["cudf", "libcudf"]
    assert [d.split(" ")[0] for d in chosen.dropped] == ["numba", "numba-cuda-mlir"]
    assert chosen.overrides == [] and chosen.conflicts == []


def test_profile_roots_come_from_pyproject_and_leave_the_image_alone():
    base, rapids = target.profile_roots("base"), target.profile_roots("rapids")
    names = lambda reqs: {target._name(r) for r in reqs}  # noqa: E731
    assert {"pyarrow", "pydantic", "xgboost-cu13", "dask-cuda", "rmm-cu13", "nvidia-ml-py", "lightgbm",
            "catboost"} <= names(base)
    assert names(rapids) == {"cudf-cu13", "cuml-cu13", "dask-cudf-cu13"}      # raft-dask: target.RAPIDS_LEFT_OUT
    assert names(target.profile_roots("rapids", left_out=frozenset())) == names(rapids) | {"raft-dask-cu13"}
    assert names(target.profile_roots("base", left_out=frozenset({"polars"}))) == names(base) - {"polars"}
    rmm = next(r for r in base if target._name(r) == "rmm-cu13")
    dask_cuda = next(r for r in base if target._name(r) == "dask-cuda")
    assert rmm.removeprefix("rmm-cu13") == dask_cuda.removeprefix("dask-cuda")
    to_resolve = names(resolve.resolution_requirements([*base, *rapids], list(target.IMAGE_REQUIREMENTS)))
    assert "torch" not in to_resolve                 # its CUDA 13.0 pins would block cuML (README)
    assert {"cudf-cu13", "xgboost-cu13", "cupy-cuda13x", "numpy", "pandas"} <= to_resolve


def test_pip_is_asked_for_python_3_12_manylinux_x86_64_wheels_only():
    options = resolve.pip_target_options()
    assert options[:5] == ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    platforms = [options[i + 1] for i, o in enumerate(options) if o == "--platform"]
    assert [f"manylinux_2_{n}_x86_64" for n in range(17, 40)] == platforms[:23]
    assert {"manylinux2014_x86_64", "manylinux1_x86_64"} <= set(platforms)


def test_a_host_freeze_file_replaces_the_assumed_image(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("# from the host\nTorch==2.11.0+cu130\nnumpy==2.3.5\nmylib @ file:///x/mylib.whl\n-e git+x#egg=y\n")
    found = resolve.read_freeze(freeze)
    assert found == {"torch": "2.11.0+cu130", "numpy": "2.3.5", "mylib": None}
    assert resolve.image_requirements(found) == ["torch==2.11.0+cu130"]     # NumPy may be shipped


def test_the_parse_of_a_pip_report_keeps_wheel_url_hash_and_requirements():
    report = {"install": [{"metadata": {"name": "Rmm_Cu13", "version": "26.10.0", "requires_dist": ["numpy>=2"]},
                           "download_info": {"url": "file:///w/rmm_cu13-26.10.0-cp311-abi3-manylinux_2_28_x86_64.whl",
                                             "archive_info": {"hashes": {"sha256": "ab" * 32}}}}]}
    (only,) = resolve.parse_report(report).values()
    assert (only.name, only.version, only.requires, only.sha256) == ("rmm-cu13", "26.10.0", ("numpy>=2",), "ab" * 32)
    assert only.filename == "rmm_cu13-26.10.0-cp311-abi3-manylinux_2_28_x86_64.whl"


# ----------------------------------------------------------------------------- probes
def no_gpu_here() -> bool:
    from pipeline.backends.devices.detect import probe_nvml

    return not probe_nvml().devices


def run_probes(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(KIT / "probe.py"), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, cwd=out.parent)


@pytest.mark.skipif(not no_gpu_here(), reason="a GPU is present: the no-device path does not apply")
def test_without_a_gpu_every_probe_is_skipped_for_no_device_and_the_suite_exits_0(tmp_path):
    from gpu_kit.probes import PROBES

    out = tmp_path / "results"
    done = run_probes(out)
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted([*(f"{name}.json" for name in PROBES), "summary.json"])
    assert len(written) <= 8 and len(PROBES) <= 7      # the results channel takes eight files
    for name in PROBES:
        result = json.loads((out / f"{name}.json").read_text())
        assert result["probe"] == name and result["status"] == "skipped"
        assert result["reason"].startswith("no device")
        assert {"torch", "cupy", "xgboost", "cudf", "cuml"} <= set(result["versions"]) and "seconds" in result
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "skipped" and summary["exit_code"] == 0
    assert summary["counts"] == {"passed": 0, "failed": 0, "skipped": len(PROBES)}
    assert set(summary["probes"]) == set(PROBES)


@pytest.mark.skipif(not no_gpu_here(), reason="a GPU is present: the no-device path does not apply")
def test_only_runs_the_named_probe_and_an_unknown_name_is_an_error(tmp_path):
    out = tmp_path / "results"
    done = run_probes(out, "--only", "xgboost_cuda")
    assert done.returncode == 0
    assert sorted(p.name for p in out.iterdir()) == ["summary.json", "xgboost_cuda.json"]
    bad = run_probes(tmp_path / "other", "--only", "warp_drive")
    assert bad.returncode == 2 and "warp_drive" in bad.stderr


def test_the_probe_configs_are_valid_pipeline_configs(tmp_path):
    from gpu_kit import probe_data

    from pipeline.config import load_config

    models = {"mlp": probe_data.torch_stage("cuda"),
              "xgb": {"kind": "train", "inputs": ["features"], "model": "xgboost"}}
    configs = [
        probe_data.config("torch", "churn.csv", "cpu", {"mlp": models["mlp"]}, ops=probe_data.feature_ops(one_hot=False)),
        probe_data.config("gpu", "churn.csv", "gpu", models),
        probe_data.config("parts", "parts/part-*.csv", "gpu", {"xgb": models["xgb"]}, partitioned=True,
                          cluster={"n_workers": 1, "memory_limit": "8GiB"}),
    ]
    for index, config in enumerate(configs):
        loaded = load_config(probe_data.write_config(tmp_path / f"c{index}.yaml", config))
        assert list(loaded.stages) == list(config["stages"])
    table = probe_data.churn_table(500)
    assert set(probe_data.NUMERIC + probe_data.CATEGORICAL + (probe_data.TARGET,)) <= set(table.columns)
    assert table["total"].isna().any() and set(table[probe_data.TARGET]) == {"Yes", "No"}


# ------------------------------------------------------------------ the probes' own code on CPUs
@pytest.mark.slow
def test_ddp_probe_checks_pass_on_cpu_ranks_and_a_local_cluster(tmp_path):
    """The DDP probe's checks, run on gloo ranks and a two-worker LocalCluster: on the H200 the
    probe failed two checks of its own making (the cluster's client was not made current, so the
    training found no cluster; the metrics were looked up at the wrong level), not the DDP path."""
    from gpu_kit.probes import ddp_checks

    result = ddp_checks(tmp_path, "cpu", 2, cluster_device="cpu", rows=2_000)     # the GPU host's: 20,000
    failed = [c for c in result["checks"] if not c["ok"]]
    assert result["status"] == "passed", failed
    names = [c["check"] for c in result["checks"]]
    assert "cluster: one rank per worker" in names and "the model was evaluated" in names
    assert result["details"]["cluster"]["distributed"]["ranks"] == 2


# ------------------------------------------------------------------ the driver, call by call
def drive(inbox: Path, tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """One call of the driver, in this process (its steps and its CPU side are processes of their own)."""
    import contextlib
    import io

    from gpu_kit import drive as driver_module

    argv = ["--parts", str(inbox), "--store", str(tmp_path / "store"), "--target", str(tmp_path / "site"),
            "--results", str(tmp_path / "results"), "--data", str(tmp_path / "data"), "--out", str(out),
            "--budget", "240", *extra]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        rc = driver_module.main(argv)
    return subprocess.CompletedProcess(argv, rc, stdout.getvalue(), stderr.getvalue())


@pytest.mark.skipif(not no_gpu_here(), reason="a GPU is present: the no-device path does not apply")
def test_the_driver_gathers_each_calls_parts_installs_what_arrived_and_returns_its_results(demo_kit, tmp_path):
    manifest, kit, _ = demo_kit
    withheld = manifest["parts"][-1]["name"]
    first_call, second_call = tmp_path / "carry" / "t1", tmp_path / "carry" / "t2"
    for folder, names in ((first_call, [p["name"] for p in manifest["parts"] if p["name"] != withheld]),
                          (second_call, [withheld])):
        folder.mkdir(parents=True)
        for name in [parts.MANIFEST_NAME, *names]:
            (folder / name).write_bytes((kit / name).read_bytes())
    second_call.rename(tmp_path / "t2.hold")                       # the second call's carry has not come yet

    first = drive(tmp_path / "carry", tmp_path, tmp_path / "out1", "--cpu-steps", "")
    assert first.returncode == 0, first.stderr
    state = json.loads((tmp_path / "out1" / "drive.json").read_text())
    assert state["device"]["base_installed"] is False and state["steps"]["unpack"]["rc"] == 2
    assert "GPU steps wait for RAPIDS" in first.stdout
    assert sorted(p.name for p in (tmp_path / "out1").iterdir()) == ["drive.json", "results.tar.gz"]

    shutil.rmtree(first_call)                                      # a later call's carry replaces the folder
    (tmp_path / "t2.hold").rename(second_call)
    second = drive(tmp_path / "carry", tmp_path, tmp_path / "out2", "--cpu-steps", "")
    assert second.returncode == 0, second.stderr
    state = json.loads((tmp_path / "out2" / "drive.json").read_text())
    assert state["calls"] == 2 and state["device"]["base_installed"] is True
    assert state["device"]["rapids"] is False                      # the demo kit has no cuDF
    assert [h["rc"] for h in state["steps"]["unpack"]["history"]] == [2, 0]
    assert withheld in state["steps"]["unpack"]["history"][1]["copied"]
    with tarfile.open(tmp_path / "out2" / "results.tar.gz") as tar:
        names = tar.getnames()
    assert "results/unpack.log" in names and "results/drive.json" in names


def test_a_dry_run_rehearses_every_step_in_order_and_the_cpu_side_in_the_background(demo_kit, tmp_path):
    _, kit, _ = demo_kit
    shutil.copytree(kit, tmp_path / "carry" / "t1")
    done = drive(tmp_path / "carry", tmp_path, tmp_path / "out", "--dry-run", "--wait-cpu",
                 "--cpu-steps", "gen_1m,cpu_1m,auto_cpu")
    assert done.returncode == 0, done.stderr
    shown = [line.split("]")[0].lstrip("[") for line in done.stdout.splitlines() if "] dry run:" in line]
    assert shown == ["smoke", "e2e", "serve_calls_xgb", "serve_calls_mlp", "members", "parity", "gpu_1m", "gpu_10m",
                     "auto_gpu", "gpu_tests", "events"]
    assert "--engines pandas,pipeline-gpu,polars" in done.stdout
    assert "--device gpu --sides  --calls 1,16,64,256,1024,4096,16384" in done.stdout
    assert "probe_members.py --budget" in done.stdout
    assert "configs/churn.yaml --device gpu" in done.stdout and "parity configs/churn.yaml" in done.stdout
    state = json.loads((tmp_path / "out" / "drive.json").read_text())
    assert state["steps"]["unpack"]["rc"] == 0                     # unpacking is real, even in a rehearsal
    background = (tmp_path / "results" / "bg" / "background.log").read_text()
    order = [line.split("]")[0].lstrip("[") for line in background.splitlines() if "] dry run:" in line]
    assert order == ["gen_1m", "cpu_1m", "auto_cpu"]
    assert "--device cpu" in background and "stages.auto.time_limit=60s" in background
    assert set(state["background"]) >= {"gen_1m", "cpu_1m", "auto_cpu", "started"}


def test_an_unknown_cpu_step_is_refused(tmp_path):
    from gpu_kit import drive as driver_module

    args = driver_module.parse_args(["--out", str(tmp_path / "out"), "--results", str(tmp_path / "results"),
                                     "--store", str(tmp_path / "store"), "--target", str(tmp_path / "site"),
                                     "--parts", str(tmp_path / "carry"), "--cpu-steps", "gen_1m,bake"])
    with pytest.raises(SystemExit, match="unknown bake"):
        driver_module.Driver(args).main()


def test_summarize_compares_each_stage_and_test_metric_of_the_gpu_and_cpu_runs(tmp_path, capsys):
    def run(stages: dict, aucs: dict) -> dict:
        return {"duration_s": sum(stages.values()), "stages": stages,
                "metrics": {"models": {m: {"roc_auc": v} for m, v in aucs.items()}}}

    gpu_state = {"steps": {"bench_10m": {"record": run({"split": 2.0, "xgb": 1.0}, {"xgb": 0.881})}}, "background": {}}
    cpu_state = {"steps": {}, "background": {"cpu_10m": {"record": run({"split": 4.0, "xgb": 20.0}, {"xgb": 0.882}),
                                                         "load_before": [0.5, 0.4, 0.3],
                                                         "load_after": [8.0, 3.0, 1.0]}}}
    archives = []
    for name, state in (("gpu", gpu_state), ("cpu", cpu_state)):
        (tmp_path / name / "results").mkdir(parents=True)
        (tmp_path / name / "results" / "drive.json").write_text(json.dumps(state))
        archive = tmp_path / f"{name}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            tar.add(tmp_path / name / "results", arcname="results")
        archives.append(archive)
    out = tmp_path / "summary.json"
    from gpu_kit import summarize

    assert summarize.main([*map(str, archives), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    summary = json.loads(out.read_text())["10M rows"]
    assert summary["run"] == {"cpu_s": 24.0, "gpu_s": 3.0, "ratio": 8.0}
    assert summary["stages"]["xgb"]["ratio"] == 20.0 and summary["stages"]["split"]["ratio"] == 2.0
    assert abs(summary["models"]["xgb"]["difference"] + 0.001) < 1e-12
    assert summary["cpu_load"] == {"load_before": [0.5, 0.4, 0.3], "load_after": [8.0, 3.0, 1.0]}
    assert "| **the run** | **24.00** | **3.00** | **8.00** |" in printed
    assert "1M rows: not in the results" in printed


def test_a_part_that_vanishes_after_its_check_is_named_not_a_traceback(synthetic, tmp_path):
    _, manifest, out = synthetic
    big = next(w for w in manifest["wheels"] if w["name"].startswith("big"))
    (out / big["slices"][-1]["part"]).unlink()
    with pytest.raises(parts.KitError, match=f"{big['slices'][-1]['part']} could not be read while joining"):
        join_wheel(big, out, tmp_path / "joined")
    assert not list((tmp_path / "joined").glob("*.joining"))


def test_the_kit_environment_puts_the_images_cuda_libraries_on_the_loader_path_and_preloads_overrides(
        tmp_path, monkeypatch):
    """A RAPIDS library on PYTHONPATH finds cuFFT by an RPATH into the kit, where it is not (on the
    H200, without this, `import cuml` failed on libcufft.so.12 in a fresh process)."""
    from gpu_kit.install import kit_environment

    image = tmp_path / "image-site"
    for lib in ("nvidia/cu13/lib", "nvidia/nccl/lib"):
        (image / lib).mkdir(parents=True)
    (image / "nvidia" / "not-a-lib-folder").mkdir()
    kit_site = tmp_path / "kit"
    (kit_site / "nvidia" / "cu13" / "lib").mkdir(parents=True)
    override = kit_site / "nvidia" / "cu13" / "lib" / "libnvJitLink.so.13"
    override.write_bytes(b"")
    monkeypatch.setattr("site.getsitepackages", lambda: [str(image)])
    monkeypatch.setattr("sysconfig.get_paths", lambda: {"purelib": str(image)})
    env = kit_environment(kit_site, tmp_path / "checkout", [override],
                          base={"LD_LIBRARY_PATH": "/opt/other", "PATH": "/usr/bin"})
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(tmp_path / "checkout"), str(kit_site)]
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        str(kit_site / "nvidia" / "cu13" / "lib"), str(image / "nvidia" / "cu13" / "lib"),
        str(image / "nvidia" / "nccl" / "lib"), "/opt/other"]
    assert env["LD_PRELOAD"] == str(override)
    assert env["PATH"] == f"{kit_site / 'bin'}{os.pathsep}/usr/bin"


def test_a_timed_run_waits_while_another_holds_the_host_and_an_untimed_one_does_not(tmp_path):
    import fcntl
    import threading
    import time

    from gpu_kit import drive as driver_module

    args = driver_module.parse_args(["--out", str(tmp_path / "out"), "--results", str(tmp_path / "results"),
                                     "--store", str(tmp_path / "store"), "--target", str(tmp_path / "site")])
    driver = driver_module.Driver(args)
    entered: list[str] = []

    def run(name: str, timed: bool) -> None:
        with driver.machine_to_itself(name, timed=timed):
            entered.append(name)

    with open(tmp_path / "results" / "timing.lock", "a") as held:       # the CPU side's 10M run, say
        fcntl.flock(held, fcntl.LOCK_EX)
        timed = threading.Thread(target=run, args=("bench_10m", True))
        untimed = threading.Thread(target=run, args=("smoke", False))
        timed.start()
        untimed.start()
        untimed.join(timeout=10)
        time.sleep(0.5)
        assert entered == ["smoke"]                                     # the timed one is still waiting
        fcntl.flock(held, fcntl.LOCK_UN)
    timed.join(timeout=10)
    assert entered == ["smoke", "bench_10m"]
