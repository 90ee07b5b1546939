"""The GPU-API check (scripts/check_gpu_api.py) on the patterns the event and date code uses:
an ``is_partitioned`` guard written as a conditional expression, and group-by results, which are
GroupBy objects, not frames. (Beside tests/scripts/test_check_gpu_api.py, which holds the check's other
unit tests; these run without RAPIDS too.)"""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import script_module


@pytest.fixture(scope="module")
def check():
    with script_module("check_gpu_api") as module:
        yield module


@pytest.fixture(scope="module")
def facts(check):
    return check.read_gpu_facts()


def flow(check, facts, source: str):
    return check.scan_flow_source(textwrap.dedent(source), "t.py", facts)


def test_a_partition_guard_in_a_conditional_expression_types_each_branch(check, facts):
    scan = flow(check, facts, """
        from pipeline.backends import is_partitioned

        def meta(frame, backend):
            return frame._meta if is_partitioned(frame) else frame.iloc[:0]

        def size(frame, backend):
            return frame.head(1) if not is_partitioned(frame) else frame.partitions[0]
    """)
    by_member = {s.member: s for s in scan.members}
    assert by_member["_meta"].receivers == ("dask_cudf.DataFrame",) and by_member["_meta"].certain
    assert by_member["iloc"].receivers == ("cudf.DataFrame",)
    assert by_member["head"].receivers == ("cudf.DataFrame",)
    assert by_member["partitions"].receivers == ("dask_cudf.DataFrame",)


def test_group_by_results_are_typed_as_the_librarys_group_by_objects(check, facts):
    scan = flow(check, facts, """
        from pipeline.backends import is_partitioned

        def counts(frame, keys, backend):
            if is_partitioned(frame):
                return frame.groupby(keys).size()
            sizes = frame.groupby(keys, sort=True).size()
            return frame.groupby(keys)["x"].max(), sizes

        def series_counts(frame, backend):
            return frame["x"].groupby(frame["k"]).agg("sum")
    """)
    sizes = sorted(s.receivers for s in scan.members if s.member == "size")
    assert sizes == [(check.GROUP_BY_TYPES[("frame", False)],), (check.GROUP_BY_TYPES[("frame", True)],)]
    series_group_by = tuple(sorted(check.GROUP_BY_TYPES[("series", dask)] for dask in (False, True)))
    assert [s.receivers for s in scan.members if s.member == "agg"] == [series_group_by]   # frame: by its name
    getitem = [s for s in scan.members if s.member == "__getitem__" and "GroupBy" in s.receivers[0]]
    assert getitem and not [s for s in scan.members if s.member == "max"]      # past the selection: untyped
