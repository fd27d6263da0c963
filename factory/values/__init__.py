"""Values as people write them and as the factory prints them: versions (versions.py), sizes
and durations (units.py)."""
