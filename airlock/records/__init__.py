"""What Airlock writes and reads back: runs, the proof of a boot, incidents, the run table."""
