"""smtp."""
