"""The GPU kit against a CPU twin of the GPU image: ``import cudf, cuml`` from the kit's parts.

The twin (``.venv-gpu-twin``, made by ``scripts/gpu_kit/make_twin.sh``) holds the image's own
versions of what the kit relies on (numpy, pandas, cupy, numba, numba-cuda, the nvidia-* CUDA
library wheels...) and no torch, so nothing preloads CUDA libraries for RAPIDS. The kit's parts
(``gpu-kit/parts``) come from ``scripts/gpu_kit/prepare.py``. Both are large and made by hand,
so the tests skip where either is missing (in CI).

Each test unpacks the parts with the twin's Python, then starts a fresh interpreter whose
environment is only HOME, a PATH with the twin's bin, and the ``export`` lines that unpack
printed. Without a GPU or driver, importing succeeds; data operations would not.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TWIN_PYTHON = ROOT / ".venv-gpu-twin" / "bin" / "python"
PARTS = ROOT / "gpu-kit" / "parts"
UNPACK = ROOT / "scripts" / "gpu_kit" / "unpack.py"
BASE_PATH = f"{TWIN_PYTHON.parent}:/usr/bin:/bin"
EXPORT = re.compile(r'^export (\w+)="(.*)"$')

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not TWIN_PYTHON.exists() or not (PARTS / "manifest.json").exists(),
        reason=f"needs the image twin {TWIN_PYTHON.relative_to(ROOT)} (scripts/gpu_kit/make_twin.sh) and a "
               f"built kit {(PARTS / 'manifest.json').relative_to(ROOT)} (scripts/gpu_kit/prepare.py)",
    ),
]

IMPORT = """
import cudf, cuml
from cuml.ensemble import RandomForestClassifier
from cuml.linear_model import LogisticRegression
print(cudf.__version__, cuml.__version__)
"""

# What the loader mapped after the import, and the NumPy shim, as one JSON line.
LOADED = IMPORT + """
import json, numpy
maps = {line.split()[-1] for line in open("/proc/self/maps") if ".so" in line}
print(json.dumps({"libs": sorted(maps), "row_stack": getattr(numpy, "row_stack", None) is numpy.vstack}))
"""

# Loads what libcuml needs, in cuml's order, then libcuvs, libnvforest and libcuml by path: the
# loader's own error, which RAPIDS' loaders swallow, so that cuml reports only
# "libcuml.so: cannot open shared object file".
DLOPEN_LIBCUML = """
import ctypes, cudf, rapids_logger, librmm, libraft
for module in (rapids_logger, librmm, libraft):
    module.load_library()
lib64 = "{target}/{{}}/lib64/{{}}.so"
for name in ("libcuvs", "libnvforest", "libcuml"):
    try:
        ctypes.CDLL(lib64.format(name, name), ctypes.RTLD_LOCAL)
    except OSError as exc:
        print(f"{{name}}: {{exc}}")
        break
else:
    print("libcuml: loaded")
"""


def parse_exports(stdout: str, base: dict[str, str]) -> dict[str, str]:
    """The variables of unpack's ``export NAME="VALUE${NAME:+:$NAME}"`` lines, each tail
    expanded against ``base`` as the shell would."""
    env = {}
    for line in stdout.splitlines():
        match = EXPORT.match(line.strip())
        if not match:
            continue
        name, value = match.groups()
        tail = f"${{{name}:+:${name}}}"
        assert value.endswith(tail), f"unexpected export line: {line}"
        value = value[: -len(tail)] + (f":{base[name]}" if base.get(name) else "")
        assert "$" not in value, f"unexpanded variable in: {line}"
        env[name] = value
    return env


@pytest.fixture(scope="module")
def kit(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """The kit unpacked into a fresh folder: (target, the environment unpack prints)."""
    work = tmp_path_factory.mktemp("gpu-kit-twin")
    # A snapshot of the parts: prepare.py may be rewriting gpu-kit/parts meanwhile.
    parts = shutil.copytree(PARTS, work / "parts")
    target = work / "site"
    done = subprocess.run(
        [str(TWIN_PYTHON), str(UNPACK), str(parts), "--target", str(target)],
        env={"HOME": os.environ.get("HOME", str(work)), "PATH": BASE_PATH},
        capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, f"unpack exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    exports = parse_exports(done.stdout, {"PATH": BASE_PATH})
    assert {"PYTHONPATH", "LD_LIBRARY_PATH", "PATH"} <= exports.keys(), done.stdout
    return target, {"HOME": os.environ.get("HOME", str(work)), "PATH": BASE_PATH, **exports}


def run_twin(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(TWIN_PYTHON), "-c", code], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_cudf_and_cuml_import_with_the_kit_environment(kit, tmp_path):
    target, env = kit
    done = run_twin(LOADED, env, tmp_path)
    assert done.returncode == 0, f"import failed with the kit's environment {env}:\n{done.stderr}"
    versions, loaded = done.stdout.strip().splitlines()[-2:]
    assert re.fullmatch(r"26\.\d+\.\d+ 26\.\d+\.\d+", versions), done.stdout
    info = json.loads(loaded)
    assert info["row_stack"], "sitecustomize did not give numpy the row_stack that numba-cuda calls"
    jitlink = [lib for lib in info["libs"] if Path(lib).name.startswith("libnvJitLink")]
    assert jitlink and all(lib.startswith(str(target)) for lib in jitlink), \
        f"nvJitLink must be the kit's (LD_PRELOAD), not the image's: {jitlink}"
    cufft = [lib for lib in info["libs"] if Path(lib).name.startswith("libcufft.so")]
    assert cufft and not cufft[0].startswith(str(target)), f"cuFFT should come from the image: {cufft}"


@pytest.mark.parametrize(("dropped", "error"), [
    # The first of the image's CUDA libraries that a RAPIDS library needs (cuBLAS for libcuvs,
    # cuFFT for libcuml): they are in the image's nvidia/cu13/lib, not where RAPIDS' RPATH looks.
    ("LD_LIBRARY_PATH", r"libcu\w+: (?P<missing>lib(cublas|cublasLt|cufft|cusolver|cusparse|curand)\.so\.\d+): "
                        r"cannot open shared object file"),
    ("LD_PRELOAD", r"libcuvs: \S+/libcuvs\.so: undefined symbol: __nvJitLink\w+_13_[3-9]"),
], ids=["without-LD_LIBRARY_PATH", "without-LD_PRELOAD"])
def test_each_native_variable_is_needed(kit, tmp_path, dropped, error):
    """Controls: without LD_LIBRARY_PATH the image's CUDA libraries (cuBLAS, cuFFT...) are not
    found; without LD_PRELOAD the image's older nvJitLink is loaded first and RAPIDS misses its
    13.3 symbols. Either way ``import cuml`` fails."""
    target, env = kit
    env = {k: v for k, v in env.items() if k != dropped}
    done = run_twin(IMPORT, env, tmp_path)
    assert done.returncode != 0 and "ImportError: libcuml.so: cannot open shared object file" in done.stderr, \
        f"import cuml without {dropped}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    done = run_twin(DLOPEN_LIBCUML.format(target=target), env, tmp_path)
    assert done.returncode == 0, done.stderr
    match = re.search(error, done.stdout)
    assert match, done.stdout
    if "missing" in match.groupdict():
        image_libs = TWIN_PYTHON.parents[1].glob(f"lib/python3*/site-packages/nvidia/*/lib/{match['missing']}")
        assert any(image_libs), f"{match['missing']} should be one of the image's libraries"
