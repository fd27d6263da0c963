"""What the factory asks of the machine it runs on, below every step: running tools
(process.py), its cache folder (cache.py), uv (uv.py) and the container engine (engine.py)."""
