"""The config: its loader and its validated sections."""
