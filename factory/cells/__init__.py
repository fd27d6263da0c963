"""The cell builders. The kit every builder is handed (job.py: the job, what building gave,
the toolchain, torch and staged source of a cell); one package per kind of project behind one
protocol (kinds/: kernel-builder, noarch, pep517, cutile), whose builder builders.py calls; a
wheel's records
(records.py), the gates' verdict (checks.py), the options of a run (options.py), the run of a
whole plan (run.py) through a runner that owns its resources (runners/: local, docker), and
rebuilding a wheel from its provenance (verify.py)."""
