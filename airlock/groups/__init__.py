"""Multi-node checks: registration batches, the culprit search, topology."""
