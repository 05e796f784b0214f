"""The campaign room's errors, under the one root :class:`mailbus.kernel.errors.MailbusError`.

    CampaignError        the campaigns' state refuses the command (a RefusedError: exit 3)
    └── CampaignInputError   a bad option, CSV header or audience query (a ConfigError: exit 2)
"""

from __future__ import annotations

from mailbus.kernel.errors import ConfigError, RefusedError

__all__ = ["CampaignError", "CampaignInputError"]


class CampaignError(RefusedError):
    """A campaign command that cannot be done as asked (no such campaign, a transition its
    state does not allow, a name taken, an import running elsewhere); nothing was changed."""


class CampaignInputError(CampaignError, ConfigError):
    """What the command was given is wrong: ``setting`` names the option (``--rate``) or
    the place (``line 1``), ``problem`` says what is wrong; nothing was changed."""

    def __init__(self, setting: str, problem: str) -> None:
        ConfigError.__init__(self, setting, problem)
