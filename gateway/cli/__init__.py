"""`dex-gateway`'s commands (`main.py`)."""
