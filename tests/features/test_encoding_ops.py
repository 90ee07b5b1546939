"""The encodings of ``features/ops``: target_encode (out of fold on the training split, so a
training row never sees its own label), frequency_encode, hash_encode, clip, quantile_bin and
group_rare, and the rare-level rule one_hot and categorify share with group_rare."""

from __future__ import annotations

import json

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError
from sklearn.metrics import roc_auc_score

from pipeline.backends import get_backend
from pipeline.core.errors import ConfigError, DataError
from pipeline.core.problems import Task
from pipeline.features import (
    Categorify, Clip, Drop, FeatureWorkflow, FrequencyEncode, GroupRare, HashEncode, OneHot, QuantileBin, Standardize,
    Target, TargetEncode,
)
from pipeline.features.ops.counting import hash_text, stable_bucket
from pipeline.featuresets import build_in_memory
from pipeline.stages import SplitData

CPU = get_backend("cpu")


def ids_with_random_labels(rows: int = 2000, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A column of unique ids and a label independent of them: nothing to learn."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"id": [f"u{i}" for i in rng.permutation(rows)], "x": rng.normal(size=rows)})
    return frame, rng.integers(0, 2, size=rows)


# ---------------------------------------------------------------- target_encode
def test_target_encode_is_out_of_fold_on_the_training_split():
    """Unique ids with a random label: encoded in fold (each row's own label in its id's
    mean) they rank the training labels almost perfectly; out of fold they carry nothing.
    The training output must be the out-of-fold one."""
    frame, y = ids_with_random_labels()
    wf = FeatureWorkflow([TargetEncode(columns=["id"], smoothing=1.0)])
    trained = wf.fit_transform(frame, y)
    in_fold = wf.transform(frame)                 # the full-split means, as any other split gets
    assert roc_auc_score(y, in_fold["id"]) > 0.95
    assert abs(roc_auc_score(y, trained["id"]) - 0.5) < 0.05
    prior = y.mean()
    # No id is in two folds, so each training row gets the prior; in fold it gets (y + m*p) / (1 + m).
    np.testing.assert_allclose(trained["id"], prior)
    np.testing.assert_allclose(in_fold["id"], (y + prior) / 2)


def test_target_encode_folds_are_bounded_so_a_row_cannot_be_ordered_by_its_own_label():
    """folds: 100000 was accepted: one row per fold is leave-one-out, whose encoding orders a
    category's rows by their labels (a category-free column reached train ROC AUC 0.79, test 0.48)."""
    with pytest.raises(ValidationError, match="less than or equal to 20"):
        TargetEncode(columns=["c"], folds=100_000)
    frame = pd.DataFrame({"c": list("aabbaabbab")})
    with pytest.raises(DataError, match="folds: 20 needs at least 20 training rows, and the training split has 10"):
        FeatureWorkflow([TargetEncode(columns=["c"], folds=20)]).fit_transform(frame, np.array([0, 1] * 5))


def test_target_encode_keeps_real_signal_out_of_fold():
    rng = np.random.default_rng(1)
    cats = rng.choice(list("abcdefgh"), size=3000)
    rate = {c: i / 8 for i, c in enumerate("abcdefgh")}
    y = (rng.random(3000) < np.vectorize(rate.get)(cats)).astype(int)
    trained = FeatureWorkflow([TargetEncode(columns=["c"])]).fit_transform(pd.DataFrame({"c": cats}), y)
    assert roc_auc_score(y, trained["c"]) > 0.75


def test_target_encode_state_is_the_smoothed_mean_with_the_prior_for_unseen_and_missing():
    frame = pd.DataFrame({"c": ["a", "a", "a", "b", "b", None]})
    y = np.array([1, 1, 0, 0, 0, 1])
    wf = FeatureWorkflow([TargetEncode(columns=["c"], smoothing=2.0)])
    wf.fit(frame, y)
    prior = 0.5
    out = wf.transform(pd.DataFrame({"c": ["a", "b", "z", None]}))
    np.testing.assert_allclose(out["c"], [(2 + 2 * prior) / (3 + 2), (0 + 2 * prior) / (2 + 2), prior, prior])
    state = wf.to_dict()["ops"][0]["state"]
    assert state["task"] == "binary" and state["prior"] == [prior] and state["categories"] == {"c": ["a", "b"]}


def test_target_encode_folds_are_seeded_and_deterministic():
    frame, y = ids_with_random_labels(300)
    frame["c"] = np.array(list("abc"))[np.arange(300) % 3]
    y = y.copy()

    def encoded(seed: int) -> np.ndarray:
        return FeatureWorkflow([TargetEncode(columns=["c"], seed=seed, folds=4)]).fit_transform(
            frame[["c"]], y)["c"].to_numpy()

    np.testing.assert_array_equal(encoded(0), encoded(0))
    assert not np.array_equal(encoded(0), encoded(1))


def test_target_encode_out_of_fold_value_is_the_other_folds_mean():
    frame = pd.DataFrame({"c": ["a"] * 6 + ["b"] * 6})
    y = np.array([1, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 1])
    op = TargetEncode(columns=["c"], folds=3, smoothing=1.0, seed=7)
    target = Target.of(y, CPU)
    state = op.fit(frame, CPU, target)
    got = op.transform_training(frame, CPU, state, target)["c"].to_numpy()
    fold = np.random.default_rng(7).permutation(12) % 3
    prior = y.mean()
    for row in range(12):
        others = (fold != fold[row]) & (frame["c"] == frame["c"][row]).to_numpy()
        assert got[row] == pytest.approx((y[others].sum() + prior) / (others.sum() + 1))


def test_target_encode_multiclass_gives_a_column_per_class_and_regression_the_mean():
    frame = pd.DataFrame({"c": ["a", "a", "b", "b", "b", "c"], "k": [1.0] * 6})
    task = Task("multiclass", classes=("lo", "mid", "hi"))
    wf = FeatureWorkflow([TargetEncode(columns=["c"], smoothing=0.0)])
    wf.fit(frame, np.array([0, 1, 2, 2, 2, 0]), task=task)
    assert wf.output_columns_ == ["k", "c=te_lo", "c=te_mid", "c=te_hi"]
    out = wf.transform(frame)
    np.testing.assert_allclose(out.iloc[0][["c=te_lo", "c=te_mid", "c=te_hi"]], [0.5, 0.5, 0.0])
    np.testing.assert_allclose(out.iloc[2][["c=te_lo", "c=te_mid", "c=te_hi"]], [0.0, 0.0, 1.0])
    np.testing.assert_allclose(out[["c=te_lo", "c=te_mid", "c=te_hi"]].sum(axis=1), 1.0)

    reg = FeatureWorkflow([TargetEncode(columns=["c"], smoothing=0.0)])
    reg.fit(frame, np.array([1.0, 3.0, 10.0, 20.0, 30.0, 5.0]))
    np.testing.assert_allclose(reg.transform(frame)["c"], [2, 2, 20, 20, 20, 5])


def test_target_encode_keep_adds_the_encoding_after_the_columns_and_leaves_the_column_as_it_was():
    frame = pd.DataFrame({"c": ["a", "a", "b", "b", "b", "c"], "k": [1.0] * 6})
    kept = FeatureWorkflow([TargetEncode(columns=["c"], smoothing=0.0, keep=True), Categorify(columns=["c"])])
    kept.fit(frame, np.array([1.0, 3.0, 10.0, 20.0, 30.0, 5.0]))
    assert kept.output_columns_ == ["c", "k", "c=te"]
    out = kept.transform(frame)
    np.testing.assert_allclose(out["c=te"], [2, 2, 20, 20, 20, 5])
    assert out["c"].tolist() == [2, 2, 1, 1, 1, 3]               # coded by the next op, by frequency
    task = Task("multiclass", classes=("lo", "mid", "hi"))
    per_class = FeatureWorkflow([TargetEncode(columns=["c"], smoothing=0.0, keep=True), Categorify(columns=["c"])])
    per_class.fit(frame, np.array([0, 1, 2, 2, 2, 0]), task=task)
    assert per_class.output_columns_ == ["c", "k", "c=te_lo", "c=te_mid", "c=te_hi"]
    assert per_class.transform(frame)["c"].tolist() == [2, 2, 1, 1, 1, 3]
    # Out of fold on the training rows as without keep: the same values under the new name.
    frame_ids, y = ids_with_random_labels(300)
    alone = FeatureWorkflow([TargetEncode(columns=["id"])]).fit_transform(frame_ids, y)
    beside = FeatureWorkflow([TargetEncode(columns=["id"], keep=True), Categorify(columns=["id"])]).fit_transform(
        frame_ids, y)
    np.testing.assert_array_equal(beside["id=te"], alone["id"])
    assert sorted(beside["id"].tolist()) == list(range(1, 301))          # each id its own code


def test_a_view_of_the_features_reads_its_columns_and_codes_on_the_same_rows():
    frame = pd.DataFrame({"c": list("aabbbcaabc") * 30, "d": list("xyxyxyxyzz") * 30,
                          "k": np.arange(300, dtype=float)})
    frame["label"] = (np.arange(300) % 3 == 0).astype("int8")
    data = SplitData(frames={"train": frame.iloc[:200].reset_index(drop=True),
                             "test": frame.iloc[200:].reset_index(drop=True)}, target="label", positive=1, backend=CPU)
    features = build_in_memory(data, [TargetEncode(columns=["c"], keep=True), Categorify(columns=["c", "d"])])
    assert features.feature_names == ["c", "d", "k", "c=te"] and features.categorical_columns == ["c", "d"]
    view = features.view(["d", "k", "c=te"])
    assert view.whole is features and view.uid == features.uid and view.categorical_columns == ["d"]
    for split in ("train", "test"):
        np.testing.assert_array_equal(view.X[split], features.X[split][:, [1, 2, 3]])
        np.testing.assert_array_equal(view.codes[split], features.codes[split][:, [1]])
        np.testing.assert_array_equal(view.y[split], features.y[split])
    assert features.matching(features.feature_names) is features
    np.testing.assert_array_equal(view.matching(["c", "k"]).X["test"], features.X["test"][:, [0, 2]])
    with pytest.raises(DataError, match=r"column\(s\) they do not have: \['nope'\]"):
        features.view(["k", "nope"])


def test_ops_after_target_encode_are_fitted_on_the_out_of_fold_values():
    frame, y = ids_with_random_labels(500)
    wf = FeatureWorkflow([TargetEncode(columns=["id"], smoothing=1.0), Standardize(columns=["id"])])
    wf.fit(frame, y)
    mean, std = wf.op_states_[1].mean_std["id"]
    # Every out-of-fold value is the prior here; the in-fold values would spread around it.
    assert mean == pytest.approx(y.mean()) and std < 1e-9
    assert TargetEncode(columns=["id"], smoothing=1.0).fit(frame, CPU, Target.of(y, CPU)) == wf.op_states_[0]


def test_build_in_memory_encodes_the_training_split_out_of_fold_and_other_splits_in_full():
    frame, y = ids_with_random_labels(400)
    frame["label"] = y.astype("int8")
    frames = {"train": frame.iloc[:300].reset_index(drop=True), "valid": frame.iloc[300:].reset_index(drop=True)}
    frames["valid"].loc[:9, "id"] = frames["train"]["id"][:10].to_numpy()      # ids seen in training
    data = SplitData(frames=frames, target="label", positive=1, backend=CPU)
    features = build_in_memory(data, [TargetEncode(columns=["id"], smoothing=1.0)])
    column = features.feature_names.index("id")
    prior = frames["train"]["label"].mean()
    np.testing.assert_allclose(features.X["train"][:, column], prior, rtol=1e-6)
    expected = (frames["train"]["label"][:10].to_numpy() + prior) / 2
    np.testing.assert_allclose(features.X["valid"][:10, column], expected, rtol=1e-6)


def test_target_encode_needs_the_target_and_memory():
    frame, y = ids_with_random_labels(50)
    with pytest.raises(DataError, match="target_encode.*no target was given"):
        FeatureWorkflow([TargetEncode(columns=["id"])]).fit_transform(frame)
    with pytest.raises(DataError, match="50 rows"):
        FeatureWorkflow([TargetEncode(columns=["id"])]).fit_transform(frame, y[:40])
    with pytest.raises(ConfigError, match="target_encode.*partitioned"):
        FeatureWorkflow([TargetEncode(columns=["id"])]).fit_transform(dd.from_pandas(frame, npartitions=2), y)


def test_target_encode_state_round_trips_through_workflow_json(tmp_path):
    frame, y = ids_with_random_labels(100)
    wf = FeatureWorkflow([TargetEncode(columns=["id"])])
    wf.fit(frame, y)
    path = tmp_path / "workflow.json"
    wf.save(path)
    again = FeatureWorkflow.load(path)
    pd.testing.assert_frame_equal(again.transform(frame), wf.transform(frame))
    json.loads(path.read_text())


# ---------------------------------------------------------------- frequency_encode
def test_frequency_encode_shares_counts_and_zero_for_unseen():
    frame = pd.DataFrame({"c": ["a", "a", "b", None, "a", "c"]})
    share = FeatureWorkflow([FrequencyEncode(columns=["c"])])
    share.fit(frame)
    np.testing.assert_allclose(share.transform(pd.DataFrame({"c": ["a", "b", "z", None]}))["c"], [0.5, 1 / 6, 0, 0])
    count = FeatureWorkflow([FrequencyEncode(columns=["c"], normalize=False)])
    count.fit(frame)
    np.testing.assert_allclose(count.transform(frame)["c"], [3, 3, 1, 0, 3, 1])


def test_frequency_encode_fits_the_same_on_partitioned_data():
    frame = pd.DataFrame({"c": list("aabbbcdddd") * 3})
    memory = FeatureWorkflow([FrequencyEncode(columns=["c"])])
    memory.fit(frame)
    parts = FeatureWorkflow([FrequencyEncode(columns=["c"])])
    parts.fit(dd.from_pandas(frame, npartitions=3))
    assert memory.states_ == parts.states_


# ---------------------------------------------------------------- hash_encode
def test_hash_encode_is_a_documented_stable_hash():
    import hashlib

    frame = pd.DataFrame({"c": ["alpha", "beta", None, "alpha"], "n": [3.0, np.nan, 7.0, 3.0]})
    op = HashEncode(columns=["c", "n"], buckets=16)
    out = op.transform(frame, CPU, op.fit(frame, CPU))
    digest = hashlib.blake2b(b"alpha", digest_size=8).digest()
    assert out["c"][0] == int.from_bytes(digest, "little") % 16 + 1 == stable_bucket("alpha", 16)
    assert out["c"][2] == 0 and out["n"][1] == 0                    # missing
    assert out["c"][0] == out["c"][3]
    assert out["n"][0] == stable_bucket(3, 16)                      # 3.0 hashes as 3, as an int column would
    assert hash_text(3.0) == hash_text(3) == "3" and hash_text(True) == "True"
    assert str(out["c"].dtype) == "uint8"
    assert op.categorical_cardinalities(op.fit(frame, CPU)) == {"c": 17, "n": 17}


def test_hash_encode_gives_a_value_its_bucket_in_any_batch():
    frame = pd.DataFrame({"c": [f"id{i}" for i in range(200)]})
    op = HashEncode(columns=["c"], buckets=50)
    whole = op.transform(frame, CPU, op.fit(frame, CPU))["c"].to_numpy()
    part = op.transform(frame.iloc[120:130], CPU, op.fit(frame, CPU))["c"].to_numpy()
    np.testing.assert_array_equal(part, whole[120:130])
    assert set(whole) <= set(range(1, 51)) and len(set(whole)) > 30


# ---------------------------------------------------------------- clip and quantile_bin
def test_clip_winsorises_at_training_quantiles():
    values = np.arange(101, dtype="float64")
    wf = FeatureWorkflow([Clip(columns=["x"], lower=0.1, upper=0.9)])
    wf.fit(pd.DataFrame({"x": values}))
    assert wf.op_states_[0].bounds == {"x": (10.0, 90.0)}
    out = wf.transform(pd.DataFrame({"x": [-5.0, 50.0, 1000.0]}))
    np.testing.assert_allclose(out["x"], [10.0, 50.0, 90.0])
    with pytest.raises(ValidationError, match="below upper"):
        Clip(columns=["x"], lower=0.9, upper=0.1)
    with pytest.raises(DataError, match="clip: column 'c' is"):
        FeatureWorkflow([Clip(columns=["c"])]).fit(pd.DataFrame({"c": ["a", "b"]}))


def test_quantile_bin_codes_bins_and_dedups_edges():
    wf = FeatureWorkflow([QuantileBin(columns=["x", "flat"], bins=4)])
    frame = pd.DataFrame({"x": np.arange(1.0, 101.0), "flat": [0.0] * 90 + list(range(1, 11))})
    wf.fit(frame)
    edges = wf.op_states_[0].edges
    assert len(edges["x"]) == 3 and edges["flat"] == [0.0]
    out = wf.transform(pd.DataFrame({"x": [1.0, 30.0, 60.0, 99.0, np.nan], "flat": [0.0, 5.0, -1.0, 0.0, 1.0]}))
    assert out["x"].tolist() == [1, 2, 3, 4, 0]
    assert out["flat"].tolist() == [2, 2, 1, 2, 2]
    assert wf.categorical_cardinalities() == {"x": 5, "flat": 3}
    assert np.bincount(wf.transform(frame)["x"]).tolist() == [0, 25, 25, 25, 25]


# ---------------------------------------------------------------- rare levels
def test_group_rare_pools_rare_levels_as_text():
    frame = pd.DataFrame({"c": ["a"] * 10 + ["b"] * 5 + ["c", "d", None]})
    wf = FeatureWorkflow([GroupRare(columns=["c"], min_frequency=2), OneHot(columns=["c"])])
    wf.fit(frame)
    assert wf.op_states_[0].kept == {"c": ["a", "b"]}
    assert wf.output_columns_ == ["c=__rare__", "c=a", "c=b"]
    op = GroupRare(columns=["c"], min_frequency=0.3)             # a share: at least 0.3 * 18 rows
    out = op.transform(pd.DataFrame({"c": ["a", "b", "zz", None]}), CPU, op.fit(frame, CPU))
    assert out["c"].tolist()[:3] == ["a", "__rare__", "__rare__"] and pd.isna(out["c"][3])
    with pytest.raises(DataError, match="group_rare: column 'n' is int64, not text"):
        GroupRare(columns=["n"]).fit(pd.DataFrame({"n": [1, 2]}), CPU)


def test_one_hot_and_categorify_share_the_rare_rule_with_a_share():
    frame = pd.DataFrame({"c": ["a"] * 50 + ["b"] * 45 + ["c"] * 4 + [None]})
    for op in (OneHot(columns=["c"], min_frequency=0.05), Categorify(columns=["c"], min_frequency=0.05),
               GroupRare(columns=["c"], min_frequency=0.05)):
        state = op.fit(frame, CPU)
        kept = getattr(state, "kept", None) or state.categories
        assert sorted(kept["c"]) == ["a", "b"], op.op          # 4 of 100 rows is under 5%
    assert OneHot(columns=["c"], min_frequency=4).fit(frame, CPU).categories["c"] == ["a", "b", "c"]
    assert OneHot(columns=["c"], min_frequency=5.0).min_frequency == 5


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan"), float("inf")])
def test_min_frequency_is_a_whole_count_or_a_share(bad):
    with pytest.raises(ValidationError, match="min_frequency"):
        Categorify(columns=["c"], min_frequency=bad)


def test_the_drift_reference_of_target_encoded_features_is_what_scoring_sees():
    """The training matrix holds out-of-fold values, which scoring never computes: the drift
    profile must be of the values scoring gives the training rows, or every scored row drifts."""
    from pipeline.metrics.drift import reference_profile

    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"c": rng.choice(list("abc"), size=300), "label": rng.integers(0, 2, 300).astype("int8")})
    data = SplitData(frames={"train": frame}, target="label", positive=1, backend=CPU)
    features = build_in_memory(data, [TargetEncode(columns=["c"])])
    scored = features.workflow.transform(frame.drop(columns=["label"])).to_numpy(dtype="float32")
    assert features.drift_reference() == reference_profile(scored, features.feature_names)
    assert features.drift_reference() != reference_profile(features.X["train"], features.feature_names)


def test_fold_features_fit_target_encode_on_the_fold_rows_only():
    from pipeline.featuresets.folds import SCORED, FoldSource

    frame, y = ids_with_random_labels(60)
    frame["c"] = np.array(list("ab"))[np.arange(60) % 2]
    frame["label"] = y.astype("int8")
    positions = [(np.arange(0, 40), np.arange(40, 60))]
    data = SplitData(frames={"train": frame[["c", "label"]]}, target="label", positive=1, backend=CPU,
                     folds=positions)
    fold = FoldSource.of_split(data, [TargetEncode(columns=["c"], smoothing=0.0)], None).features(0)
    fit_rows = frame.iloc[:40]
    expected = fit_rows.groupby("c")["label"].mean()
    np.testing.assert_allclose(fold.X[SCORED][:, 0], frame["c"][40:].map(expected), rtol=1e-6)


def test_partitioned_features_refuse_target_encode():
    from pipeline.featuresets import build_partitioned

    frame, y = ids_with_random_labels(40)
    frame["label"] = y.astype("int8")
    parts = {"train": dd.from_pandas(frame, npartitions=2)}
    data = SplitData(frames=parts, target="label", positive=1, backend=CPU)
    with pytest.raises(ConfigError, match="target_encode"):
        build_partitioned(data, [TargetEncode(columns=["id"])], id_column=None, output_dir=None)


# ---------------------------------------------------------------- one result on every device
def parity_frame(rows: int, seed: int) -> pd.DataFrame:
    """Text with gaps and rare levels, integers with a gap (float64 on pandas, int64 on cuDF
    once read), and floats."""
    rng = np.random.default_rng(seed)
    cats = rng.choice(["a", "b", "c", "d", "e", "rare1", "rare2"], size=rows, p=[.3, .25, .2, .1, .13, .01, .01])
    frame = pd.DataFrame({"c": pd.Series(cats, dtype=object), "n": rng.integers(0, 40, size=rows).astype("float64"),
                          "x": rng.normal(size=rows)})
    frame.loc[::17, "c"] = None
    frame.loc[::23, "n"] = np.nan
    return frame


PARITY_OPS = [
    [GroupRare(columns=["c"], min_frequency=0.05), TargetEncode(columns=["c"], folds=3), Drop(columns=["n"])],
    [FrequencyEncode(columns=["c", "n"]), HashEncode(columns=["c", "n"], buckets=16)],
    [Clip(columns=["x"], lower=0.05, upper=0.95), QuantileBin(columns=["n"], bins=5), Drop(columns=["c"])],
    [OneHot(columns=["c"], min_frequency=0.05), Categorify(columns=["n"], min_frequency=0.02)],
]


@pytest.mark.parametrize("ops", PARITY_OPS, ids=lambda ops: "+".join(op.op for op in ops))
def test_the_encodings_give_the_same_values_on_every_device(backend, ops):
    train, test = parity_frame(400, 0), parity_frame(100, 1)
    y = np.random.default_rng(2).integers(0, 2, size=400)

    def fitted(device):
        wf = FeatureWorkflow(ops, backend=device)
        trained = device.to_host(wf.fit_transform(device.from_pandas(train), y))
        return wf, trained, device.to_host(wf.transform(device.from_pandas(test)))

    cpu_wf, cpu_train, cpu_test = fitted(CPU)
    wf, trained, scored = fitted(backend)
    assert wf.output_columns_ == cpu_wf.output_columns_
    assert wf.categorical_cardinalities() == cpu_wf.categorical_cardinalities()
    pd.testing.assert_frame_equal(trained, cpu_train, check_dtype=False, rtol=1e-9)
    pd.testing.assert_frame_equal(scored, cpu_test, check_dtype=False, rtol=1e-9)


def test_check_op_fits_an_op_that_learns_from_the_label_and_checks_its_training_transform():
    from typing import ClassVar

    from pipeline.features import OPS, register_op
    from pipeline.testing import check_op

    class ForgetsAColumn(TargetEncode):
        op: ClassVar[str] = "forgets_a_column"

        def transform_training(self, frame, backend, state, target):
            return super().transform_training(frame, backend, state, target).drop(columns=["num"])

    saved = dict(OPS)
    try:
        register_op(ForgetsAColumn)
        with pytest.raises(AssertionError, match="'fit'.*transform_training outputs columns"):
            check_op(ForgetsAColumn)
    finally:
        OPS.clear()
        OPS.update(saved)


# ---------------------------------------------------------------- one_hot on few rows and many
@pytest.mark.parametrize("text", ["str", "object"])
def test_one_hot_gives_the_same_columns_for_a_few_rows_as_for_many(text):
    """one_hot encodes a few rows (a served request) from each row's code and many rows by a
    comparison per category: the rows of a large frame must come out the same whichever path
    encoded them, missing, unseen and rare values included."""
    from pipeline.features.ops.op_support import THREADED_ROWS

    rng = np.random.default_rng(3)
    rows = THREADED_ROWS + 500
    levels = np.array(["a", "b", "c", "rare1", "rare2", None], dtype=object)
    values = levels[rng.choice(len(levels), size=rows, p=[0.4, 0.3, 0.28, 0.0005, 0.0005, 0.019])]
    numbers = rng.choice([1, 2, 3], size=rows)
    train = pd.DataFrame({"cat": pd.array(values, dtype=text), "n": numbers, "flag": numbers > 1})
    wf = FeatureWorkflow([OneHot(columns=["cat", "n", "flag"], min_frequency=100, drop_binary=True)])
    wf.fit(train)
    new = train.copy()
    new.loc[:9, "cat"] = "never-seen"                          # unseen: in the rare column (there is one)
    many = wf.transform(new)
    for start in (0, 7, rows - 40):
        few = wf.transform(new.iloc[start:start + 40].reset_index(drop=True))
        pd.testing.assert_frame_equal(few, many.iloc[start:start + 40].reset_index(drop=True))
    assert many.loc[:9, ["cat=a", "cat=b", "cat=c"]].eq(0).all().all() and many.loc[:9, "cat=__rare__"].eq(1).all()
    missing = new["cat"].isna().to_numpy()
    assert missing.any() and many.loc[missing, ["cat=a", "cat=b", "cat=c", "cat=__rare__"]].eq(0).all().all()
