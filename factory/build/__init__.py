"""Building cells: the options of a run (options.py), one cell of a kernel-builder repo into a
wheel (cell.py) with its records (records.py), the gates it passes (checks.py), the run of a
whole plan (run.py) through a runner that owns its resources (runners/: local, docker), and
rebuilding a wheel from its provenance (verify.py)."""
