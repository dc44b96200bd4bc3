"""Money and amounts: integers of minor units in real ISO-4217 currencies, nothing else."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from idempay.domain.errors import InvalidRequest
from idempay.domain.money import ISO_4217, MAX_MINOR, Money, check_amount, check_currency, exponent

MAX = 100_000_000_000


@pytest.mark.parametrize("bad", [1.0, 199.5, True, False, "100", None, [100], 1e3])
def test_amount_rejects_anything_but_an_int(bad: object) -> None:
    with pytest.raises(InvalidRequest) as e:
        check_amount(bad, MAX)
    assert e.value.code == "INVALID_REQUEST"


@pytest.mark.parametrize("bad", [0, -1, -(2**63), MAX + 1, 2**63, 2**80])
def test_amount_rejects_zero_negative_and_above_the_maximum(bad: int) -> None:
    with pytest.raises(InvalidRequest):
        check_amount(bad, MAX)


def test_amount_accepts_one_to_the_maximum() -> None:
    assert check_amount(1, MAX) == 1
    assert check_amount(MAX, MAX) == MAX


def test_configured_maximum_is_capped_at_bigint() -> None:
    with pytest.raises(InvalidRequest):
        check_amount(MAX_MINOR + 1, 2**70)


@pytest.mark.parametrize("bad", ["cny", "XXX", "XTS", "ABC", "US", "USDD", "", 156, None, "RMB"])
def test_currency_rejects_unknown_and_lower_case_codes(bad: object) -> None:
    with pytest.raises(InvalidRequest):
        check_currency(bad)


def test_exponents_come_from_the_iso_table() -> None:
    assert (exponent("CNY"), exponent("JPY"), exponent("KWD"), exponent("UYW")) == (2, 0, 3, 4)
    assert len(ISO_4217) > 150


def test_money_formats_by_exponent() -> None:
    assert str(Money(19900, "CNY")) == "199.00 CNY"
    assert str(Money(500, "JPY")) == "500 JPY"
    assert str(Money(1005, "BHD")) == "1.005 BHD"


def test_money_refuses_floats_and_mixed_currencies() -> None:
    with pytest.raises(InvalidRequest):
        Money(1.5, "CNY")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot mix"):
        Money(1, "CNY") + Money(1, "USD")


@given(st.integers(min_value=0, max_value=MAX), st.integers(min_value=0, max_value=MAX))
def test_money_addition_is_integer_exact(a: int, b: int) -> None:
    assert (Money(a, "EUR") + Money(b, "EUR")).minor == a + b
    assert (Money(a + b, "EUR") - Money(b, "EUR")).minor == a
