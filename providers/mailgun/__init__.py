"""mailgun."""
