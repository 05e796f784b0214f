"""postmark."""
