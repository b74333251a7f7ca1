"""`python -m airlock.ondemand node-worker|group-worker ...`: what srun starts on each node.

The module path is part of the srun command line (airlock.ondemand.launch), so it stays
importable as it was when airlock/ondemand.py was one module: during a rolling upgrade an old
controller sruns this path on a new node, and a new controller sruns it on an old one. Only for
that reason this file exists; the worker itself is airlock.ondemand.worker."""

import sys

from airlock.ondemand.worker import main

if __name__ == "__main__":
    sys.exit(main())
