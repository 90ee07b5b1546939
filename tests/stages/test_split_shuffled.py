"""The random split draws scikit-learn's ``train_test_split`` rows, in its order, without its
per-row Python lists (``split_positions.shuffled_split``): the same rows on every device and as
before, for binary and multiclass labels, any shares and seeds, and the cases it hands to
scikit-learn itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import train_test_split

from pipeline.featuresets import split_positions
from pipeline.featuresets.split_positions import shuffled_split
from pipeline.stages.split import split_frame


def _same_as_sklearn(positions, test_size, seed, labels) -> None:
    """The same two arrays (values, order, dtype), or the same error."""
    try:
        theirs = train_test_split(positions, test_size=test_size, random_state=seed, stratify=labels)
    except ValueError as exc:
        with pytest.raises(ValueError, match=None) as ours:
            shuffled_split(positions, test_size, seed, labels)
        assert str(ours.value) == str(exc)
        return
    ours = shuffled_split(positions, test_size, seed, labels)
    for mine, reference in zip(ours, theirs):
        assert mine.dtype == reference.dtype and np.array_equal(mine, reference)


@pytest.fixture
def no_fallback(monkeypatch):
    """The plain cases must take the whole-array path, not scikit-learn's."""
    def refuse(*args, **kwargs):
        raise AssertionError("handed to scikit-learn")

    monkeypatch.setattr(split_positions, "_sklearn_split", refuse)


@pytest.mark.parametrize("n_rows", [10, 37, 1_000, 20_011])
@pytest.mark.parametrize("test_size", [0.1, 0.2, 0.125, 1 / 3, 0.5, 0.9])
@pytest.mark.parametrize("seed", [0, 42, 2**31 - 1])
def test_binary_and_unstratified_splits_are_scikit_learns(n_rows, test_size, seed):
    """(10 rows at 0.9 leave one training row for two classes: scikit-learn's error, on both.)"""
    rng = np.random.default_rng(n_rows + seed)
    labels = (rng.random(n_rows) < 0.27).astype("int8")
    labels[:2], labels[2:4] = 0, 1                             # both classes, two rows each at least
    positions = np.sort(rng.choice(10 * n_rows, n_rows, replace=False))   # a split of a split
    _same_as_sklearn(positions, test_size, seed, labels)
    _same_as_sklearn(positions, test_size, seed, None)


@pytest.mark.parametrize("classes", [3, 7, 16, 17, 40])
@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "int16"])
def test_multiclass_splits_are_scikit_learns_including_ties(classes, dtype, no_fallback):
    rng = np.random.default_rng(classes)
    skewed = np.concatenate([rng.integers(0, classes, 5_000) % rng.integers(1, classes + 1, 5_000),
                             np.repeat(np.arange(classes), 2)])        # every class twice at least
    rng.shuffle(skewed)
    even = np.repeat(np.arange(classes), 30)                  # equal shares: remainders tie
    for codes in (skewed, even):
        codes = codes.astype(dtype)
        assert np.bincount(codes).min() >= 2
        for test_size in (0.2, 0.15, 0.5):
            ours = shuffled_split(np.arange(len(codes)), test_size, 7, codes)
            theirs = train_test_split(np.arange(len(codes)), test_size=test_size, random_state=7, stratify=codes)
            assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("values", [[3, 7, 100], [-128, 0, 127], [-5, -4], [0, 1 << 21, 1 << 22]])
def test_labels_of_any_integer_values_split_as_scikit_learn_splits_them(values):
    rng = np.random.default_rng(len(values))
    labels = np.asarray(values)[rng.integers(0, len(values), 3_000)]
    labels = labels.astype("int8" if max(map(abs, values)) < 128 else "int64")
    _same_as_sklearn(np.arange(3_000), 0.2, 42, labels)
    _same_as_sklearn(np.arange(3_000), 0.2, 42, labels.astype("uint64") if min(values) >= 0 else labels)


def test_text_labels_and_int_sizes_are_left_to_scikit_learn():
    labels = np.array(["a", "b", "c"] * 20)
    _same_as_sklearn(np.arange(60), 0.25, 3, labels)
    theirs = train_test_split(np.arange(60), test_size=12, random_state=3)
    assert all(np.array_equal(a, b) for a, b in zip(shuffled_split(np.arange(60), 12, 3), theirs))


def test_impossible_splits_raise_scikit_learns_errors():
    one_of_a_class = np.array([0] * 9 + [1], dtype="int8")
    with pytest.raises(ValueError, match="least populated class"):
        shuffled_split(np.arange(10), 0.2, 42, one_of_a_class)
    three_classes = np.repeat(np.arange(3), 4).astype("int32")
    with pytest.raises(ValueError, match="greater or equal to the number of classes"):
        shuffled_split(np.arange(12), 0.1, 42, three_classes)      # 2 test rows for 3 classes
    with pytest.raises(ValueError, match="train set will be empty"):
        shuffled_split(np.arange(1), 0.5, 42, None)


def test_the_split_stage_keeps_the_rows_train_test_split_chose(no_fallback):
    """The stage's three splits are the two train_test_split calls it always made."""
    rng = np.random.default_rng(5)
    frame = pd.DataFrame({"x": rng.random(4_000), "y": np.where(rng.random(4_000) < 0.3, "Yes", "No")})
    data = split_frame(frame, "y", positive="Yes", test=0.2, valid=0.1, seed=11, backend="cpu")
    labels = (frame["y"] == "Yes").to_numpy().astype("int8")
    rest, test = train_test_split(np.arange(4_000), test_size=0.2, random_state=11, stratify=labels)
    train, valid = train_test_split(rest, test_size=0.1 / 0.8, random_state=11, stratify=labels[rest])
    for name, rows in (("train", train), ("valid", valid), ("test", test)):
        assert np.array_equal(data.frames[name]["x"].to_numpy(), frame["x"].to_numpy()[np.sort(rows)])
