"""CSV files compressed whole (``rows.csv.gz``, a nightly export's ``.bz2`` or ``.xz``, a
single-file ``.zip``), told by their first bytes whatever their name.

Every reader of a CSV file here takes a plain file: the header and row-width checks, the
date re-reads, ``init``'s sampler (which seeks to windows spread over the file), pandas' and
pyarrow's readers and cuDF's. So a compressed file is decompressed once, into a file of its
own in the temporary folder, read as any other file, and deleted (``plain_copy``); a message
about the copy names the user's file. Only a header is read through a decompressing stream
(``open_plain``): ``validate`` and ``predict`` check columns without decompressing the rest.
The stage cache hashes the compressed bytes, so a hit never decompresses at all.

A partitioned read is refused: Dask cannot split a compressed stream into partitions, so a
"larger than memory" read of one would be one partition, the very thing it exists to avoid.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import shutil
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from pipeline.core.errors import DataError

__all__ = ["COMPRESSED", "SUFFIXES", "compression_of", "open_plain", "plain_copy", "plain_name", "read_head", "reading",
           "refuse_partitioned", "text_reader"]

# The first bytes of compressed files, and what each is.
COMPRESSED = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\x28\xb5\x2f\xfd", "zstd"), (b"\xfd7zXZ\x00", "xz"),
              (b"PK\x03\x04", "zip"), (b"PK\x05\x06", "zip"))     # an empty zip starts as its end record
# The names compressed files end with, after the format's own (``rows.csv.gz``).
SUFFIXES = (".gz", ".gzip", ".bz2", ".xz", ".zst", ".zip")
_CHUNK = 1 << 20
# What a damaged or cut-short stream raises, by library.
_DAMAGED = (EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile)


def compression_of(path: Path) -> str | None:
    """``gzip``, ``bzip2``, ``zstd``, ``xz`` or ``zip`` for a regular file that starts as one
    does; None otherwise (a pipe is never opened here: its bytes can be read once, and opening
    one waits for its writer)."""
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as fh:
            head = fh.read(8)
    except OSError:
        return None                          # the read that follows names the problem
    return next((kind for magic, kind in COMPRESSED if head.startswith(magic)), None)


def open_plain(path: Path) -> BinaryIO:
    """The file's bytes, decompressed when it is compressed (the file itself otherwise)."""
    kind = compression_of(path)
    if kind is None:
        return open(path, "rb")
    if kind == "gzip":
        return gzip.open(path, "rb")         # type: ignore[return-value]
    if kind == "bzip2":
        return bz2.open(path, "rb")          # type: ignore[return-value]
    if kind == "xz":
        return lzma.open(path, "rb")         # type: ignore[return-value]
    if kind == "zip":
        return _zip_member(path)
    return _zstd(path)


def _zip_member(path: Path) -> BinaryIO:
    """The one file of a zip archive; an archive of several is refused by name (which of them
    is the table is the user's to say)."""
    try:
        archive = zipfile.ZipFile(path)
    except _DAMAGED as exc:
        raise DataError(f"{path}: cannot read it as a zip archive ({exc})") from exc
    members = [info for info in archive.infolist() if not info.is_dir()]
    if len(members) != 1:
        archive.close()
        shown = ", ".join(m.filename for m in members[:5]) + (", ..." if len(members) > 5 else "")
        raise DataError(f"{path} is a zip archive of {len(members)} files ({shown or 'none'}); a CSV input is one "
                        f"file: extract the one to read (unzip {path.name} NAME)")
    return archive.open(members[0])          # type: ignore[return-value]


def _zstd(path: Path) -> BinaryIO:
    """zstd through ``zstandard`` (or Python 3.14's ``compression.zstd``), which are optional."""
    try:
        from compression import zstd         # type: ignore[import-not-found]

        return zstd.open(path, "rb")         # type: ignore[no-any-return]
    except ImportError:
        pass
    try:
        import zstandard                     # type: ignore[import-not-found]
    except ImportError:
        raise DataError(f"{path} is zstd-compressed, and reading zstd needs the zstandard package (pip install "
                        f"zstandard): install it, decompress the file first (unzstd {path.name}), or stream it into a "
                        f"run (zstd -dc {path.name} | pipeline run CONFIG, with the load stage's path: '-')") from None
    return zstandard.open(path, "rb")        # type: ignore[no-any-return]


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of the file's content (decompressed when it is compressed)."""
    with reading(path), open_plain(path) as fh:
        return fh.read(size)


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """A damaged or cut-short compressed file as a ``DataError`` naming it."""
    try:
        yield
    except DataError:
        raise
    except OSError as exc:
        if exc.errno is None:                # gzip's and bz2's own "not a valid stream"
            raise _damaged(path, exc) from exc
        raise DataError(f"cannot decompress {path}: {exc.strerror or exc}"
                        + (f" (into {tempfile.gettempdir()}, TMPDIR)" if exc.filename != str(path) else "")) from exc
    except _DAMAGED as exc:
        raise _damaged(path, exc) from exc


def _damaged(path: Path, exc: BaseException) -> DataError:
    """What a reader of a broken stream is told: most often a file copied or written in part."""
    kind = compression_of(path) or "compressed"
    return DataError(f"{path}: its {kind} data is damaged or cut short ({exc or type(exc).__name__}); a file still "
                     "being written, or copied in part? Write it again in full")


@contextmanager
def plain_copy(path: Path) -> Iterator[Path]:
    """``path`` itself when it is not compressed; else its content decompressed into a new
    file in the temporary folder (``TMPDIR``), deleted when the block ends. A ``DataError``
    raised in the block that names the copy is raised again naming ``path``."""
    if compression_of(path) is None:
        yield path
        return
    folder = Path(tempfile.mkdtemp(prefix="pipeline-plain-"))
    plain = folder / plain_name(path)
    try:
        with reading(path), open_plain(path) as source, open(plain, "wb") as target:
            shutil.copyfileobj(source, target, _CHUNK)
        try:
            yield plain
        except DataError as exc:
            raise DataError(str(exc).replace(str(plain), str(path))) from exc.__cause__
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def plain_name(path: Path) -> str:
    """The file's name without its compression suffix (``rows.csv.gz`` -> ``rows.csv``): what
    its content is, and the plain copy's name, so that a reader that looks at it sees the format."""
    name = path.name
    for suffix in SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def refuse_partitioned(parts: list[Path]) -> None:
    """A partitioned read of compressed CSV parts, refused naming the first (module docstring)."""
    for part in parts:
        kind = compression_of(part)
        if kind is not None:
            raise DataError(f"{part} is {kind}-compressed, and a partitioned read splits plain CSV files into "
                            "partitions (a compressed stream cannot be split): decompress the parts first, or remove "
                            "partitioned: true to read a compressed file whole")


def text_reader(path: Path, encoding: str) -> io.TextIOWrapper:
    """The file's content as text in ``encoding`` (decompressed when compressed), for a reader of
    lines: ``newline=""`` as the csv module wants."""
    return io.TextIOWrapper(open_plain(path), encoding=encoding, newline="")

