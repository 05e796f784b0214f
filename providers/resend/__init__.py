"""resend."""
