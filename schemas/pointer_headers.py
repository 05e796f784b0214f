"""A send pointer's Kafka header beside its Avro value (docs/reference/schemas.md).

``mailbus-first-attempt``, its value the row's template in UTF-8, says the row was never
claimed when the relay published it. A consumer then passes its gate on the pointer
alone (the template's mail policy picks the route while the provider is down) and loads
and claims the row in one statement (docs/design.md, "Claimed as it is loaded"). A header,
not a field of the pointer's schema: a consumer of an earlier build ignores it, so relays
and consumers upgrade in either order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from mailbus_client.send_request import is_template_name

__all__ = ["FIRST_ATTEMPT", "first_attempt_header", "first_attempt_template"]

FIRST_ATTEMPT = "mailbus-first-attempt"


def first_attempt_header(template: str) -> tuple[str, bytes]:
    """The header of a pointer to a never-claimed row of ``template``."""
    return FIRST_ATTEMPT, template.encode()


Header = bytes | str | None
Headers = Iterable[tuple[str, Header]] | Mapping[str, Header] | None


def first_attempt_template(headers: Headers) -> str | None:
    """The template a pointer's header names for a never-claimed row (the first header of
    that name, compared case-insensitively), or None: no such header, or one that names no
    template a send request may carry (not UTF-8, too long, other characters): the row is
    read first. The claim checks the name against the row's own."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    for name, value in pairs:
        if name.lower() != FIRST_ATTEMPT:
            continue
        if isinstance(value, bytes):
            try:
                value = value.decode()
            except UnicodeDecodeError:
                return None
        return value if value is not None and is_template_name(value) else None
    return None
