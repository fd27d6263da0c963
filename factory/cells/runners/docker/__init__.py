"""The docker runner: the engine driven through the docker CLI (engine.py), the builder images
(image.py), the runner itself (runner.py) and the factory's side inside a container
(inside.py)."""
