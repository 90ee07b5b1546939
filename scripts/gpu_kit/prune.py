"""Keep one GPU architecture's code in a wheel's shared libraries, so RAPIDS fits the transfers.

Each CUDA library in a RAPIDS wheel carries its kernels for every architecture it supports
(sm_75, 80, 86, 90, 100, 120 and PTX for the newest); a host runs one of them. The kernels sit
in the ELF section ``.nv_fatbin``: a run of fat binary containers, each a header and a list of
entries, each entry a header (kind, architecture, payload size) and its payload. Pruning zeroes
the payload of every entry the host's card cannot load and leaves every header, offset and size
as it was, so the file's layout, symbols and relocations are untouched and the CUDA loader,
which picks an entry by its header, never reads a zeroed payload. What is kept:

- every ELF (SASS) entry built for the target architecture (``arch`` 90 covers sm_90 and
  sm_90a: both run on an H100/H200);
- every PTX entry for the target architecture or older, which the driver can compile for it.

The zeroed runs then compress to nothing: the wheel is rewritten with LZMA members (which
pip's and Python's ``zipfile`` read), its RECORD updated for the files that changed.
Standard library only; nothing here runs on the host.
"""

from __future__ import annotations

import base64
import hashlib
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_ELF = 1, 2
SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$")


class PruneError(Exception):
    """A shared library whose fat binary section is not laid out as expected."""


@dataclass
class PruneStats:
    """What pruning found and zeroed, by (kind, architecture)."""

    entries: dict[tuple[str, int], int] = field(default_factory=dict)
    bytes_by_entry: dict[tuple[str, int], int] = field(default_factory=dict)
    kept_bytes: int = 0
    zeroed_bytes: int = 0
    libraries: int = 0

    def add(self, other: PruneStats) -> None:
        for key, count in other.entries.items():
            self.entries[key] = self.entries.get(key, 0) + count
        for key, size in other.bytes_by_entry.items():
            self.bytes_by_entry[key] = self.bytes_by_entry.get(key, 0) + size
        self.kept_bytes += other.kept_bytes
        self.zeroed_bytes += other.zeroed_bytes
        self.libraries += other.libraries


def parse_arch(text: str) -> int:
    """``sm_90`` / ``90`` / ``sm_90a`` -> 90."""
    match = re.fullmatch(r"(?:sm_|compute_)?(\d+)[af]?", text.strip().lower())
    if not match:
        raise ValueError(f"not a CUDA architecture: {text!r} (expected e.g. sm_90 or sm_80)")
    return int(match.group(1))


def elf_section(data: bytes | bytearray, name: str) -> tuple[int, int] | None:
    """(file offset, size) of the ELF64 little-endian section ``name``, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if not shoff or shstrndx >= shnum:
        return None
    sections = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strings = sections[shstrndx][4]
    wanted = name.encode()
    for name_offset, _type, _flags, _addr, offset, size in sections:
        start = strings + name_offset
        if data[start:start + len(wanted) + 1] == wanted + b"\0":
            return offset, size
    return None


def fatbin_entries(data: bytes | bytearray, offset: int, size: int):
    """Yield (entry header offset, header size, kind, arch, payload size) of every entry."""
    pos, end = offset, offset + size
    while pos + 16 <= end:
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8                            # containers are 8-byte aligned, padded with zeros
            continue
        entry, entries_end = pos + header_size, pos + header_size + fat_size
        if entries_end > end:
            raise PruneError(f"fat binary container at {pos:#x} runs past its section's end")
        while entry < entries_end:
            kind, _v, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            arch, = struct.unpack_from("<I", data, entry + 28)
            if entry_header < 64 or entry + entry_header + payload > entries_end:
                raise PruneError(f"fat binary entry at {entry:#x} has a header of {entry_header} bytes "
                                 f"and a payload of {payload} past its container")
            yield entry, entry_header, kind, arch, payload
            entry += entry_header + payload
        pos = entries_end


def keeps(kind: int, arch: int, target: int) -> bool:
    """Whether an entry can serve a card of architecture ``target``."""
    return (kind == KIND_ELF and arch == target) or (kind == KIND_PTX and arch <= target)


def prune_library(data: bytearray, target: int) -> PruneStats:
    """Zero, in place, every fat binary payload of ``data`` that ``target`` cannot use."""
    stats = PruneStats()
    section = elf_section(data, ".nv_fatbin")
    if section is None:
        return stats
    stats.libraries = 1
    for entry, header, kind, arch, payload in list(fatbin_entries(data, *section)):
        key = ("elf" if kind == KIND_ELF else "ptx" if kind == KIND_PTX else f"kind{kind}", arch)
        stats.entries[key] = stats.entries.get(key, 0) + 1
        stats.bytes_by_entry[key] = stats.bytes_by_entry.get(key, 0) + payload
        if keeps(kind, arch, target):
            stats.kept_bytes += payload
        else:
            start = entry + header
            data[start:start + payload] = bytes(payload)
            stats.zeroed_bytes += payload
    return stats


def _record_hash(content: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()


def prune_wheel(source: Path, dest: Path, target: int | None) -> PruneStats:
    """Write ``source`` to ``dest`` with LZMA members, its libraries pruned to ``target``
    (None: nothing pruned, only recompressed), and RECORD naming the new hashes."""
    stats = PruneStats()
    changed: dict[str, bytes] = {}
    with zipfile.ZipFile(source) as wheel:
        infos = wheel.infolist()
        record_name = next((i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
        dest.parent.mkdir(parents=True, exist_ok=True)
        temporary = dest.with_name(dest.name + ".tmp")
        with zipfile.ZipFile(temporary, "w", compression=zipfile.ZIP_LZMA) as out:
            for info in infos:
                if info.filename == record_name:
                    continue
                content = wheel.read(info)
                if target is not None and SHARED_LIBRARY.search(info.filename):
                    buffer = bytearray(content)
                    found = prune_library(buffer, target)
                    if found.zeroed_bytes:
                        content = bytes(buffer)
                        changed[info.filename] = content
                    stats.add(found)
                copy = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                copy.external_attr = info.external_attr
                copy.compress_type = zipfile.ZIP_LZMA if info.file_size > 4096 else zipfile.ZIP_DEFLATED
                out.writestr(copy, content)
            if record_name is not None:
                lines = []
                for line in wheel.read(record_name).decode().splitlines():
                    path = line.rsplit(",", 2)[0]
                    if path in changed:
                        line = f"{path},{_record_hash(changed[path])},{len(changed[path])}"
                    lines.append(line)
                record = zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0))
                record.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(record, "\n".join(lines) + "\n")
    temporary.replace(dest)
    return stats

