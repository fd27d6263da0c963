"""Proving a wheel by running it: the import gate (load.py, with probe.py run by the cell's
torch) and the kernel's own tests against the wheel (tests.py)."""
