"""`mailbus console`: the operator's web console (docs/guides/console.md).

aiohttp and server-rendered HTML over the rooms' own queries: a mail's story
(:mod:`mailbus.consumer.send_admin`), dead letters (:mod:`mailbus.consumer.dead_letter_admin`),
campaigns (:mod:`mailbus.campaigns.store`, :mod:`mailbus.campaigns.views`) and suppressions
(:mod:`mailbus.feedback.suppressions`). Access, sessions and CSRF are in
:mod:`mailbus.console.access`; the audit table in :mod:`mailbus.console.audit`.
"""
