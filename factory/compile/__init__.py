"""What a cell compiles and how: compiler and linker command lines (commands.py), the files
generated into every build (generated.py) and the headers each dependency brings (deps.py)."""
