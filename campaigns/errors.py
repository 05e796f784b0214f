"""The campaign room's error, under the one root :class:`mailbus.kernel.errors.MailbusError`."""

from __future__ import annotations

from mailbus.kernel.errors import MailbusError

__all__ = ["CampaignError"]


class CampaignError(MailbusError):
    """A campaign command that cannot be done as asked (bad option, bad CSV header, a
    transition the campaign's state does not allow); nothing was changed."""
