"""Durable, compare-and-set storage of job records. See `base.StateStore` for the contract."""

from controller.store.base import AlreadyExists, Fenced, StateStore, StoreOps, VersionConflict, Versioned

__all__ = ["AlreadyExists", "Fenced", "StateStore", "StoreOps", "Versioned", "VersionConflict"]
