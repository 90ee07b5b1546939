"""The package's version, in a module of its own so that every layer can name it without
importing the package's lazy top level (an arrow back up through ``pipeline/__init__``)."""

__version__ = "0.1.0"
