"""The seeds a config may give (the run's, a tuner's, an op's): what NumPy's and
scikit-learn's generators take, 0 to 2**32 - 1, refused at their key otherwise (a seed of -1
was taken by the config and failed mid-run as "Seed must be between 0 and 2**32 - 1")."""

from __future__ import annotations

__all__ = ["SEED_LIMIT"]

SEED_LIMIT = 2**32
