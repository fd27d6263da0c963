"""Wheels as files: writing one byte for byte reproducibly (assemble.py), repairing it with
auditwheel (repair.py), reading it once into the facts every later step uses (inspect.py, with
elf.py, fatbin.py and manylinux.py for its shared objects), and the gates it must pass
(gates.py, expect.py)."""
