"""sendgrid."""
