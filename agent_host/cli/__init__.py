"""`dex-agent`: the command line (`main.py`) and one module per command group."""
