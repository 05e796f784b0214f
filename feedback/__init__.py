"""Feedback from the provider after ``accepted``: delivery events (webhooks) and suppressions.

Pure parts: :mod:`mailbus.feedback.signature` (the ``Mailbus-Signature`` header),
:mod:`mailbus.feedback.events` (event bodies),
:mod:`mailbus.feedback.suppression_file` (CSV imports).
Adapters: :mod:`mailbus.feedback.store` and :mod:`mailbus.feedback.suppressions` (PostgreSQL),
:mod:`mailbus.feedback.server` (the aiohttp receiver, ``mailbus webhooks``).
"""
