"""The enqueue helper's former import path, kept so services written against it keep
working; new code imports ``mailbus_client.enqueue`` (the slim client, psycopg only)."""

from mailbus_client.enqueue import EnqueueResult, PolicyBook, QueueCap, SendRequest, enqueue

__all__ = ["EnqueueResult", "PolicyBook", "QueueCap", "SendRequest", "enqueue"]
