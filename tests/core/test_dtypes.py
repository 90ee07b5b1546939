"""One dtype rule (pipeline.core.dtypes) for every dtype pandas, NumPy, pyarrow and cuDF produce,
and every caller's words for a column taken from it, so none can disagree with another."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from pipeline.core.dtypes import DTYPE_KINDS, dtype_kind, is_number, is_number_or_bool
from pipeline.events.checks import key_kind
from pipeline.features.column_types import column_type

ROOT = Path(__file__).resolve().parents[2]

# dtype -> its kind: NumPy's, pandas' extension dtypes and pyarrow's through ArrowDtype.
EXPECTED: list[tuple[object, str]] = [
    *[(np.dtype(t), "integer") for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")],
    *[(np.dtype(t), "float") for t in ("float16", "float32", "float64")],
    (np.dtype("bool"), "bool"), (np.dtype("datetime64[ns]"), "date"), (np.dtype("datetime64[s]"), "date"),
    (np.dtype("timedelta64[ns]"), "duration"), (np.dtype("object"), "text"), (np.dtype("U8"), "text"),
    (np.dtype("S8"), "text"), (np.dtype("complex128"), "other"),
    *[(pd.api.types.pandas_dtype(t), "integer") for t in ("Int8", "Int64", "UInt32")],
    (pd.Float32Dtype(), "float"), (pd.Float64Dtype(), "float"), (pd.BooleanDtype(), "bool"),
    (pd.StringDtype(), "text"), (pd.StringDtype("python"), "text"), (pd.StringDtype("pyarrow"), "text"),
    (pd.DatetimeTZDtype(tz="UTC"), "date"), (pd.CategoricalDtype(["a", "b"]), "category"),
    (pd.CategoricalDtype([True, False]), "category"), (pd.CategoricalDtype([1, 2]), "category"),
    (pd.PeriodDtype("D"), "other"), (pd.IntervalDtype("int64"), "other"),
    (pd.SparseDtype("float64"), "float"), (pd.SparseDtype("int64"), "integer"),
    *[(pd.ArrowDtype(t), "integer") for t in (pa.int8(), pa.int64(), pa.uint16())],
    (pd.ArrowDtype(pa.float32()), "float"), (pd.ArrowDtype(pa.float64()), "float"),
    (pd.ArrowDtype(pa.decimal128(10, 2)), "float"), (pd.ArrowDtype(pa.bool_()), "bool"),
    (pd.ArrowDtype(pa.string()), "text"), (pd.ArrowDtype(pa.large_string()), "text"),
    (pd.ArrowDtype(pa.timestamp("us")), "date"), (pd.ArrowDtype(pa.timestamp("ms", tz="UTC")), "date"),
    (pd.ArrowDtype(pa.date32()), "date"), (pd.ArrowDtype(pa.duration("s")), "duration"),
    (pd.ArrowDtype(pa.dictionary(pa.int32(), pa.string())), "category"),
    (pd.ArrowDtype(pa.time64("us")), "other"), (pd.ArrowDtype(pa.list_(pa.int64())), "other"),
    (pd.ArrowDtype(pa.struct([("a", pa.int64())])), "other"), (pd.ArrowDtype(pa.binary()), "other"),
]
# Names as a run records them (str(dtype) of the fitted frame) and as cuDF names its own dtypes.
NAMES = [("int64", "integer"), ("Int64", "integer"), ("float32", "float"), ("bool", "bool"),
         ("boolean", "bool"), ("datetime64[ns]", "date"), ("datetime64[ns, UTC]", "date"),
         ("timedelta64[ns]", "duration"), ("object", "text"), ("str", "text"), ("string", "text"),
         ("category", "category"), ("decimal64", "float"), ("list", "other"), ("struct", "other"),
         ("no such dtype", "other")]


@pytest.mark.parametrize(("dtype", "kind"), EXPECTED + NAMES, ids=lambda v: str(v))
def test_every_dtype_has_one_kind(dtype: object, kind: str) -> None:
    assert dtype_kind(dtype) == kind
    assert kind in DTYPE_KINDS
    assert is_number(dtype) == (kind in ("integer", "float"))
    assert is_number_or_bool(dtype) == (kind in ("integer", "float", "bool"))


def test_a_column_of_each_dtype_is_classified_like_its_dtype() -> None:
    """Real columns (pandas reads a value's dtype back, not only the dtype object we made)."""
    frame = pd.DataFrame({
        "n": [1, 2], "x": [0.5, None], "b": [True, False], "t": pd.to_datetime(["2020-01-01", None]),
        "d": pd.to_timedelta(["1D", "2D"]), "s": ["a", None], "c": pd.Categorical(["a", "b"]),
    })
    arrow = pa.table({"n": [1, 2], "s": ["a", "b"], "t": pa.array([1, 2], pa.timestamp("s"))}).to_pandas(
        types_mapper=pd.ArrowDtype)
    assert {c: dtype_kind(frame[c].dtype) for c in frame} == {
        "n": "integer", "x": "float", "b": "bool", "t": "date", "d": "duration", "s": "text", "c": "category"}
    assert {c: dtype_kind(arrow[c].dtype) for c in arrow} == {"n": "integer", "s": "text", "t": "date"}


def test_cudf_dtypes_have_their_kinds() -> None:
    cudf = pytest.importorskip("cudf")
    assert dtype_kind(cudf.CategoricalDtype(["a"])) == "category"
    assert dtype_kind(cudf.Decimal64Dtype(10, 2)) == "float"
    assert dtype_kind(cudf.ListDtype("int64")) == "other"


@pytest.mark.parametrize(("dtype", "kind"), EXPECTED + NAMES, ids=lambda v: str(v))
def test_every_caller_says_the_same_of_a_dtype(dtype: object, kind: str) -> None:
    """Selectors, event keys and the server's request fields each map the kind to their own
    word, and the words agree: a duration is a number to none of them, a bool is no text."""
    from pipeline.serve.served_model import BOOLEAN, DATETIME, INTEGER, NUMBER, TEXT, field_kind

    column = type("Column", (), {"dtype": dtype})()
    assert column_type(column) == {"bool": "bool", "date": "date", "integer": "numeric",
                                   "float": "numeric"}.get(kind, "categorical")
    if kind != "category":                 # a category's key kind is what its categories hold
        assert key_kind(dtype) == {"bool": "bool", "date": "date", "duration": "duration", "integer": "number",
                                   "float": "number", "text": "text"}.get(kind, str(dtype))
    if isinstance(dtype, str):             # the server reads the dtype names a run records
        assert field_kind(dtype) == {"bool": BOOLEAN, "integer": INTEGER, "float": NUMBER,
                                     "date": DATETIME}.get(kind, TEXT)


def test_the_mlflow_signature_reads_the_same_rule() -> None:
    pytest.importorskip("mlflow")
    from mlflow.types.schema import DataType

    from pipeline.tracking.mlflow_pyfunc import column_type as mlflow_type

    assert [mlflow_type(n) for n in ("int64", "Float64", "boolean", "datetime64[ns, UTC]", "timedelta64[ns]",
                                     "category", "str")] == [
        DataType.long, DataType.double, DataType.boolean, DataType.datetime, DataType.string, DataType.string,
        DataType.string]


def test_no_module_but_the_rule_asks_pandas_what_a_dtype_is() -> None:
    """pandas' dtype predicates (is_numeric_dtype and the like) are called in one module only."""
    callers = []
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        if path.name == "dtypes.py" and path.parent.name == "core":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
            if name.startswith("is_") and name.endswith("_dtype"):
                callers.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    assert not callers, "ask pipeline.core.dtypes.dtype_kind instead: " + "; ".join(callers)
