"""Wheels packed into transfer-sized parts, the manifest that describes them, and the way back.

Format: each part is a plain (uncompressed) tar file of at most ``part_limit`` bytes, laid out
so that the fewest parts carry the wheels. A wheel that fits in the space left in a part goes
in whole; when none fits, the largest remaining wheel is cut and its first bytes fill the part
(members named ``<wheel>.slice-<k>``), the rest going on into the next parts. So:

- a part is a standard tar that ``tar -xf`` opens without this kit, and slices are joined with
  ``cat`` in the order the manifest lists them;
- a wheel needs only the parts that hold its bytes, so wheels are installed as their parts
  arrive, over several transfers;
- the parts are as few as with one tar stream cut into fixed-size chunks (every part but the
  last of a profile is full), without that format's drawback that one lost chunk makes every
  file after it unreadable.

Wheels are zip-compressed already, so the tar is not compressed again. Standard library only:
this module runs on the host before anything is installed there.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import tarfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
FORMAT = "gpu-kit-parts/1"
_BLOCK = tarfile.BLOCKSIZE            # 512: every tar header and data run is padded to it
_RECORD = tarfile.RECORDSIZE          # 10240: the archive is padded to a multiple of it
_END = 2 * _BLOCK                     # the two zero blocks that end an archive
_TAR_FORMAT = tarfile.PAX_FORMAT      # long wheel names need PAX headers


class KitError(Exception):
    """A problem with the kit's files, said in words the person at the host can act on."""


@dataclass(frozen=True)
class WheelFile:
    """A wheel to pack and the profile it belongs to."""

    path: Path
    profile: str
    sha256: str = ""

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Member:
    """One tar member of a part: a whole wheel, or bytes ``offset..offset+length`` of one."""

    member: str
    wheel: str
    offset: int
    length: int


@dataclass
class PartPlan:
    name: str
    profile: str
    members: list[Member] = field(default_factory=list)
    content: int = 0                  # bytes of headers and padded data, before the end blocks

    @property
    def size(self) -> int:
        return archive_size(self.content)


# ----------------------------------------------------------------------------- hashing
def sha256_file(path: Path, chunk: int = 4 * 1024 * 1024) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


# ----------------------------------------------------------------------------- sizes
def _padded(n: int) -> int:
    return -(-n // _BLOCK) * _BLOCK


def _tarinfo(member: str, length: int) -> tarfile.TarInfo:
    """A reproducible header: no owner, no time, read-only file mode."""
    info = tarfile.TarInfo(member)
    info.size = length
    info.mode = 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def member_cost(member: str, length: int) -> int:
    """Bytes a member takes in the archive: its header(s) and its data padded to a block."""
    header = len(_tarinfo(member, length).tobuf(_TAR_FORMAT, "utf-8", "surrogateescape"))
    return header + _padded(length)


def archive_size(content: int) -> int:
    """The file size of a tar whose members take ``content`` bytes (end blocks, record padding)."""
    return -(-(content + _END) // _RECORD) * _RECORD


def capacity(part_limit: int) -> int:
    """The most member bytes a part may hold so that its file stays within ``part_limit``."""
    room = (part_limit // _RECORD) * _RECORD - _END
    if room < 4 * _BLOCK:
        raise ValueError(f"part limit {part_limit} bytes is too small for a tar part")
    return room


def slice_name(wheel: str, index: int) -> str:
    return f"{wheel}.slice-{index:03d}"


# ----------------------------------------------------------------------------- planning
@dataclass
class _Pending:
    wheel: str
    size: int
    offset: int = 0
    slices: int = 0

    @property
    def rest(self) -> int:
        return self.size - self.offset

    def next_member(self, length: int) -> str:
        whole = self.offset == 0 and length == self.size
        return self.wheel if whole else slice_name(self.wheel, self.slices + 1)


def plan_parts(sizes: Mapping[str, int], profile: str, part_limit: int, prefix: str = "gpu-kit") -> list[PartPlan]:
    """Lay out one profile's wheels (name -> bytes) in as few parts as their total needs.

    Largest first; a wheel goes in whole when it fits the space left, otherwise a wheel is cut
    to fill the part: the one already being cut, else the largest. A part is closed once less
    than a small slice would fit (so no slice is a few bytes long).
    """
    room = capacity(part_limit)
    smallest_slice = max(_BLOCK, min(1024 * 1024, room // 16))
    pending = sorted((_Pending(name, size) for name, size in sizes.items()), key=lambda p: (-p.size, p.wheel))
    parts: list[PartPlan] = []
    while pending:
        part = PartPlan(f"{prefix}-{profile}-{len(parts) + 1:03d}.tar", profile)
        while pending:
            free = room - part.content
            whole = next((p for p in pending if member_cost(p.next_member(p.rest), p.rest) <= free), None)
            if whole is not None:
                _add(part, whole, whole.rest)
                pending.remove(whole)
                continue
            # Keep cutting the wheel already begun, so a wheel's slices sit in consecutive parts.
            cut = next((p for p in pending if p.offset), pending[0])
            header = member_cost(slice_name(cut.wheel, cut.slices + 1), 0)
            length = ((free - header) // _BLOCK) * _BLOCK
            if length < smallest_slice:
                break
            _add(part, cut, length)
        if not part.members:
            raise ValueError(f"part limit {part_limit} bytes cannot hold any of: {[p.wheel for p in pending][:3]}")
        parts.append(part)
    return parts


def _add(part: PartPlan, pending: _Pending, length: int) -> None:
    member = pending.next_member(length)
    part.members.append(Member(member, pending.wheel, pending.offset, length))
    part.content += member_cost(member, length)
    if member != pending.wheel:
        pending.slices += 1
    pending.offset += length


def plan_transfers(parts: Sequence[Mapping[str, Any]], transfer_limit: int, allowance: int) -> list[dict[str, Any]]:
    """Consecutive parts grouped into transfers of at most ``transfer_limit`` bytes, keeping
    ``allowance`` bytes in each for the manifest that goes with every transfer."""
    transfers: list[dict[str, Any]] = []
    for part in parts:
        last = transfers[-1] if transfers else None
        if last is None or last["bytes"] + part["size"] + allowance > transfer_limit:
            if part["size"] + allowance > transfer_limit:
                raise ValueError(f"{part['name']} ({part['size']} bytes) does not fit a {transfer_limit}-byte transfer")
            last = {"transfer": len(transfers) + 1, "parts": [], "bytes": 0}
            transfers.append(last)
        last["parts"].append(part["name"])
        last["bytes"] += part["size"]
    return transfers


# ----------------------------------------------------------------------------- writing
def write_part(plan: PartPlan, paths: Mapping[str, Path], out_dir: Path) -> dict[str, Any]:
    """Write one planned part; returns its manifest entry (name, size, sha256, members)."""
    target = out_dir / plan.name
    temporary = target.with_name(target.name + ".tmp")
    with tarfile.open(temporary, "w", format=_TAR_FORMAT) as archive:
        for member in plan.members:
            with open(paths[member.wheel], "rb") as source:
                source.seek(member.offset)
                archive.addfile(_tarinfo(member.member, member.length), source)
    size = temporary.stat().st_size
    if size != plan.size:
        raise AssertionError(f"{plan.name}: wrote {size} bytes, planned {plan.size}")
    temporary.replace(target)
    return {
        "name": plan.name, "profile": plan.profile, "size": size, "sha256": sha256_file(target),
        "wheels": list(dict.fromkeys(m.wheel for m in plan.members)),
        "members": [asdict(m) for m in plan.members],
    }


def pack(
    wheels: Iterable[WheelFile],
    out_dir: Path,
    *,
    part_limit: int,
    transfer_limit: int,
    manifest_allowance: int,
    prefix: str = "gpu-kit",
    extra: Mapping[str, Any] | None = None,
    wheel_info: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Pack ``wheels`` into parts under ``out_dir`` and write ``manifest.json`` beside them.

    Parts of one profile never carry another profile's wheels, so a host that needs only the
    first profile takes only its parts. ``wheel_info`` adds fields (distribution, version) to a
    wheel's manifest entry; ``extra`` adds top-level fields. Returns the manifest.
    """
    if part_limit + manifest_allowance > transfer_limit:
        raise ValueError("a part plus the manifest must fit in one transfer")
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob(f"{prefix}-*.tar"), out_dir / MANIFEST_NAME]:
        stale.unlink(missing_ok=True)
    wheels = list(wheels)
    by_name = {w.name: w for w in wheels}
    if len(by_name) != len(wheels):
        raise ValueError("two wheels with the same file name")
    profiles = list(dict.fromkeys(w.profile for w in wheels))
    parts: list[dict[str, Any]] = []
    for profile in profiles:
        sizes = {w.name: w.path.stat().st_size for w in wheels if w.profile == profile}
        for plan in plan_parts(sizes, profile, part_limit, prefix):
            parts.append(write_part(plan, {n: by_name[n].path for n in sizes}, out_dir))
    entries = []
    for wheel in wheels:
        digest = sha256_file(wheel.path)
        if wheel.sha256 and wheel.sha256 != digest:
            raise KitError(f"{wheel.name}: sha256 {digest} differs from the expected {wheel.sha256}")
        slices = [{"part": p["name"], **{k: m[k] for k in ("member", "offset", "length")}}
                  for p in parts for m in p["members"] if m["wheel"] == wheel.name]
        entries.append({"name": wheel.name, "profile": wheel.profile, "size": wheel.path.stat().st_size,
                        "sha256": digest, **(wheel_info or {}).get(wheel.name, {}), "slices": slices})
    manifest = {
        "format": FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "part_limit": part_limit, "transfer_limit": transfer_limit,
        **dict(extra or {}),
        "profiles": {p: {"parts": sum(1 for q in parts if q["profile"] == p),
                         "wheels": sum(1 for w in wheels if w.profile == p),
                         "bytes": sum(q["size"] for q in parts if q["profile"] == p)} for p in profiles},
        "parts": parts,
        "transfers": plan_transfers(parts, transfer_limit, manifest_allowance),
        "wheels": entries,
    }
    text = json.dumps(manifest, indent=1) + "\n"
    if len(text.encode()) > manifest_allowance:
        raise KitError(f"the manifest ({len(text.encode())} bytes) outgrew the {manifest_allowance} bytes kept for it")
    (out_dir / MANIFEST_NAME).write_text(text)
    return manifest


def part_table(manifest: Mapping[str, Any]) -> str:
    """The parts as a table: name, exact size, MiB, what each carries, and its transfer."""
    transfer_of = {name: t["transfer"] for t in manifest.get("transfers", []) for name in t["parts"]}
    slices = {w["name"]: [s["member"] for s in w["slices"]] for w in manifest["wheels"]}
    rows = [("part", "bytes", "MiB", "transfer", "carries")]
    for part in manifest["parts"]:
        whole = sum(1 for m in part["members"] if m["member"] == m["wheel"])
        cut = [f"{'-'.join(m['wheel'].split('-')[:2])} slice {slices[m['wheel']].index(m['member']) + 1}"
               f"/{len(slices[m['wheel']])}" for m in part["members"] if m["member"] != m["wheel"]]
        carries = f"{whole} whole wheel(s)" + (f" + {', '.join(cut)}" if cut else "")
        rows.append((part["name"], str(part["size"]), f"{part['size'] / 2**20:.2f}",
                     str(transfer_of.get(part["name"], "-")), carries))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join([*(r[i].ljust(widths[i]) if i in (0, 3) else r[i].rjust(widths[i]) for i in range(4)), r[4]])
             for r in rows]
    total = sum(p["size"] for p in manifest["parts"])
    lines.append(f"{len(manifest['parts'])} part(s), {total} bytes ({total / 2**20:.1f} MiB), "
                 f"{len(manifest.get('transfers', []))} transfer(s) of at most {manifest['transfer_limit'] / 2**20:g} MiB, "
                 f"largest part {max(p['size'] for p in manifest['parts']) / 2**20:.2f} MiB")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- reading
def load_manifest(parts_dir: Path) -> dict[str, Any]:
    path = parts_dir / MANIFEST_NAME
    if not path.is_file():
        raise KitError(f"{path} is missing: copy {MANIFEST_NAME} from the kit next to the parts "
                       "(every transfer carries a copy)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise KitError(f"{path} is not valid JSON ({exc}): copy it again from the kit") from None
    if manifest.get("format") != FORMAT:
        raise KitError(f"{path}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return manifest


@dataclass(frozen=True)
class PartState:
    name: str
    state: str          # ok | missing | corrupt
    detail: str = ""


def check_parts(manifest: Mapping[str, Any], parts_dir: Path, profiles: Sequence[str] | None = None) -> dict[str, PartState]:
    """Each listed part (of ``profiles``, default all): present with its size and sha256, or not."""
    states: dict[str, PartState] = {}
    for part in manifest["parts"]:
        if profiles and part["profile"] not in profiles:
            continue
        path = parts_dir / part["name"]
        if not path.is_file():
            states[part["name"]] = PartState(part["name"], "missing", "not in " + str(parts_dir))
            continue
        size = path.stat().st_size
        if size != part["size"]:
            states[part["name"]] = PartState(part["name"], "corrupt",
                                             f"{size} bytes, the manifest says {part['size']} (cut short or still copying?)")
            continue
        digest = sha256_file(path)
        if digest != part["sha256"]:
            states[part["name"]] = PartState(part["name"], "corrupt",
                                             f"sha256 {digest[:16]}..., the manifest says {part['sha256'][:16]}...")
            continue
        states[part["name"]] = PartState(part["name"], "ok")
    return states


@dataclass
class Readiness:
    """Which wheels can be joined now, and what the others wait for."""

    ready: list[dict[str, Any]] = field(default_factory=list)
    waiting: dict[str, list[str]] = field(default_factory=dict)     # wheel -> missing parts
    blocked: dict[str, list[str]] = field(default_factory=dict)     # wheel -> corrupt parts


def readiness(manifest: Mapping[str, Any], states: Mapping[str, PartState]) -> Readiness:
    result = Readiness()
    for wheel in manifest["wheels"]:
        needed = list(dict.fromkeys(s["part"] for s in wheel["slices"]))
        if any(part not in states for part in needed):
            continue                                  # another profile's wheel
        corrupt = [p for p in needed if states[p].state == "corrupt"]
        missing = [p for p in needed if states[p].state == "missing"]
        if corrupt:
            result.blocked[wheel["name"]] = corrupt
        elif missing:
            result.waiting[wheel["name"]] = missing
        else:
            result.ready.append(wheel)
    return result


def join_wheel(wheel: Mapping[str, Any], parts_dir: Path, dest_dir: Path) -> Path:
    """Rebuild one wheel from its slices into ``dest_dir`` and check its sha256."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / wheel["name"]
    temporary = target.with_name(target.name + ".joining")
    digest = hashlib.sha256()
    with open(temporary, "wb") as out:
        for piece in wheel["slices"]:
            try:
                archive = tarfile.open(parts_dir / piece["part"], "r:")
            except (OSError, tarfile.TarError) as exc:     # gone or rewritten since it was checked
                temporary.unlink(missing_ok=True)
                raise KitError(f"{piece['part']} could not be read while joining {wheel['name']} ({exc}); "
                               "copy it again and rerun unpack") from None
            with archive:
                try:
                    info = archive.getmember(piece["member"])
                except KeyError:
                    raise KitError(f"{piece['part']} has no member {piece['member']}: the part does not "
                                   "belong to this manifest") from None
                if info.size != piece["length"]:
                    raise KitError(f"{piece['part']}: {piece['member']} is {info.size} bytes, expected {piece['length']}")
                if out.tell() != piece["offset"]:
                    raise KitError(f"{wheel['name']}: slices out of order at {piece['member']}")
                source = archive.extractfile(info)
                while block := source.read(4 * 1024 * 1024):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != wheel["sha256"]:
        temporary.unlink()
        raise KitError(f"{wheel['name']}: joined file has sha256 {digest.hexdigest()[:16]}..., "
                       f"expected {wheel['sha256'][:16]}... (parts {sorted({s['part'] for s in wheel['slices']})})")
    temporary.replace(target)
    return target
