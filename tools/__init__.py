"""Offline maintainer tools (task generators and the like): run from a source checkout, never shipped in the wheel."""
