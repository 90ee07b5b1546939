"""The CPU backend's CSV reader (pyarrow on every core) gives the frame pandas' C parser gives.

Every CSV under data/ with the options the example configs read it with, and generated files
holding what the two parsers might read differently, are read by both paths and compared
exactly: dtypes, values, missing values. The C parser reads floats correctly rounded
(``float_precision="round_trip"``), as pyarrow does; the data/ files also equal its default.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pipeline.backends import get_backend
from pipeline.backends.csv_dialect import dialect_of
from pipeline.backends.csv_reader import CParserNeeded, read_csv_frame, read_with_arrow, read_with_c_parser
from pipeline.core.errors import DataError
from tests.conftest import ROOT

CPU = get_backend("cpu")
DATA = ROOT / "data"

# (file, options) as the example configs load them (configs/*.yaml), and with no option.
DATA_READS = [
    ("telco_customer_churn.csv", {}),
    ("telco_customer_churn.csv", {"na_values": [" "]}),
    ("telco_customer_churn.csv", {"columns": ["tenure", "customerID", "TotalCharges"], "na_values": [" "]}),
    ("cdnow_transactions.csv", {}),
    ("cdnow_transactions.csv", {"dtypes": {"customer_id": "str"}}),
    ("completejourney_transactions_sample.csv", {"dtypes": {"transaction_timestamp": "str"}}),
    ("completejourney_transactions_sample.csv", {}),
    ("completejourney_demographics.csv", {}),
]


def c_parser(path: Path, **options) -> pd.DataFrame:
    return read_with_c_parser(path, **options)


@pytest.mark.parametrize(("name", "options"), DATA_READS, ids=[f"{n}-{sorted(o)}" for n, o in DATA_READS])
def test_every_data_file_reads_alike_on_both_paths_and_as_before(name, options):
    path = DATA / name
    arrow = read_with_arrow(path, **options)              # no fallback: pyarrow reads every one of them
    pd.testing.assert_frame_equal(arrow, c_parser(path, **options), check_exact=True)
    before = pd.read_csv(path, usecols=options.get("columns"), dtype=options.get("dtypes"),
                         na_values=options.get("na_values"))
    pd.testing.assert_frame_equal(arrow, before, check_exact=True)


# A header and 8 KiB of text before the bytes that are not UTF-8 (the header reads; the body does not).
NOT_UTF8 = b"a,b\n" + b"x,1\n" * 2048 + b"\xff\xfe,1\n"
# name -> (file content, which path reads it: "arrow" or the reason the C parser does)
CASES: dict[str, tuple[bytes, str]] = {
    "ints": (b"a,b\n1,2\n3,4\n", "arrow"),
    "ints with a gap": (b"a,b\n1,x\n,y\nNA,z\n3,w\n", "arrow"),
    "bool": (b"a,b\nTrue,1\nfalse,2\nTRUE,3\n", "arrow"),
    "bool with a gap": (b"a,b\nTrue,1\n,2\nFalse,3\n", "arrow"),
    "a column with no value": (b"a,b\n,1\n,2\n", "arrow"),
    "header only": (b"a,b\n", "arrow"),
    "quoted numbers": (b'a,b\n"5","1.5"\n"6","2"\n', "arrow"),
    "exponents": (b"a\n1e5\n2\n-3.5E-2\n", "arrow"),
    "leading zeros": (b"id,x\n007,1\n010,2\n", "arrow"),
    "thousands separators": (b'a,b\n"1,000",1\n"2,000",2\n', "arrow"),
    "byte order mark": ("\ufeffa,b\n1,2\n".encode(), "arrow"),
    "blanks around values": (b"a,b,c\n 5,x , NA\n6 , y,NA \n", "arrow"),
    "infinities": (b"a\ninf\n-Infinity\n1\n", "arrow"),
    "overflow to inf": (b"a\n1e400\n1\n", "arrow"),
    "missing spellings": (b"a,b\nnan,None\n1.5,null\n-nan,x\n#N/A,<NA>\n", "arrow"),
    "text with a gap": (b"a,b\nx,1\n,2\ny,3\n", "arrow"),
    "dates and times stay text": (b"d,t,s\n2020-01-01,12:30,2020-01-01 10:00:00\n2020-01-02,13:30,2020-01-02T11:00\n",
                                  "arrow"),
    "mixed ints and words": (b"a\n1\nTrue\nx\n", "arrow"),
    "newline in a quoted value": (b'a,b\n"x\ny",1\n"z",2\n', "arrow"),
    "doubled quotes": (b'a,b\n"he said ""hi""",1\n', "arrow"),
    "CRLF line ends": (b"a,b\r\n1,2\r\n3,4\r\n", "arrow"),
    "blank lines": (b"\n\na,b\n1,2\n\n3,4\n", "arrow"),
    "unicode text": ("a,b\nčaj,1\n日本,2\n".encode(), "arrow"),
    "a line of blanks": (b"a,b\n1,2\n   \n3,4\n", "pyarrow"),
    "an empty header name": (b"a,,c\n1,2,3\n", "empty column name"),
    "signed integers": (b"a,b\n+5,1\n-6,2\n", "with a sign"),
    "hexadecimal": (b"a,b\n0x10,1\n0X1f,2\n", "hexadecimal"),
    "uint64": (b"a\n10000000000000000000\n1\n", "past int64"),
    "a float past int64": (b"a\n1e19\n1.5\n", "past int64"),
    "past uint64": (b"a\n100000000000000000000000\n1\n", "past int64"),
    "NaN spelled otherwise": (b"a\nNAN\n1.5\n", "NaN spelled"),
    "not UTF-8": (NOT_UTF8, "not UTF-8"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_generated_files_read_as_the_c_parser_reads_them(tmp_path, caplog, name):
    content, path_taken = CASES[name]
    path = tmp_path / "case.csv"
    path.write_bytes(content)
    try:
        expected = c_parser(path)
    except (ValueError, UnicodeDecodeError) as exc:          # the C parser refuses it: so does the reader
        with pytest.raises(type(exc)):
            read_csv_frame(path)
        assert path_taken != "arrow"
        return
    with caplog.at_level(logging.DEBUG, logger="pipeline"):
        frame = read_csv_frame(path)
    pd.testing.assert_frame_equal(frame, expected, check_exact=True)
    fallback = [r.getMessage() for r in caplog.records if "C parser" in r.getMessage()]
    if path_taken == "arrow":
        assert not fallback
    else:
        assert len(fallback) == 1 and path_taken in fallback[0] and str(path) in fallback[0]


def test_missing_values_in_text_and_bool_columns_are_nan_as_the_c_parser_gives(tmp_path):
    path = tmp_path / "gaps.csv"
    path.write_text("a,b,c\nx,True,\n,,\ny,False,\n")
    frame = read_with_arrow(path)
    assert frame["a"].tolist()[1] is np.nan or np.isnan(frame["a"].tolist()[1])
    assert frame["b"].dtype == object and frame["b"].tolist()[:2] == [True, pytest.approx(np.nan, nan_ok=True)]
    assert frame["c"].dtype == "float64" and frame["c"].isna().all()


def test_floats_are_correctly_rounded_on_both_paths(tmp_path):
    values = np.random.default_rng(0).normal(size=2000) * 10.0 ** np.random.default_rng(1).integers(-8, 8, 2000)
    path = tmp_path / "floats.csv"
    path.write_text("a\n" + "\n".join("%.17g" % v for v in values) + "\n")
    arrow = read_with_arrow(path)["a"].to_numpy()
    assert (arrow == values).all()                  # 17 digits read back to the very float written
    assert (read_with_c_parser(path)["a"].to_numpy() == values).all()


def test_columns_come_in_the_files_order_as_usecols_gives_them(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1,x,2.5\n2,y,3.5\n")
    frame = read_with_arrow(path, columns=["c", "a"])
    assert list(frame.columns) == ["a", "c"]
    pd.testing.assert_frame_equal(frame, c_parser(path, columns=["c", "a"]), check_exact=True)


def test_text_dtypes_keep_digits_and_other_dtypes_go_to_the_c_parser(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,x\n007,1\n,2\n010,3\n")
    frame = read_with_arrow(path, dtypes={"id": "str"})
    assert frame["id"].tolist()[::2] == ["007", "010"] and frame["id"].isna().tolist() == [False, True, False]
    pd.testing.assert_frame_equal(frame, c_parser(path, dtypes={"id": "str"}), check_exact=True)
    with pytest.raises(CParserNeeded, match="dtypes"):
        read_with_arrow(path, dtypes={"x": "float32"})
    pd.testing.assert_frame_equal(read_csv_frame(path, dtypes={"x": "float32"}),
                                  c_parser(path, dtypes={"x": "float32"}), check_exact=True)


def test_na_values_add_to_pandas_own_and_a_number_among_them_goes_to_the_c_parser(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n ,-999\n1.5,-999.0\nmissing,3\n")
    options = {"na_values": [" ", "missing"]}
    pd.testing.assert_frame_equal(read_with_arrow(path, **options), c_parser(path, **options), check_exact=True)
    with pytest.raises(CParserNeeded, match="numbers"):
        read_with_arrow(path, na_values=["-999"])
    frame = read_csv_frame(path, na_values=["-999"])
    assert frame["b"].isna().tolist() == [True, True, False]       # pandas' match of -999.0 too


def test_types_settle_over_every_block_of_a_larger_file(tmp_path, caplog):
    rows = 120_000                                  # 1.9 MiB: several blocks, read on several threads
    lines = [f"{i},{i % 7},x{i},{'' if i < rows - 5 else '2021-03-04'}" for i in range(rows)]
    lines[-1] = f"{rows},2.5,last,2021-03-05"      # a float after the ints; a date only at the end
    path = tmp_path / "big.csv"
    path.write_text("n,k,s,d\n" + "\n".join(lines) + "\n")
    with caplog.at_level(logging.DEBUG, logger="pipeline"):
        frame = read_with_arrow(path)
    pd.testing.assert_frame_equal(frame, c_parser(path), check_exact=True)
    assert frame["k"].dtype == "float64" and frame["d"].dtype == pd.read_csv(path)["d"].dtype
    # The first block's types did not hold (2.5 after integers): read again, inferring over every block.
    assert any("inferred over every block" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ errors: today's messages
@pytest.mark.parametrize(("content", "problem"), [
    (b"", "is empty"),
    (b"\x00\x01\x02\xff\xfe\x00binary\x00", "not a text CSV"),
    (b"a,b\n1,2\n3,4,5\n", "line 3"),
    (b"a,b\n\xff\xfe,1\n", "not a text CSV"),
    (NOT_UTF8, "cannot read .*bad.csv as csv: 'utf-8' codec"),
])
def test_bad_files_give_the_one_paragraph_error_they_gave(tmp_path, content, problem):
    path = tmp_path / "bad.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=rf"bad\.csv.*{problem}|{problem}") as info:
        CPU.read(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("dtypes", [None, {"b": "float64"}])
def test_a_wide_row_is_refused_when_some_columns_are_read_on_either_path(tmp_path, dtypes):
    path = tmp_path / "ragged.csv"
    path.write_text("a,b,c\n1,2,3\n4,5,6,7\n8,9,10\n")
    with pytest.raises(DataError, match=r"ragged\.csv: line 3 has 4 fields where the header has 3"):
        CPU.read(path, columns=["a", "b"], dtypes=dtypes)


@pytest.mark.parametrize(("content", "line", "hint"), [
    (b"a,b,c\n1,2,3\n4,5\n", 3, "fields are missing"),                         # a line cut short
    (b"a,b\n1,2,\n3,4,\n", 2, "ends with the separator"),                        # pandas shifts every column
    (b'a,b,c\n1,"two\nlines",3\n\n4,5\n', 5, "fields are missing"),          # lines a quoted value spans count
    (b"a,b,c\n1,2,3\n4,5,6,7\n", 3, "quote the field"),
])
@pytest.mark.parametrize("read", [{}, {"columns": ["a"]}, {"sep": ","}, {"encoding": "latin-1"}],
                         ids=["all columns", "some columns", "given separator", "C parser"])
def test_a_row_with_more_or_fewer_fields_than_the_header_is_refused_naming_its_line(tmp_path, content, line,
                                                                                     hint, read):
    path = tmp_path / "ragged.csv"
    path.write_bytes(content)
    dialect = dialect_of({k: v for k, v in read.items() if k != "columns"})
    with pytest.raises(DataError, match=rf"ragged\.csv: line {line} has \d+ fields where the header has .*{hint}"):
        CPU.read(path, columns=read.get("columns"), dialect=dialect)


def test_a_column_the_file_lacks_is_the_c_parsers_error(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match=r"cannot read .*t\.csv as csv: .*\['zz'\]"):
        CPU.read(path, columns=["a", "zz"])


def test_quoted_values_spanning_lines_read_across_block_ends(tmp_path):
    rows = [f'{i},"line one of {i}\nline two, with a comma",{i * 0.5}' for i in range(40_000)]
    path = tmp_path / "notes.csv"                   # > 1 MiB: some value spans the end of a block
    path.write_text("n,note,x\n" + "\n".join(rows) + "\n")
    frame = read_with_arrow(path)
    pd.testing.assert_frame_equal(frame, c_parser(path), check_exact=True)
    assert len(frame) == 40_000 and frame["note"].str.contains("\n").all()


def test_a_column_that_turns_to_text_after_the_c_parsers_first_chunk_is_text_throughout(tmp_path):
    path = tmp_path / "ids.csv"                     # past the C parser's low_memory chunk of rows
    path.write_text("id,x\n" + "007,1\n" * 300_000 + "abc,2\n")
    frame = read_with_arrow(path)
    assert frame["id"].iloc[0] == "007" and frame["id"].iloc[-1] == "abc"
    pd.testing.assert_frame_equal(frame, pd.read_csv(path, low_memory=False), check_exact=True)


def test_text_is_read_as_pandas_holds_it_with_no_cast_after_the_read(tmp_path, monkeypatch):
    """pandas' ``str`` columns hold ``large_string``; text read as ``string`` was cast column by
    column on one core (3 s of a 10M-row table's read)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = tmp_path / "t.csv"
    path.write_text("id,plan,charge\n" + "".join(f"c{i},{'ab'[i % 2]}{i % 7},{i / 3:.3f}\n" for i in range(5000)))
    casts: list[str] = []
    real = pc.cast

    def counted(arr, *args, **kwargs):
        casts.append(str(getattr(arr, "type", "?")))
        return real(arr, *args, **kwargs)

    monkeypatch.setattr(pc, "cast", counted)
    frame = read_with_arrow(path)
    monkeypatch.undo()
    assert casts == []
    assert frame["plan"].array._pa_array.type == pa.large_string()
    pd.testing.assert_frame_equal(frame, read_with_c_parser(path), check_dtype=False)
    assert str(frame["id"].dtype) == str(read_with_c_parser(path)["id"].dtype)


@pytest.mark.parametrize("content", ["a,b\n1,2\n".encode("utf-8"), "a,b\n1,2\n".encode("utf-16-le")],
                         ids=["UTF-8 bytes", "UTF-16 without its byte order mark"])
def test_a_utf16_read_of_a_file_without_its_byte_order_mark_is_a_data_error(tmp_path, content):
    """Python's UTF-16 codec raises UnicodeError (not UnicodeDecodeError) on a stream without a
    BOM: it was exit 1, "internal error ... this is a bug"."""
    path = tmp_path / "wide.csv"
    path.write_bytes(content)
    with pytest.raises(DataError, match=r"wide\.csv is not a text CSV file in utf-16 \(.*BOM"):
        CPU.read(path, dialect=dialect_of({"encoding": "utf-16"}))


def test_parquet_decimals_read_as_floats_as_cudf_reads_them_as_numbers(tmp_path):
    """A warehouse's NUMERIC(10, 2) column: pandas gave Decimal objects, taken for text."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.backends.input_files import parquet_column_types

    prices = pa.array([decimal.Decimal("12.50"), None, decimal.Decimal("-3.05")], type=pa.decimal128(10, 2))
    pq.write_table(pa.table({"price": prices, "name": ["a", "b", "c"]}), tmp_path / "t.parquet")
    frame = CPU.read(tmp_path / "t.parquet")
    assert frame["price"].dtype == "float64" and frame["price"].isna().tolist() == [False, True, False]
    assert frame["price"].iloc[[0, 2]].tolist() == [12.5, -3.05]
    assert parquet_column_types(tmp_path / "t.parquet", ["price", "name"]) == {"price": "float64", "name": "object"}
