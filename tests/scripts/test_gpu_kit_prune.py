"""Pruning a wheel's GPU code to one architecture (scripts/gpu_kit/prune.py), on the CPU.

A synthetic ELF shared library with a ``.nv_fatbin`` section laid out as nvcc writes it stands
in for a RAPIDS library; where the kit's real wheels have been downloaded (gpu-kit/wheels and
gpu-kit/wheels-sm_90, by prepare.py) the same checks run on them too. Also: the package calls
no cuDF user-defined function, so the kit can leave the CUDA compiler toolchain out.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from gpu_kit import prune  # noqa: E402
from gpu_kit.prune import (  # noqa: E402
    FATBIN_MAGIC, KIND_ELF, KIND_PTX, elf_section, fatbin_entries, parse_arch, prune_library, prune_wheel,
)

ENTRY_HEADER = 64


def entry(kind: int, arch: int, payload: bytes) -> bytes:
    """One fat binary entry: nvcc's 64-byte header (kind, version, header size, payload size,
    ..., arch at byte 28) and its payload."""
    header = bytearray(ENTRY_HEADER)
    struct.pack_into("<HHIQ", header, 0, kind, 0x101, ENTRY_HEADER, len(payload))
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<Q", header, 40, 0x8011)
    return bytes(header) + payload


def container(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(body)) + body


def elf_with_section(name: str, content: bytes) -> bytes:
    """A minimal ELF64 little-endian shared object: the null section, ``name``, .shstrtab."""
    names = b"\0" + name.encode() + b"\0.shstrtab\0"
    header_size, section_header = 64, 64
    data_offset = header_size
    strings_offset = data_offset + len(content)
    table_offset = (strings_offset + len(names) + 7) // 8 * 8
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    elf = bytearray(ident + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, table_offset, 0, header_size, 0, 0,
                                        section_header, 3, 2))
    elf += content + names
    elf += bytes(table_offset - len(elf))
    elf += bytes(section_header)                                                   # SHT_NULL
    elf += struct.pack("<IIQQQQIIQQ", 1, 1, 2, 0, data_offset, len(content), 0, 0, 8, 0)   # PROGBITS, alloc
    elf += struct.pack("<IIQQQQIIQQ", 2 + len(name), 3, 0, 0, strings_offset, len(names), 0, 0, 1, 0)  # STRTAB
    return bytes(elf)


@pytest.fixture
def library() -> tuple[bytes, dict[tuple[int, int], bytes]]:
    payloads = {(KIND_ELF, 75): b"\x75" * 3000, (KIND_ELF, 90): bytes(range(256)) * 20,
                (KIND_ELF, 120): b"\x12" * 1000, (KIND_PTX, 80): b"ptx for compute_80" * 50,
                (KIND_PTX, 120): b"ptx for compute_120" * 50}
    first = container(entry(KIND_ELF, 75, payloads[(KIND_ELF, 75)]), entry(KIND_ELF, 90, payloads[(KIND_ELF, 90)]))
    second = container(entry(KIND_ELF, 120, payloads[(KIND_ELF, 120)]), entry(KIND_PTX, 80, payloads[(KIND_PTX, 80)]),
                       entry(KIND_PTX, 120, payloads[(KIND_PTX, 120)]))
    padding = bytes((-len(first)) % 8 + 8)                       # containers sit 8-byte aligned, zero padded
    return elf_with_section(".nv_fatbin", first + padding + second), payloads


def payloads_of(data: bytes) -> dict[tuple[int, int], bytes]:
    offset, size = elf_section(data, ".nv_fatbin")
    return {(kind, arch): data[at + header:at + header + length]
            for at, header, kind, arch, length in fatbin_entries(data, offset, size)}


def test_the_target_architecture_stays_byte_identical_and_every_other_payload_is_zeroed(library):
    data, payloads = library
    pruned = bytearray(data)
    stats = prune_library(pruned, 90)
    found = payloads_of(bytes(pruned))
    assert found[(KIND_ELF, 90)] == payloads[(KIND_ELF, 90)]
    assert found[(KIND_PTX, 80)] == payloads[(KIND_PTX, 80)]          # the driver can compile it for sm_90
    for key in ((KIND_ELF, 75), (KIND_ELF, 120), (KIND_PTX, 120)):
        assert found[key] == bytes(len(payloads[key]))
    assert len(pruned) == len(data)
    # Outside the zeroed payloads not one byte moved: headers, sizes, offsets, the ELF tables.
    changed = [i for i in range(len(data)) if data[i] != pruned[i]]
    zeroed = sum(len(payloads[k]) for k in ((KIND_ELF, 75), (KIND_ELF, 120), (KIND_PTX, 120)))
    assert stats.zeroed_bytes == zeroed and stats.libraries == 1
    assert len(changed) <= zeroed
    assert stats.kept_bytes == len(payloads[(KIND_ELF, 90)]) + len(payloads[(KIND_PTX, 80)])


def test_an_a100_target_keeps_sm_80_and_drops_the_hopper_code(library):
    data, payloads = library
    pruned = bytearray(data)
    prune_library(pruned, parse_arch("sm_80"))
    found = payloads_of(bytes(pruned))
    assert found[(KIND_PTX, 80)] == payloads[(KIND_PTX, 80)]
    assert found[(KIND_ELF, 90)] == bytes(len(payloads[(KIND_ELF, 90)]))


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils' readelf is not installed")
def test_a_pruned_library_still_parses_with_readelf(library, tmp_path):
    data, _ = library
    pruned = bytearray(data)
    prune_library(pruned, 90)
    path = tmp_path / "libfake.so"
    path.write_bytes(pruned)
    listing = subprocess.run(["readelf", "-SW", str(path)], capture_output=True, text=True)
    assert listing.returncode == 0 and "Error" not in listing.stderr, listing.stderr
    assert ".nv_fatbin" in listing.stdout


def test_a_library_without_gpu_code_or_an_entry_running_past_its_container(library):
    plain = bytearray(elf_with_section(".rodata", b"text" * 10))
    assert prune_library(plain, 90).libraries == 0
    assert prune_library(bytearray(b"not an elf file"), 90).libraries == 0
    broken = bytearray(elf_with_section(".nv_fatbin", container(entry(KIND_ELF, 75, b"x" * 100))[:-40]))
    with pytest.raises(prune.PruneError, match="past"):
        prune_library(broken, 90)


@pytest.mark.parametrize("text, arch", [("sm_90", 90), ("90", 90), ("sm_90a", 90), ("compute_80", 80), ("SM_120", 120)])
def test_architectures_are_read_as_cuda_names_them(text, arch):
    assert parse_arch(text) == arch


def test_an_architecture_that_is_not_one_is_refused():
    with pytest.raises(ValueError, match="not a CUDA architecture"):
        parse_arch("hopper")


def test_a_pruned_wheel_installs_with_record_hashes_that_match_its_files(library, tmp_path):
    data, payloads = library
    source = tmp_path / "libfake-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(source, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("libfake/lib64/libfake.so", data)
        wheel.writestr("libfake/__init__.py", "")
        wheel.writestr("libfake-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n")
        wheel.writestr("libfake-1.0.dist-info/RECORD", "libfake/lib64/libfake.so,sha256=stale,1\n"
                                                       "libfake/__init__.py,,\nlibfake-1.0.dist-info/RECORD,,\n")
    dest = tmp_path / "out" / source.name
    stats = prune_wheel(source, dest, 90)
    assert stats.zeroed_bytes > 0
    with zipfile.ZipFile(dest) as wheel:
        assert wheel.testzip() is None
        library_info = wheel.getinfo("libfake/lib64/libfake.so")
        assert library_info.compress_type == zipfile.ZIP_LZMA
        content = wheel.read(library_info)
        record = dict(line.split(",", 1) for line in wheel.read("libfake-1.0.dist-info/RECORD").decode().splitlines())
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    assert record["libfake/lib64/libfake.so"] == f"sha256={digest},{len(content)}"
    assert payloads_of(content)[(KIND_ELF, 90)] == payloads[(KIND_ELF, 90)]
    assert dest.stat().st_size < source.stat().st_size


# ------------------------------------------------------------------ the real wheels, where downloaded
REAL = sorted((ROOT / "gpu-kit" / "wheels-sm_90").glob("lib*.whl"))


@pytest.mark.slow
@pytest.mark.skipif(not REAL or shutil.which("readelf") is None,
                    reason="the kit's pruned wheels are not here (scripts/gpu_kit/prepare.py makes them)")
def test_every_real_pruned_library_parses_and_keeps_its_sm_90_code(tmp_path):
    checked = 0
    for pruned_wheel in REAL:
        original_wheel = ROOT / "gpu-kit" / "wheels" / pruned_wheel.name
        if not original_wheel.is_file():
            continue
        with zipfile.ZipFile(pruned_wheel) as new, zipfile.ZipFile(original_wheel) as old:
            for info in new.infolist():
                if not prune.SHARED_LIBRARY.search(info.filename) or info.file_size < 1 << 20:
                    continue
                after, before = new.read(info), old.read(info.filename)
                if elf_section(before, ".nv_fatbin") is None:
                    continue
                kept_before = {k: v for k, v in payloads_of(before).items() if k[0] == KIND_ELF and k[1] == 90}
                kept_after = {k: v for k, v in payloads_of(after).items() if k[0] == KIND_ELF and k[1] == 90}
                assert kept_after == kept_before, info.filename
                path = tmp_path / Path(info.filename).name
                path.write_bytes(after)
                listing = subprocess.run(["readelf", "-hSd", "--wide", str(path)], capture_output=True, text=True)
                assert listing.returncode == 0 and not listing.stderr.strip(), (info.filename, listing.stderr)
                path.unlink()
                checked += 1
    assert checked > 0


# ------------------------------------------------------------------ no UDF, so no compiler toolchain
UDF_CALLS = {"apply", "applymap", "apply_rows", "apply_chunks", "map_partitions_udf"}


def test_the_package_calls_no_dataframe_udf_and_imports_no_numba():
    """cuDF compiles a Python function passed to apply/map with numba-cuda (NVVM): the kit ships
    no CUDA compiler toolchain (target.TOOLCHAIN_DROPPED), so the package must call none."""
    offenders = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                offenders += [f"{where} imports {n}" for n in names if n.split(".")[0] == "numba"]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in UDF_CALLS:
                    offenders.append(f"{where} calls .{node.func.attr}(...)")
                elif node.func.attr == "map" and any(isinstance(a, ast.Lambda) for a in node.args):
                    offenders.append(f"{where} calls .map(lambda ...)")
    assert offenders == []
