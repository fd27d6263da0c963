"""Planning, with no effects and nothing read: a matrix and its resolved kernels (with what
was read of their files, sources/facts.py) expanded into cells (cells.py), their labels
(labels.py), where each is built (placement.py), the one codec of a cell (codec.py), and the
split into CI jobs and shards (jobs.py)."""
