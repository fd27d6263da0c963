"""Publishing an output folder: wheels to a PyPI-compatible registry (registry.py), or the
whole static index to a folder, S3 or the Hugging Face Hub (static.py)."""
