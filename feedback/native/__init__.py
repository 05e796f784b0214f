"""Providers' own delivery events, each verified that provider's way and parsed into the
one internal :class:`mailbus.feedback.events.DeliveryEvent`.

What every provider's receiver shares: ``inbound`` (the value one verified request
brings, and the JSON reading every receiver uses) and ``routes`` (the aiohttp routes
``POST /webhooks/<provider>`` over each :class:`~mailbus.feedback.native.routes.NativeReceiver`).
The receivers themselves live in their provider's folder (``providers/<name>/events.py``
and ``webhook.py``), handed to :func:`mailbus.feedback.server.run_webhooks` by the app.
"""
