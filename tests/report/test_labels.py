"""How the report names times, classes and features: rounded to what a reader compares, the
target's own values for its classes, one-hot columns as their source column and level."""

from __future__ import annotations

import pytest

from pipeline.report.html import duration
from pipeline.report.labels import class_namer, feature_namer


@pytest.mark.parametrize("seconds,shown", [
    (None, "-"), (0, "0 s"), (0.0004, "1 ms"), (0.85, "850 ms"), (0.9999, "1.00 s"), (4.2749, "4.27 s"),
    (12.34567, "12.3 s"), (59.96, "1 min 00 s"), (125.4, "2 min 05 s"), (3599.6, "1 h 00 min"),
    (3725, "1 h 02 min"),
])
def test_times_are_rounded_to_what_matters(seconds, shown):
    assert duration(seconds) == shown


def test_binary_classes_take_the_positive_value_and_the_recorded_other_one():
    task = {"kind": "binary", "positive": "Yes"}
    facts = [{"rows": 10}, {"task": {"kind": "binary", "positive": "Yes"}, "negative": "No"}]
    name = class_namer(task, facts)
    assert [name(0), name(1), name("1"), name(1.0)] == ["No", "Yes", "Yes", "Yes"]


def test_one_value_against_several_is_named_as_such():
    name = class_namer({"kind": "binary", "positive": "<30"}, [{"task": {"kind": "binary", "positive": "<30"}}])
    assert [name(0), name(1)] == ["not <30", "<30"]


def test_a_split_of_another_task_does_not_name_these_classes():
    name = class_namer({"kind": "binary", "positive": "Yes"},
                       [{"task": {"kind": "binary", "positive": "Y"}, "negative": "N"}])
    assert name(0) == "not Yes"


@pytest.mark.parametrize("task", [None, {"kind": "binary"}, {"kind": "multiclass", "classes": ["a", "b", "c"]},
                                  {"kind": "regression"}])
def test_labels_that_are_the_values_already_are_shown_as_recorded(task):
    name = class_namer(task, [])
    assert [name(0), name("b"), name(True)] == ["0", "b", "True"]


def test_one_hot_features_show_their_source_column_and_level():
    name = feature_namer(["Contract", "PaymentMethod", "a=b", "tenure"])
    assert name("Contract=Two year") == "Contract = Two year"
    assert name("PaymentMethod=Bank transfer (automatic)") == "PaymentMethod = Bank transfer (automatic)"
    assert name("Contract=__rare__") == "Contract = (rare values)"
    assert name("a=b=c") == "a=b = c"                       # the column's own name holds "="
    assert name("tenure") == "tenure" and name("TotalCharges_missing") == "TotalCharges_missing"
    assert name("other=x") == "other=x"                     # not a read column: left as it is


def test_without_recorded_columns_the_first_equals_sign_splits():
    assert feature_namer([])("Contract=Month-to-month") == "Contract = Month-to-month"
    assert feature_namer([])("=x") == "=x"


def test_the_split_records_what_label_0_stands_for_when_the_target_has_two_values():
    import pandas as pd

    from pipeline.backends import backend_for
    from pipeline.stages.split import other_value
    from pipeline.core.problems import Task

    frame = pd.DataFrame({"Churn": ["No", "Yes", "No", None]})
    backend = backend_for(frame, None)
    assert other_value(frame, "Churn", Task("binary", positive="Yes"), backend) == "No"
    three = pd.DataFrame({"age": ["<30", ">30", "NO"]})
    assert other_value(three, "age", Task("binary", positive="<30"), backend) is None     # one against several
    assert other_value(frame, "Churn", Task("binary"), backend) is None                  # 0/1 target: no value
