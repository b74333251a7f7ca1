"""Install and diagnose: doctor and the rendered install files."""
