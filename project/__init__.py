"""The demo project: a small shop whose unshipped orders are checked by prescient."""
