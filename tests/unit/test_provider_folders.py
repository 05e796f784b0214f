"""One provider, one folder (docs/guides/adding-a-provider.md): every folder under
providers/ is found by the registry and has every piece a provider needs, so a folder
missing one fails here, not in production."""

from __future__ import annotations

from pathlib import Path

import pytest

import mailbus.providers
from mailbus.consumer.provider import Endpoint
from mailbus.consumer.runner import _process_provider
from mailbus.feedback.events import NAMED_PROVIDERS
from mailbus.kernel.settings import load_settings
from mailbus.providers.registry import named, senders
from mailbus.providers.room import NamedProvider
from mailbus.sandbox.imitations import imitations

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(
    path.name
    for path in Path(mailbus.providers.__path__[0]).iterdir()
    if path.is_dir() and path.name not in ("__pycache__", "sandbox")  # sandbox: their kit
)
# what MAILBUS_PROVIDER=<name> needs besides its name, for any provider
ENV = {
    "MAILBUS_MAIL_FROM": "shop@example.com",
    "MAILBUS_MAILGUN_DOMAIN": "mg.example.com",
    "MAILBUS_SMTP_URL": "smtp://127.0.0.1:2525",
    "MAILBUS_SMTP_FROM": "shop@example.com",
    "MAILBUS_SES_REGION": "eu-west-1",
}


def test_every_folder_is_a_provider_the_registry_finds() -> None:
    assert FOLDERS, "no provider folders found"
    assert sorted(named()) == FOLDERS


@pytest.mark.parametrize("name", FOLDERS)
def test_a_provider_folder_has_every_piece(name: str) -> None:
    entry = named()[name]
    assert isinstance(entry, NamedProvider)
    assert (entry.folder / "sending.py").is_file(), f"providers/{name}/sending.py"
    assert entry.capability.source, f"{name}: the capability names the documentation it is from"
    assert (entry.dialect is None) != (entry.sender is None), f"{name}: a dialect or a sender"
    conformance = ROOT / entry.conformance
    assert conformance.is_file(), f"{name}: its conformance run {entry.conformance}"
    if entry.sender is not None:  # run by a suite of its own, which must use it
        assert f"mailbus.providers.{name}" in conformance.read_text(), entry.conformance
    else:  # run by the conformance suite against the sandbox, which must imitate it
        assert imitations()[name].sends, f"{name}: its imitation, providers/{name}/sandbox/"
    if entry.receiver is not None:
        for piece in ("events.py", "webhook.py"):
            assert (entry.folder / piece).is_file(), f"providers/{name}/{piece}"


@pytest.mark.parametrize("name", FOLDERS)
def test_a_provider_is_chosen_by_its_folders_name(name: str) -> None:
    settings = load_settings({**ENV, "MAILBUS_PROVIDER": name})
    assert settings.provider == name
    endpoint = Endpoint(settings.provider_url, settings.provider_api_key)
    provider = named()[name].provider(settings, endpoint)
    assert provider.capability == named()[name].capability


@pytest.mark.parametrize(
    ("name", "url"),
    [
        ("smtp", "smtp://127.0.0.1:2525"),
        ("ses", "ses:eu-west-1"),
        ("postmark", "https://api.postmarkapp.com"),
        ("mailgun", "https://api.mailgun.net"),
    ],
)
def test_the_consumer_reports_where_a_named_provider_is_reached(name: str, url: str) -> None:
    settings = load_settings({**ENV, "MAILBUS_PROVIDER": name})
    own, _provider, reported = _process_provider(settings, ["p1"], senders())
    assert (own, reported) == (None, url)


def test_every_provider_with_webhooks_is_named_where_events_are_matched() -> None:
    """feedback/events.py's NAMED_PROVIDERS decides which sends an event may settle: a
    provider folder with a receiver left out of it would have its events match any send of
    the default provider (docs/guides/adding-a-provider.md)."""
    with_webhooks = {name for name, provider in named().items() if provider.receiver}
    assert with_webhooks == set(NAMED_PROVIDERS)
