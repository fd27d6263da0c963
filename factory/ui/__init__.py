"""What people see: a build's progress and summary (progress.py), a wheel's report
(inspect.py). Kept out of the steps that do the work."""
