"""Feedback from the provider after ``accepted``: delivery events (webhooks) and suppressions.

Pure parts: :mod:`feedback.signature` (the ``Mailbus-Signature`` header),
:mod:`feedback.events` (event bodies), :mod:`feedback.suppression_file` (CSV imports).
Adapters: :mod:`feedback.store` and :mod:`feedback.suppressions` (PostgreSQL),
:mod:`feedback.server` (the aiohttp receiver, ``mailbus webhooks``).
"""
