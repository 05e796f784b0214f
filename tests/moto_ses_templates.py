"""moto's server with SES v2 templated sends: ``python tests/moto_ses_templates.py -H host
-p port`` (moto.server's own arguments).

moto answers ``SendEmail`` with ``Content.Template`` by ``NotImplementedError`` (5.2, and
its main branch as of 2026-08), a 500. This adds that one form and nothing else: it is
handed to moto's own templated send (its SES v1 backend, the one its v2 ``Simple`` sends use
too), which checks the sender is verified and the template exists (created through the real
SDK with ``create_template``) and records a ``TemplateMessage`` (``/moto-api/data.json``).
The request is still the real SDK's, validated against its service model.
"""

from __future__ import annotations

import json
from typing import Any

from moto.server import main
from moto.sesv2.responses import SESV2Response

_simple_send = SESV2Response.send_email


def _send_email(self: Any) -> str:
    params = json.loads(self.body)
    template = (params.get("Content") or {}).get("Template")
    if template is None:
        return _simple_send(self)
    message = self.sesv2_backend.core_backend.send_templated_email(
        source=params.get("FromEmailAddress"),
        template=template["TemplateName"],
        template_data=template["TemplateData"],
        destinations=params.get("Destination", {}),
    )
    return json.dumps({"MessageId": message.id})


SESV2Response.send_email = _send_email  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
