"""What the factory asks of the machine it runs on, below every step: running tools
(process.py; enter_sandbox.py, the program bubblewrap is started through), its cache folder
(cache.py), uv (uv.py) and the container engine (engine.py)."""
