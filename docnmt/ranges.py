"""The allowed ranges of settings, as ``(ok, allowed)`` pairs: ``ok(value)`` false is a config
error "must be {allowed}, not {value}" (:func:`docnmt.config.Config.from_dict`). Shared by the
core's sections (:data:`docnmt.config.LIMITS`) and the settings extensions declare
(:class:`docnmt.methods.Setting`)."""
from __future__ import annotations

import math
import os


def one_of(values: tuple) -> tuple:
    return (lambda v: v in values, ", ".join(values[:-1]) + f" or {values[-1]}")


AT_LEAST_0 = (lambda v: v >= 0, "at least 0")
AT_LEAST_1 = (lambda v: v >= 1, "at least 1")
PROBABILITY = (lambda v: 0 <= v < 1, "in [0, 1)")
FINITE = (lambda v: math.isfinite(v), "a finite number")
FINITE_AT_LEAST_0 = (lambda v: math.isfinite(v) and v >= 0, "a finite number, at least 0")
FINITE_ABOVE_0 = (lambda v: math.isfinite(v) and v > 0, "a finite number above 0")


def seconds_from_env(name: str, default: float | None, zero_ok: bool = True) -> float | None:
    """The seconds environment variable ``name`` sets (``default`` when unset or blank); a value
    that is not a number of seconds below 1e9 (or is 0 where ``zero_ok`` is false) is one
    :class:`~docnmt.errors.ConfigError` naming the variable, not a traceback from ``float``."""
    from .errors import ConfigError
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not ((value >= 0 if zero_ok else value > 0) and value < 1e9):      # (NaN fails both; 1e9 s: 31 years)
        raise ConfigError(f"{name}={text!r}: must be a number of seconds ({'0 or more' if zero_ok else 'more than 0'}, "
                          "below 1e9)")
    return value
