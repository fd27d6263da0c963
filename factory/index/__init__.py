"""The package index of an output folder: file records and the manifest (records.py), the PEP
503/691 pages (pages.py) and the browse page's data (browse.py), written atomically
(update.py), merged from several folders or published URLs (merge.py, remote.py), and served
(serve.py)."""
