"""The key the provider sees (mailbus/kernel/provider_key.py, docs/providers.md): the
dedupe key, its life after retention, the deployment's prefix; never two pairs on one key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailbus.kernel.errors import ConfigError
from mailbus.kernel.provider_key import (
    parse_provider_key,
    prefix_problem,
    provider_key,
    row_provider_key,
)
from mailbus.kernel.settings import load_settings


@pytest.mark.parametrize(
    ("prefix", "dedupe_key", "life", "key"),
    [
        ("", "order-7", 1, "order-7"),  # the contract: the key sent is the dedupe key
        ("", "order-7", 2, "order-7~2"),
        ("", "order-7", 11, "order-7~11"),
        ("staging:", "order-7", 1, "staging:order-7"),
        ("staging:", "order-7", 3, "staging:order-7~3"),
        ("", "order~2", 1, "order~2~1"),  # else it would be order's second life
        ("", "order~", 1, "order~"),  # no digits: nothing to confuse
        ("", "order~2x", 1, "order~2x"),
    ],
)
def test_the_key_of_each_life(prefix: str, dedupe_key: str, life: int, key: str) -> None:
    assert provider_key(prefix, dedupe_key, life) == key
    assert parse_provider_key(prefix, key) == (dedupe_key, life)


def test_a_life_counts_from_one() -> None:
    with pytest.raises(ValueError):
        provider_key("", "k", 0)


@pytest.mark.parametrize(
    ("prefix", "key"),
    [
        ("prod:", "staging:order-7"),  # another deployment's key
        ("", "order-7~1"),  # provider_key("order-7", 1) is "order-7"
        ("", "order-7~02"),  # no life is written with a leading zero
        ("", "order-7~0"),
        ("", "~2"),
        ("", ""),
        ("prod:", "prod:"),
    ],
)
def test_keys_that_are_no_pair_of_ours(prefix: str, key: str) -> None:
    assert parse_provider_key(prefix, key) is None


_KEYS = st.text(alphabet="ab~12-:", min_size=1, max_size=8)


@given(_KEYS, st.integers(1, 30), _KEYS, st.integers(1, 30))
def test_no_two_pairs_share_a_key(a: str, life_a: int, b: str, life_b: int) -> None:
    if (a, life_a) != (b, life_b):
        assert provider_key("p:", a, life_a) != provider_key("p:", b, life_b)
    assert parse_provider_key("p:", provider_key("p:", a, life_a)) == (a, life_a)


def test_a_row_keeps_the_key_its_first_claim_recorded() -> None:
    # recorded: kept whatever the prefix and life say now
    assert row_provider_key("new:", "k", 2, "old:k", 3) == "old:k"
    # tried before the column existed (or by an older build): it went out bare
    assert row_provider_key("new:", "k", 1, None, 1) == "k"
    # never tried: today's prefix and its life
    assert row_provider_key("new:", "k", 2, None, 0) == "new:k~2"


@pytest.mark.parametrize("prefix", ["staging:", "prod-eu.1_", "a" * 32])
def test_prefixes_every_provider_carries(prefix: str) -> None:
    assert prefix_problem(prefix) is None
    settings = load_settings({"MAILBUS_PROVIDER_KEY_PREFIX": prefix})
    assert settings.provider_key_prefix == prefix


@pytest.mark.parametrize("prefix", ["a" * 33, "stg~", "stg/", "stg key", "ключ:"])
def test_prefixes_refused_at_start(prefix: str) -> None:
    assert prefix_problem(prefix) is not None
    with pytest.raises(ConfigError, match="MAILBUS_PROVIDER_KEY_PREFIX"):
        load_settings({"MAILBUS_PROVIDER_KEY_PREFIX": prefix})


def test_no_prefix_by_default() -> None:
    assert load_settings({}).provider_key_prefix == ""
