"""Planning, with no effects: a matrix and its resolved kernels expanded into cells (cells.py),
their labels (labels.py), the one codec of a cell (codec.py), and the split into CI jobs and
shards (jobs.py)."""
