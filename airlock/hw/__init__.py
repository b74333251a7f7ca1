"""The node's hardware: boot identity, NVML, SKU profiles, fault switches."""
