"""The vocabulary every layer shares: the error family and exit codes, the stop flags of a run,
the problem type (binary, multiclass, regression), sizes and durations, the stage graph, the YAML
reader that keeps line numbers, and content fingerprints. Imports nothing else of the package.
"""
