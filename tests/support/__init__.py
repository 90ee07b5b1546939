"""Helpers the test packages share (not fixtures: those live in the conftest.py of each level)."""
