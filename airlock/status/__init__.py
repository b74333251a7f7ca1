"""The controller's view: every node's state, verdict and last check, and the
metrics (the node's textfile and the controller's registry)."""
