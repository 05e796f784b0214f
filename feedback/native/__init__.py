"""Providers' own delivery events: each verified that provider's way and parsed into the
one internal :class:`mailbus.feedback.events.DeliveryEvent`.

Pure parts, one module per provider: ``sns`` (Amazon SES through SNS),
``sendgrid_events``, ``mailgun_events``, ``postmark_events`` and ``resend_events``; each has
a ``verify`` that returns a :class:`mailbus.feedback.signature.Verdict` and a ``parse`` that
returns an :class:`~mailbus.feedback.native.inbound.Inbound`. Adapters: ``certificates``
(fetching SNS signing certificates and confirming subscriptions) and ``routes`` (the aiohttp
routes ``POST /webhooks/{ses,sendgrid,...}``).
"""
