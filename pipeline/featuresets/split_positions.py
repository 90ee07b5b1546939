"""Row positions of a group split and of an out-of-time split, drawn on the host.

Kept apart from the stage so the rules are plain functions of host columns (pandas Series):
the same rows on CPU and GPU, and easy to test on their own.

- By group: the groups are shuffled with the seed and dealt to test, then valid, each until
  it holds its share of the rows; the rest train. No group is in two splits; a split can hold
  up to one group more than its share.
- By time: rows sorted by time (stable), the newest share is test, the next valid, the
  oldest train. Rows of one time never straddle a cut: a cut moves to the start of its time.
- By both: each group takes the time of its newest row, and the groups are dealt newest
  first.
- The latest times (``test_latest: n``): test is every row of the ``n`` latest distinct times
  (with groups: every group whose newest row is at one of them); ``valid`` is then a share of
  the rows left, dealt newest first as above.
- By group on partitioned data (``group_draws``): each group value gets a seeded draw in
  [0, 1) from its hash, and the draw picks the split; no pass over the whole table needed.
- Folds (``folds: k``, ``fold_positions``) over the non-test rows: random (stratified for a
  classification target), by group (stratified too where both apply), or forward-chaining by
  time (``forward_folds``). Every fold fits on rows it never scores.
- A random split (``shuffled_split``): scikit-learn's ``train_test_split``, row for row, drawn
  with whole-array operations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from pipeline.core.dtypes import dtype_kind
from pipeline.core.errors import DataError

# Why folds refuse partitioned data: the split stage says it, and so do the folds' features.
FOLDS_NEED_MEMORY = ("folds: cross-validation needs in-memory data (each fold refits the feature workflow on "
                     "its rows); read the table in memory (partitioned: false) or drop folds")

Positions = tuple[np.ndarray, np.ndarray, np.ndarray]


def ordered_positions(n_rows: int, *, test: float, valid: float, seed: int, groups: pd.Series | None = None,
                      times: pd.Series | None = None, test_latest: int | None = None) -> Positions:
    """(train, valid, test) row positions, each sorted; refuses a split that leaves train empty
    (one group or one time holding most rows), naming the column (the series' name). ``test_latest``:
    the rows of that many latest distinct ``times`` are test (``test`` is not used)."""
    positions = _positions(n_rows, test=test, valid=valid, seed=seed, groups=groups, times=times,
                           test_latest=test_latest)
    if n_rows and not len(positions[0]):
        column = f"group column '{groups.name}'" if groups is not None else f"order_by column '{_name(times)}'"
        what = "groups" if groups is not None else "times"
        raise DataError(f"{column}: no rows are left to train on (valid {len(positions[1])}, test "
                        f"{len(positions[2])} of {n_rows} rows): a split never cuts through one of its "
                        f"{what}, and one holds too many rows for these shares; lower "
                        f"{'test_latest' if test_latest else 'test'} / valid")
    return positions


def _name(column: pd.Series | None) -> str | None:
    """The column a series of groups or times came from (its name), for messages."""
    return None if column is None or column.name is None else str(column.name)


def _positions(n_rows: int, *, test: float, valid: float, seed: int, groups: pd.Series | None,
               times: pd.Series | None, test_latest: int | None = None) -> Positions:
    group_name, order_name = _name(groups), _name(times)
    wanted = (round(test * n_rows), round(valid * n_rows))
    if test_latest is not None:
        return _latest_positions(n_rows, test_latest, valid=valid, groups=groups, times=times,
                                 group_name=group_name, order_name=order_name)
    if groups is None:
        key = time_key(times, order_name)
        newest_first = np.argsort(-key, kind="stable")
        return _deal(newest_first, key[newest_first], wanted, n_rows)
    codes = group_codes(groups, group_name)
    n_groups = int(codes.max()) + 1 if len(codes) else 0
    needed = 1 + (wanted[0] > 0) + (wanted[1] > 0)
    if n_groups < needed:
        raise DataError(f"group column '{group_name}' has {n_groups} distinct value(s); a split into "
                        f"{needed} parts by group needs at least {needed}")
    if times is None:
        group_order = np.random.default_rng(seed).permutation(n_groups)
    else:
        newest = pd.Series(time_key(times, order_name)).groupby(codes).max().to_numpy()
        group_order = np.argsort(-newest, kind="stable")
    # Rows grouped (stable within a group), the groups in dealing order.
    rank = np.empty(n_groups, dtype=np.int64)
    rank[group_order] = np.arange(n_groups)
    ordered = np.argsort(rank[codes], kind="stable")
    return _deal(ordered, rank[codes][ordered], wanted, n_rows)


def _latest_positions(n_rows: int, n_latest: int, *, valid: float, groups: pd.Series | None,
                      times: pd.Series | None, group_name: str | None, order_name: str | None) -> Positions:
    """Test: the rows at the ``n_latest`` latest distinct times (by group: the groups whose
    newest row is at one of them); valid: ``valid`` of the rest, newest first; train the rest."""
    if times is None:
        raise ValueError("test_latest needs order_by: the column whose latest values are held out")
    key = time_key(times, order_name)                   # dense ranks 1..n_times
    n_times = int(key.max()) if len(key) else 0
    if n_latest >= n_times:
        raise DataError(f"test_latest: {n_latest} holds out every row: order_by column '{order_name}' has "
                        f"{n_times} distinct value(s), and training needs rows at an older one; lower test_latest")
    held = key > n_times - n_latest
    if groups is None:
        ordered = np.argsort(-key, kind="stable")
        same = key[ordered]
    else:
        codes = group_codes(groups, group_name)
        newest = pd.Series(key).groupby(codes).max().to_numpy()
        held = newest[codes] > n_times - n_latest
        rank = np.empty(len(newest), dtype=np.int64)
        rank[np.argsort(-newest, kind="stable")] = np.arange(len(newest))
        ordered = np.argsort(rank[codes], kind="stable")
        same = rank[codes][ordered]
    n_test = int(held.sum())
    return _deal(ordered, same, (n_test, round(valid * (n_rows - n_test))), n_rows)


def _deal(ordered: np.ndarray, same: np.ndarray, wanted: tuple[int, int], n_rows: int) -> Positions:
    """Cut ``ordered`` (newest or first-dealt first) into test, valid, train: each cut at or
    after its share, moved on to where ``same`` (the time, or the group) changes."""
    cuts = []
    start = 0
    for share in wanted:
        cut = min(start + share, n_rows)
        if share and cut < n_rows:
            while cut < n_rows and cut > start and same[cut] == same[cut - 1]:
                cut += 1
        cuts.append(cut)
        start = cut
    test_pos, valid_pos, train_pos = np.split(ordered, cuts)
    return np.sort(train_pos), np.sort(valid_pos), np.sort(test_pos)


def group_codes(groups: pd.Series, name: str | None) -> np.ndarray:
    """Integer code per row (first appearance order); a missing group is refused."""
    missing = int(groups.isna().sum())
    if missing:
        raise DataError(f"group column '{name}' has {missing} missing value(s); every row needs a group "
                        "(fill them, or drop those rows)")
    codes, _ = pd.factorize(groups, sort=False)
    return codes.astype(np.int64)


def time_key(times: pd.Series, name: str | None) -> np.ndarray:
    """A float key that sorts like the times: numbers and datetimes as they are, text parsed as
    dates. Missing or unparseable times are refused, naming the column."""
    missing = int(times.isna().sum())
    if missing:
        raise DataError(f"order_by column '{name}' has {missing} missing value(s); every row needs a time")
    if dtype_kind(times.dtype) not in ("integer", "float", "date"):
        try:
            times = pd.to_datetime(times.astype(str), format="mixed")
        except (ValueError, TypeError, OverflowError) as exc:
            example = next((v for v in times.astype(str) if _unparseable(v)), times.iloc[0])
            raise DataError(f"order_by column '{name}' holds text that is not a date (e.g. {example!r}); "
                            "give numbers, dates or date text such as 2024-01-31") from exc
    return times.rank(method="dense").to_numpy(dtype=float)


def _unparseable(value: str) -> bool:
    try:
        pd.to_datetime(value)
    except (ValueError, TypeError, OverflowError):
        return True
    return False


def group_draws(groups: pd.Series, seed: int, name: str | None) -> np.ndarray:
    """A number in [0, 1) per row, the same for every row of one group value under one seed
    (pandas' SipHash of the value as text, keyed by the seed), on any partition or machine."""
    missing = int(groups.isna().sum())
    if missing:
        raise DataError(f"group column '{name}' has {missing} missing value(s); every row needs a group "
                        "(fill them, or drop those rows)")
    hashed = pd.util.hash_pandas_object(groups.astype(str), index=False, hash_key=f"{seed:016x}")
    return (hashed.to_numpy() >> np.uint64(11)).astype(np.float64) / float(1 << 53)


# ---------------------------------------------------------------------------- random split
# Up to this many classes, each class's rows are found by one comparison pass; above, by one
# stable sort of the labels.
_CLASS_SCANS = 16


def shuffled_split(positions: np.ndarray, test_size: float, seed: int,
                   labels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) of ``positions``: exactly ``train_test_split(positions, test_size=test_size,
    random_state=seed, stratify=labels)`` of scikit-learn, the same rows in the same order.

    Its ``StratifiedShuffleSplit`` gathers the chosen rows in Python lists, one NumPy scalar per
    row, before shuffling them: 2.7 s of one core for 10M rows, most of the split stage on a GPU.
    The same draws from the same ``RandomState`` (the shares per class, each class's shuffle,
    then the train and the test shuffle), made on whole arrays, take a fifth of that; a test
    holds the two equal. Anything but a plain case (an int size, a class with one row, fewer
    rows than classes, labels that are not integers) goes to scikit-learn itself, which also
    raises its own ``ValueError`` where the split is impossible.
    """
    n_rows = len(positions)
    n_test = math.ceil(test_size * n_rows) if isinstance(test_size, float) and 0 < test_size < 1 else 0
    n_train = n_rows - n_test
    plain_seed = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
    if not (n_test and n_train and plain_seed):
        return _sklearn_split(positions, test_size, seed, labels)
    rng = np.random.RandomState(seed)
    if labels is None:                                   # ShuffleSplit
        order = rng.permutation(n_rows)
        return positions[order[n_test:n_test + n_train]], positions[order[:n_test]]
    classes = _class_rows(labels, n_rows)
    if classes is None:
        return _sklearn_split(positions, test_size, seed, labels)
    counts, rows = classes
    if counts.min() < 2 or n_train < len(counts) or n_test < len(counts):
        return _sklearn_split(positions, test_size, seed, labels)
    train_per_class = _approximate_mode(counts, n_train, rng)
    test_per_class = _approximate_mode(counts - train_per_class, n_test, rng)
    train, test = [], []
    for count, members, n_train_i, n_test_i in zip(counts, rows, train_per_class, test_per_class):
        shuffled = members.take(rng.permutation(count), mode="clip")
        train.append(shuffled[:n_train_i])
        test.append(shuffled[n_train_i:n_train_i + n_test_i])
    return positions[rng.permutation(np.concatenate(train))], positions[rng.permutation(np.concatenate(test))]


def _class_rows(labels: np.ndarray, n_rows: int) -> tuple[np.ndarray, list[np.ndarray]] | None:
    """Rows per class (int64, classes ascending) and each class's positions, ascending: what
    ``np.unique`` and a stable argsort give scikit-learn. None for labels other than one
    integer per row."""
    labels = np.asarray(labels)
    if labels.ndim != 1 or len(labels) != n_rows or labels.dtype.kind not in "iu" or not n_rows:
        return None
    low, high = int(labels.min()), int(labels.max())
    if high - low >= 1 << 20 or labels.dtype == np.uint64:   # sparse codes, or no safe cast for bincount
        values, counts = np.unique(labels, return_counts=True)
    else:
        per_value = np.bincount(labels.astype(np.int64) - low if low else labels, minlength=high - low + 1)
        present = np.flatnonzero(per_value)
        values, counts = present + low, per_value[present]
    counts = counts.astype(np.intp, copy=False)
    if len(values) <= _CLASS_SCANS:
        return counts, [np.flatnonzero(labels == value) for value in values]
    order = np.argsort(labels, kind="stable")
    return counts, np.split(order, np.cumsum(counts)[:-1])


def _approximate_mode(class_counts: np.ndarray, n_draws: int, rng: np.random.RandomState) -> np.ndarray:
    """Rows to draw per class: scikit-learn's ``_approximate_mode`` (the floor of each class's
    share, then one more for the largest remainders, ties broken with ``rng``), the same
    arithmetic and the same draws."""
    continuous = class_counts / class_counts.sum() * n_draws
    floored = np.floor(continuous)
    need_to_add = int(n_draws - floored.sum())
    if need_to_add > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (tied,) = np.where(remainder == value)
            add_now = min(len(tied), need_to_add)
            floored[rng.choice(tied, size=add_now, replace=False)] += 1
            need_to_add -= add_now
            if need_to_add == 0:
                break
    return floored.astype(int)


def _sklearn_split(positions: np.ndarray, test_size: Any, seed: Any,
                   labels: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split  # scikit-learn costs ~1 s to import

    train, test = train_test_split(positions, test_size=test_size, random_state=seed, stratify=labels)
    return train, test


# ---------------------------------------------------------------------------- folds
Folds = list[tuple[np.ndarray, np.ndarray]]


def fold_positions(n_rows: int, k: int, *, seed: int, labels: np.ndarray | None = None,
                   groups: pd.Series | None = None, times: pd.Series | None = None,
                   group_name: str | None = None, order_name: str | None = None) -> Folds:
    """``k`` folds over ``n_rows`` rows: per fold (positions fitted on, positions scored), each
    sorted. Seeded; stratified on ``labels`` when given; no group in two folds' scored rows (so
    never both fitted on and scored); with ``times``, forward-chaining (``forward_folds``).

    - random: scikit-learn's ``KFold`` / ``StratifiedKFold`` (shuffled with the seed);
    - by group: ``StratifiedGroupKFold`` with labels, else the groups shuffled with the seed and
      dealt largest first to the fold with the fewest rows (``GroupKFold``'s rule, seeded);
    - by time (and group): ``forward_folds``.
    Every row is scored in exactly one fold, except the oldest block of a time split."""
    if n_rows < k:
        raise DataError(f"folds: {k} needs at least {k} rows to cross-validate on; the non-test rows are {n_rows}")
    if times is not None:
        return forward_folds(n_rows, k, times=times, groups=groups, group_name=group_name, order_name=order_name)
    if groups is not None:
        codes = group_codes(groups, group_name)
        n_groups = int(codes.max()) + 1
        if n_groups < k:
            raise DataError(f"group column '{group_name}' has {n_groups} distinct value(s) in the non-test rows; "
                            f"folds: {k} by group needs at least {k}")
        if labels is None:
            scored = _deal_groups(codes, n_groups, k, seed)
            return [_complement(n_rows, np.flatnonzero(scored == fold)) for fold in range(k)]
        return _sklearn_folds("StratifiedGroupKFold", k, seed, n_rows, labels, codes)
    if labels is None:
        return _sklearn_folds("KFold", k, seed, n_rows, None, None)
    return _sklearn_folds("StratifiedKFold", k, seed, n_rows, labels, None)


def _sklearn_folds(name: str, k: int, seed: int, n_rows: int, labels: np.ndarray | None,
                   groups: np.ndarray | None) -> Folds:
    """scikit-learn's splitter ``name``, shuffled with the seed; its warning about a class with
    fewer rows than folds is replaced by ``check_fold_classes`` (which names the class)."""
    import warnings

    from sklearn import model_selection  # scikit-learn costs ~1 s to import

    splitter = getattr(model_selection, name)(n_splits=k, shuffle=True, random_state=seed)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*least populated class", category=UserWarning)
        try:
            pairs = list(splitter.split(np.zeros((n_rows, 1)), labels, groups))
        except ValueError as exc:         # e.g. every class has fewer rows than folds
            raise DataError(f"cannot cut {n_rows} non-test rows into {k} folds: {exc}") from exc
    return [(np.sort(fit), np.sort(score)) for fit, score in pairs]


def _deal_groups(codes: np.ndarray, n_groups: int, k: int, seed: int) -> np.ndarray:
    """The fold of each row: groups shuffled with the seed (so equal sizes go by the seed), then
    dealt largest first, each to the fold holding the fewest rows so far."""
    sizes = np.bincount(codes, minlength=n_groups)
    shuffled = np.random.default_rng(seed).permutation(n_groups)
    dealing = shuffled[np.argsort(-sizes[shuffled], kind="stable")]
    fold_of_group = np.empty(n_groups, dtype=np.int64)
    load = np.zeros(k, dtype=np.int64)
    for group in dealing:
        fold = int(np.argmin(load))
        fold_of_group[group] = fold
        load[fold] += sizes[group]
    return fold_of_group[codes]


def _complement(n_rows: int, scored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    fit = np.ones(n_rows, dtype=bool)
    fit[scored] = False
    return np.flatnonzero(fit), np.sort(scored)


def forward_folds(n_rows: int, k: int, *, times: pd.Series, groups: pd.Series | None = None,
                  group_name: str | None = None, order_name: str | None = None) -> Folds:
    """Forward-chaining folds (scikit-learn's ``TimeSeriesSplit``): the rows sorted oldest first
    are cut into ``k + 1`` blocks; fold ``i`` fits on blocks ``0..i-1`` and scores block ``i``,
    so a model never sees rows newer than those it is scored on, and the oldest block is never
    scored. As in the split, a cut never goes through one time (nor one group: with ``groups``,
    each group goes by its newest row and stays in one block)."""
    key = time_key(times, order_name)
    if groups is None:
        ordered = np.argsort(key, kind="stable")
        same = key[ordered]
    else:
        codes = group_codes(groups, group_name)
        newest = pd.Series(key).groupby(codes).max().to_numpy()
        rank = np.empty(len(newest), dtype=np.int64)
        rank[np.argsort(newest, kind="stable")] = np.arange(len(newest))
        ordered = np.argsort(rank[codes], kind="stable")
        same = rank[codes][ordered]
    blocks = np.split(ordered, _block_cuts(same, k + 1))
    if any(not len(block) for block in blocks):
        what = f"group column '{group_name}' and order_by column '{order_name}'" if groups is not None \
            else f"order_by column '{order_name}'"
        raise DataError(f"{what}: {n_rows} non-test rows cannot be cut into {k + 1} blocks of times for "
                        f"folds: {k} (a cut never goes through one time or group, and one holds too many "
                        f"rows; sizes {[len(b) for b in blocks]}); use fewer folds")
    return [(np.sort(np.concatenate(blocks[:i])), np.sort(blocks[i])) for i in range(1, k + 1)]


def _block_cuts(same: np.ndarray, n_blocks: int) -> list[int]:
    """Cuts of ``same`` (sorted) into ``n_blocks`` near-equal blocks, each cut moved on to where
    ``same`` changes; a block that would straddle is left empty for the caller to refuse."""
    n = len(same)
    cuts, start = [], 0
    for block in range(1, n_blocks):
        cut = max(round(block * n / n_blocks), start)
        while 0 < cut < n and same[cut] == same[cut - 1]:
            cut += 1
        cuts.append(cut)
        start = cut
    return cuts


def check_fold_classes(folds: Folds, labels: np.ndarray, *, target: str, names: Sequence[Any] | None = None) -> None:
    """Every fold must fit on rows of every class the non-test rows hold: a model fitted
    without a class cannot score it (and a binary model needs both). ``names`` maps a label code
    to the original value, for the message."""
    present = np.unique(labels)
    for number, (fit, _) in enumerate(folds, 1):
        missing = np.setdiff1d(present, np.unique(labels[fit]))
        if len(missing):
            counts = {_class_name(code, names): int((labels == code).sum()) for code in missing[:5]}
            raise DataError(f"fold {number} of {len(folds)} fits on no row of class(es) {list(counts)} of target "
                            f"column '{target}' (rows of each in the non-test rows: {counts}); use fewer folds, "
                            "stratify: true, or more rows of the rare class")


def classes_some_fold_scores_none_of(folds: Folds, labels: np.ndarray,
                                     names: Sequence[Any] | None = None) -> dict[Any, int]:
    """The classes that at least one fold scores no row of, with their rows in the non-test
    rows: that fold's ROC AUC (and any metric needing both classes) is undefined, and so is its
    mean over the folds."""
    present = np.unique(labels)
    short: dict[Any, int] = {}
    for _, scored in folds:
        for code in np.setdiff1d(present, np.unique(labels[scored])):
            short[_class_name(code, names)] = int((labels == code).sum())
    return short


def _class_name(code: np.generic, names: Sequence[Any] | None) -> Any:
    return names[int(code)] if names is not None else code.item()
