"""The Python API's arguments, checked where they enter: analyze() and Analysis's methods,
flops_grid, accounting.planning.plan, the DataFrame functions (accounting/frames.py).

A notebook user's typo must not turn into a wrong number or an AttributeError deep inside
(issue 23: matmul_flops('Executed') gave the useful count, matmul_flops(phase='bogus') 0,
flops_grid(component='attention_core') [[0]], analyze('gpt2-small') an AttributeError). So
a value of the wrong type is a TypeError, a value outside the accepted ones a UsageError (a
ValueError), each naming the argument and what it accepts. A preset name where a config is
expected is looked up (accounting.PRESETS), as the CLI does.
"""
from __future__ import annotations

from collections.abc import Iterable

from accounting.ledger import records as R
from accounting.runtime.errors import UsageError, shorten
from accounting.architecture.config import ModelConfig

COUNTINGS = (R.EXECUTED, R.USEFUL)


def config(value, name: str = "config") -> ModelConfig:
    """A ModelConfig, or the preset a name names (an unknown name: the closest presets)."""
    if isinstance(value, ModelConfig):
        return value
    if isinstance(value, str):
        from accounting.architecture.presets import get_preset
        return get_preset(value)
    raise TypeError(f"{name} must be a ModelConfig or a preset name (a key of "
                    f"accounting.PRESETS, e.g. 'gpt2-small'), got {_what(value)}")


def configs(value, name: str = "configs") -> list[ModelConfig]:
    """One config or preset name, or an iterable of them (a single name is not iterated
    character by character)."""
    if isinstance(value, (str, ModelConfig)):
        return [config(value, name)]
    if not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a ModelConfig, a preset name or an iterable of them, "
                        f"got {_what(value)}")
    return [config(v, f"each of {name}") for v in value]


def choice(value, name: str, choices: Iterable[str], none_means: str | None = None):
    """value if it is one of choices (None too, when none_means says what None means)."""
    choices = tuple(choices)
    accepted = ", ".join(repr(c) for c in choices) + (f" or None ({none_means})" if none_means else "")
    if value is None and none_means:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {accepted}, got {_what(value)}")
    if value not in choices:
        raise UsageError(f"{name} must be one of {accepted}, got {shorten(value, 60)}")
    return value


def counting(value, none_means: str | None = None) -> str | None:
    return choice(value, "counting", COUNTINGS, none_means)


def phase(value, none_means: str | None = None) -> str | None:
    return choice(value, "phase", tuple(R.PHASES), none_means)


def component(value, none_means: str | None = "every component") -> str | None:
    return choice(value, "component", R.COMPONENTS, none_means)


def count(value, name: str, none_means: str | None = None, minimum: int = 1,
          maximum: tuple[int, str] | None = None) -> int | None:
    """A whole number (numpy's included, not bool) of at least `minimum` and, given
    `maximum` (the bound and its words), at most that: the bound the CLI's flag has, so that
    the API answers no more than the command line does (issue 32); None too when none_means
    says what None means."""
    if value is None and none_means:
        return None
    import operator
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        alt = f" or None ({none_means})" if none_means else ""
        raise TypeError(f"{name} must be an integer of at least {minimum}{alt}, got {_what(value)}")
    value = operator.index(value)
    if value < minimum:
        raise UsageError(f"{name} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum[0]:
        raise UsageError(f"{name} must be at most {maximum[1]}, got {value:.3e}")
    return value


def iterable(value, name: str) -> list:
    """The items of a list, a range, an array (not of a string: its characters)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be an iterable (a list, a range, an array), got "
                        f"{_what(value)}")
    return list(value)


def flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_what(value)}")
    return value


def optional_name(value, name: str, what: str) -> str | None:
    """None or a string (its meaning checked by the callee, which lists the known ones)."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} must be {what} or None, got {_what(value)}")
    return value


def _what(value) -> str:
    return f"{shorten(value, 40)} ({type(value).__name__})"
