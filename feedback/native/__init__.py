"""Providers' own delivery events (issue 20, item 4): each verified that provider's way
and parsed into the one internal :class:`feedback.events.DeliveryEvent`.

Pure parts, one module per provider: :mod:`~feedback.native.sns` (Amazon SES through SNS),
:mod:`~feedback.native.sendgrid_events`, :mod:`~feedback.native.mailgun_events`,
:mod:`~feedback.native.postmark_events`, :mod:`~feedback.native.resend_events`; each has a
``verify`` that returns a :class:`feedback.signature.Verdict` and a ``parse`` that returns
an :class:`~feedback.native.inbound.Inbound`. Adapters: :mod:`~feedback.native.certificates`
(fetching SNS signing certificates and confirming subscriptions) and
:mod:`~feedback.native.routes` (the aiohttp routes ``POST /webhooks/{ses,sendgrid,...}``).
"""
