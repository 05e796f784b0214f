"""What a domain service needs to enqueue mail, and nothing else (psycopg is the only
dependency; no Kafka, HTTP server or metrics stack).

    from mailbus_client.enqueue import SendRequest, enqueue

Modules: ``enqueue`` (the helper), ``send_request`` (what a valid request is),
``policies`` (default expiry per template, the queue cap), ``errors`` (the exception
root), ``sqlfiles`` (named queries from ``.sql`` files).
"""
