"""The ``pipeline`` command: the click group and its subcommands, option parsing, log output and
``pipeline doctor``. Nothing below this package prints to the terminal on its own.
"""
