"""GPU verification kit for air-gapped GPU hosts: wheels packed into transfer-sized parts,
an offline installer for them, and a probe suite that runs the project's GPU paths there.

``prepare`` (on a machine with a package index), ``unpack`` and ``probe`` (on the GPU host)
are the commands; README.md beside this file says how they fit together. ``parts``,
``install`` and ``unpack`` use the standard library only: they run before anything else
is installed on the host.
"""
