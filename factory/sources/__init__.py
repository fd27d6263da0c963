"""Kernel sources: untrusted repos from a folder, git or the Hugging Face Hub, fetched into
read-only trees in the cache (store.py), checked by the path-safety rules before anything in
them is read, and pinned by the lock file (resolve.py)."""
