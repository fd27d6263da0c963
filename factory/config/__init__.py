"""Reading the user's files into frozen values, every error naming file, line and key:
matrix.yaml (matrix/, a reader per section; model.py), a kernel repo's build.toml in its five
dialects (buildtoml.py, spec.py), the lock file (lockfile.py), through the positioned-node
loader (nodes.py)."""
