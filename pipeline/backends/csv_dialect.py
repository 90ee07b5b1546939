"""How a CSV file is written: its field separator, text encoding, decimal mark and thousands
separator (``load``'s ``sep``, ``encoding``, ``decimal``, ``thousands``).

A European spreadsheet export is ``;``-separated with ``,`` decimals; a database dump may be
tab- or ``|``-separated; an older Windows export is cp1252 or Latin-1. Every reader of a CSV
file (the header check, the row-width check, pandas, cuDF, Dask, the sampler of ``init``)
takes one ``CsvDialect``, so a file is read the same way everywhere.

``sniff`` guesses the dialect from a file's first bytes (``pipeline init`` writes what it
found), and ``one_column_header`` recognises a header that the separator given did not split,
so the message names the separator the file seems to use instead of every column as missing.
"""

from __future__ import annotations

import codecs
import csv
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

__all__ = ["CsvDialect", "DEFAULT_DIALECT", "LIKELY_SEPARATORS", "checked_encoding", "checked_mark",
           "checked_separator", "dialect_of", "normalize_separator", "one_column_header", "show", "sniff",
           "written_in_utf8"]

# Separators a header that reads as one column is searched for, most common first.
LIKELY_SEPARATORS = (";", "\t", "|", ",")
# How a tab may be written in YAML without a double-quoted escape.
_TAB_SPELLINGS = {"\\t": "\t", "tab": "\t", "TAB": "\t"}
# Bytes of a file the sniffer reads.
SNIFF_BYTES = 64 * 1024


def normalize_separator(sep: str) -> str:
    """``sep`` as one character: ``\\t`` and ``tab`` (as a YAML file may hold them) are a tab."""
    return _TAB_SPELLINGS.get(sep, sep)


def show(char: str) -> str:
    """A separator as a YAML user writes it: ``'\\t'`` for a tab, ``';'`` otherwise."""
    return '"\\t"' if char == "\t" else repr(char)


@dataclass(frozen=True)
class CsvDialect:
    """Field separator, text encoding (a Python codec name), decimal mark and thousands
    separator (None: numbers have none) of a CSV file."""

    sep: str = ","
    encoding: str = "utf-8"
    decimal: str = "."
    thousands: str | None = None

    @property
    def is_default(self) -> bool:
        return self.reader_options() == {}

    @property
    def utf8(self) -> bool:
        return codecs.lookup(self.encoding).name == "utf-8"

    @property
    def text_encoding(self) -> str:
        """The codec Python's own readers open the file with (a UTF-8 byte order mark skipped)."""
        return "utf-8-sig" if self.utf8 else self.encoding

    def reader_options(self) -> dict[str, Any]:
        """What differs from the default dialect: ``read_csv`` keyword arguments (pandas, Dask;
        cuDF without ``encoding``), and the same names as the ``load`` keys that say it."""
        options: dict[str, Any] = {}
        if self.sep != ",":
            options["sep"] = self.sep
        if not self.utf8:
            options["encoding"] = self.encoding
        if self.decimal != ".":
            options["decimal"] = self.decimal
        if self.thousands:
            options["thousands"] = self.thousands
        return options

    def describe(self) -> str:
        parts = [f"sep {show(self.sep)}", f"encoding {self.encoding}", f"decimal {self.decimal!r}"]
        if self.thousands:
            parts.append(f"thousands {self.thousands!r}")
        return ", ".join(parts)


DEFAULT_DIALECT = CsvDialect()

_KEYS = ("sep", "encoding", "decimal", "thousands")


def checked_separator(value: str) -> str:
    """``value`` as a separator (``\\t`` and ``tab`` are a tab); a ValueError unless one character."""
    sep = normalize_separator(value)
    if len(sep) != 1 or sep in ('"', "\n", "\r"):
        raise ValueError(f"sep must be one character such as ';', '|' or a tab (\"\\t\"), not {value!r}")
    return sep


def checked_encoding(value: str) -> str:
    """``value`` if Python has a codec of that name; a ValueError otherwise."""
    try:
        codecs.lookup(value)
    except LookupError:
        raise ValueError(f"encoding {value!r} is not a known text encoding (Python has no codec of that name: "
                         f"unknown encoding {value!r}); give one such as utf-8, cp1252 or latin-1") from None
    return value


def checked_mark(key: str, value: str, taken: dict[str, str | None]) -> str:
    """``value`` as the decimal mark or thousands separator (``key``): one punctuation or space
    character, unlike the marks already in ``taken`` (key -> character)."""
    if len(value) != 1 or value.isalnum() or value in "\n\r\"":
        raise ValueError(f"{key} must be one punctuation or space character, not {value!r}")
    for other, char in taken.items():
        if other != key and char == value:
            raise ValueError(f"{key} and {other} are both {value!r}: a number could not be told from its "
                             "neighbours; set one of them to another character")
    return value


def dialect_of(options: dict[str, str | None], base: CsvDialect = DEFAULT_DIALECT) -> CsvDialect:
    """``base`` with the given ``sep``, ``encoding``, ``decimal`` and ``thousands`` (None: keep
    ``base``'s; ``thousands: ''``: none), each checked as the ``load`` keys are: a ValueError
    whose message starts with the key."""
    unknown = sorted(set(options) - set(_KEYS))
    if unknown:
        raise ValueError(f"unknown CSV option(s) {unknown}: {', '.join(_KEYS)} are known")
    given = {key: value for key, value in options.items() if value is not None}
    if "sep" in given:
        given["sep"] = checked_separator(given["sep"])
    if "encoding" in given:
        checked_encoding(given["encoding"])
    if given.get("thousands") == "":
        given["thousands"] = None
    merged = replace(base, **given)
    checked_mark("decimal", merged.decimal, {"sep": merged.sep})
    if merged.thousands is not None:
        checked_mark("thousands", merged.thousands, {"sep": merged.sep, "decimal": merged.decimal})
    return merged


def one_column_header(names: list[str], dialect: CsvDialect) -> str | None:
    """The separator a header seems to use when it read as one column holding one (a
    ``;``-separated file read with ``sep: ','``); None otherwise."""
    if len(names) != 1:
        return None
    for char in LIKELY_SEPARATORS:
        if char != dialect.sep and len(names[0].split(char)) > 1:
            return char
    return None


def sniff(head: bytes) -> tuple[CsvDialect, list[str]]:
    """The dialect a file's first bytes suggest, and notes on what was decided and why.

    Encoding: UTF-8 when the bytes decode as UTF-8, else cp1252 (which reads Latin-1's letters
    the same, and a Windows export's quotes and euro sign too). Separator: the one of
    ``LIKELY_SEPARATORS`` that splits the first lines into the most fields, the same number on
    each. Decimal mark: ``,`` when the separator is not a comma and numbers are written
    ``12,5``; thousands: ``.`` (or a space) when they are written ``1.234,5``."""
    notes: list[str] = []
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        text, encoding = codecs.getincrementaldecoder("utf-16")().decode(head), "utf-16"
        notes.append("the file is UTF-16 (its byte order mark says so)")
    else:
        try:
            text, encoding = head.decode("utf-8"), "utf-8"
        except UnicodeDecodeError as exc:
            if exc.reason == "unexpected end of data":        # the sample ends inside a character
                text, encoding = head[:exc.start].decode("utf-8"), "utf-8"
            else:
                text, encoding = head.decode("cp1252", errors="replace"), "cp1252"
                notes.append(f"the bytes are not UTF-8 (byte {exc.start}): read as cp1252")
    text = text.lstrip("\ufeff")
    lines = [line for line in text.splitlines()[:50] if line.strip()]
    if len(lines) > 1 and not text.endswith(("\n", "\r")):
        lines = lines[:-1]                   # the last line of a sample may be cut short
    sep = _separator(lines)
    if sep != ",":
        notes.append(f"fields are separated by {show(sep)}")
    decimal, thousands = _number_marks(lines[1:], sep)
    if decimal == ",":
        notes.append("numbers are written with a decimal comma" + (f" and {thousands!r} between thousands"
                                                                   if thousands else ""))
    return CsvDialect(sep=sep, encoding=encoding, decimal=decimal, thousands=thousands), notes


def _separator(lines: list[str]) -> str:
    """The likely separator giving the most fields, the same number on every line read."""
    best, fields = ",", 1
    for char in LIKELY_SEPARATORS:
        counts = {len(row) for row in csv.reader(lines, delimiter=char)}
        if len(counts) == 1 and (count := counts.pop()) > fields:
            best, fields = char, count
    return best


_DECIMAL_COMMA = re.compile(r"^[+-]?\d{1,3}(?:([. ])\d{3})*,\d+$|^[+-]?\d+,\d+$")
_DOT_GROUPED = re.compile(r"[+-]?\d{1,3}(?:\.\d{3})+")


def _number_marks(rows: list[str], sep: str) -> tuple[str, str | None]:
    """(decimal mark, thousands separator) of the numbers in ``rows``: a decimal comma only
    where the separator is not a comma and at least one value in ten that looks like a number
    is written with one."""
    if sep == "," or not rows:
        return ".", None
    values = [v.strip().strip('"') for row in csv.reader(rows, delimiter=sep) for v in row]
    numeric = [v for v in values if re.fullmatch(r"[+-]?[\d., ]*\d[\d., ]*", v)]
    comma = [v for v in numeric if _DECIMAL_COMMA.match(v)]
    if not numeric or len(comma) * 10 < len(numeric):
        return ".", None
    grouped = {m.group(1) for v in comma if (m := _DECIMAL_COMMA.match(v)) and m.group(1)}
    if not grouped:
        # With the decimal mark a comma, a point between groups of three digits in a whole
        # number (4.268) can only separate thousands, unless some point is used otherwise.
        dotted = [v for v in numeric if _DOT_GROUPED.fullmatch(v)]
        other = [v for v in numeric if "." in v and not _DOT_GROUPED.fullmatch(v) and not _DECIMAL_COMMA.match(v)]
        grouped = {"."} if dotted and not other else set()
    return ",", (grouped.pop() if len(grouped) == 1 else None)


def written_in_utf8(path: Any) -> str | None:
    """Why a file is surely UTF-8 (its byte order mark, or bytes past ASCII that decode as
    UTF-8), or None. A run that read cp1252 or Latin-1 given new rows in UTF-8 would read every
    accented value as other letters ('ChÃ¨que' for 'Chèque'): unseen categories, wrong scores.
    Bytes of cp1252 text past ASCII almost never form valid UTF-8 sequences."""
    from pipeline.backends.compressed import read_head

    head = read_head(Path(path), SNIFF_BYTES)
    if head.startswith(codecs.BOM_UTF8):
        return "it starts with UTF-8's byte order mark"
    if not any(b >= 0x80 for b in head):
        return None
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=False)    # a character cut at the end is fine
    except UnicodeDecodeError:
        return None
    return "its characters past ASCII are UTF-8 sequences"
