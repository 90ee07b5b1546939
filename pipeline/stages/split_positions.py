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
- By group on partitioned data (``group_draws``): each group value gets a seeded draw in
  [0, 1) from its hash, and the draw picks the split; no pass over the whole table needed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.errors import DataError

Positions = tuple[np.ndarray, np.ndarray, np.ndarray]


def ordered_positions(n_rows: int, *, test: float, valid: float, seed: int,
                      groups: pd.Series | None = None, times: pd.Series | None = None,
                      group_name: str | None = None, order_name: str | None = None) -> Positions:
    """(train, valid, test) row positions, each sorted; refuses a split that leaves train empty
    (one group or one time holding most rows), naming the column."""
    positions = _positions(n_rows, test=test, valid=valid, seed=seed, groups=groups, times=times,
                           group_name=group_name, order_name=order_name)
    if n_rows and not len(positions[0]):
        column = f"group column '{group_name}'" if groups is not None else f"order_by column '{order_name}'"
        what = "groups" if groups is not None else "times"
        raise DataError(f"{column}: no rows are left to train on (valid {len(positions[1])}, test "
                        f"{len(positions[2])} of {n_rows} rows): a split never cuts through one of its "
                        f"{what}, and one holds too many rows for these shares; lower test / valid")
    return positions


def _positions(n_rows: int, *, test: float, valid: float, seed: int, groups: pd.Series | None,
               times: pd.Series | None, group_name: str | None, order_name: str | None) -> Positions:
    wanted = (round(test * n_rows), round(valid * n_rows))
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
    if pd.api.types.is_bool_dtype(times) or not (pd.api.types.is_numeric_dtype(times)
                                                  or pd.api.types.is_datetime64_any_dtype(times)):
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
