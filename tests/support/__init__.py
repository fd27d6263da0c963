"""What several test modules share: kernels and matrices written on the fly, small wheels and
indexes, the hostile-input table, and the fixtures of tools that are slow to start (a browser,
actionlint, a builder image), registered for every test by tests/conftest.py."""
