"""Checks that extensions keep the package's contracts, for the package's tests and plugins' own."""

from pipeline.testing.ops import check_op

__all__ = ["check_op"]
