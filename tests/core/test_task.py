"""The task a split declares (``pipeline.core.problems.Task``): what it refuses and how it
round-trips through the records."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.core.problems import BINARY, Task


def test_an_unknown_task_kind_is_refused_naming_the_kinds():
    with pytest.raises(ValueError, match="task must be one of .*regression.*not 'ranking'"):
        Task("ranking")


def test_a_multiclass_task_of_one_class_is_refused():
    with pytest.raises(ValueError, match=r"at least 2 classes \(got \['a'\]\)"):
        Task("multiclass", classes=("a",))


def test_numpy_scalars_are_written_as_plain_values_and_read_back():
    task = Task("multiclass", classes=(np.int64(3), np.int64(1), np.int64(2)))
    data = task.to_dict()
    assert data == {"kind": "multiclass", "classes": [3, 1, 2]} and type(data["classes"][0]) is int
    assert Task.from_dict(data) == Task("multiclass", classes=(3, 1, 2))
    assert Task.from_dict(None) == BINARY
    assert list(task.decode(np.array([1, 0]))) == [np.int64(1), np.int64(3)]
