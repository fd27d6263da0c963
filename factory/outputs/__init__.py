"""The output folder and the files in it: where everything lives (layout.py), and how a
file is hashed, replaced atomically and served (files.py)."""
