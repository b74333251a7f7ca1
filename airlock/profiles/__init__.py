"""SKU profiles and the XID policy, shipped as TOML data (read by airlock.sku and
airlock.checks.xid)."""

import os

# Read by path rather than through importlib.resources: that import (zipfile and all) costs the
# periodic hook more than the files it reads.
PROFILE_DIR = os.path.dirname(os.path.abspath(__file__))
