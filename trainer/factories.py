"""Load the user's `module:function` factories, turning every failure into a config error."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from trainer.config import ConfigError


def load_factory(spec: str, flag: str) -> Callable:
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"{flag} {spec!r}: cannot import {module_name!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise ConfigError(f"{flag} {spec!r}: {module_name!r} has no callable {attr!r}")
    return factory
