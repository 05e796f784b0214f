"""The ``headers`` variable (a campaign's List-Unsubscribe) travels as the send body's
top-level ``"headers"`` field; a header that could inject another is refused in
``prepare``, before any request."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from mailbus.consumer.provider import HttpProvider, OutgoingMail
from mailbus.kernel.errors import InvalidSendError

URL = "https://news.example.test/unsubscribe/abc.def"
HEADERS = {
    "List-Unsubscribe": f"<{URL}>",
    "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",
}


def send(variables: dict[str, Any]) -> list[httpx.Request]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"id": "msg_1"})

    async def main() -> None:
        provider = HttpProvider(
            "https://mail.example.test", "key", 1.0, 5.0, 1, transport=httpx.MockTransport(handler)
        )
        try:
            await provider.send(
                OutgoingMail("campaign-1-user-u1", "ana@example.com", "news", variables)
            )
        finally:
            await provider.aclose()

    asyncio.run(main())
    return seen


def test_headers_variable_is_a_top_level_body_field() -> None:
    variables = {"first_name": "Ana", "unsubscribe_url": URL, "headers": HEADERS}
    (request,) = send(variables)
    assert json.loads(request.content) == {
        "to": "ana@example.com",
        "template": "news",
        "variables": variables,
        "headers": HEADERS,
    }


def test_no_headers_variable_no_headers_field() -> None:
    (request,) = send({"n": 1})
    assert "headers" not in json.loads(request.content)


@pytest.mark.parametrize(
    "headers",
    [
        {"List-Unsubscribe": "<https://x.test/u>\r\nBcc: all@example.com"},
        {"List-Unsubscribe": "<https://x.test/u>\nX: y"},
        {"List-Unsubscribe": "a\rb"},
        {"List-Unsubscribe": "a\0b"},
        {"Bad Name": "v"},
        {"Bad:Name": "v"},
        {"": "v"},
        {"List-Unsubscribe": 7},
        ["List-Unsubscribe: <https://x.test/u>"],
        "List-Unsubscribe: <https://x.test/u>",
    ],
)
def test_invalid_headers_are_refused_before_any_request(headers: Any) -> None:
    with pytest.raises(InvalidSendError) as refused:
        send({"headers": headers})
    assert refused.value.field == "payload_json"
