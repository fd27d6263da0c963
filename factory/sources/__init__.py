"""Kernel sources: untrusted repos from a folder, git or the Hugging Face Hub, each kind fetched
by its own fetcher into read-only trees in the cache (resolve.py, store.py), checked by the
path-safety rules before anything in them is read, pinned by the lock file, and read once for
what planning needs of them (facts.py, symbols.py)."""
