"""Pieces every orion package shares: the error type, machine facts and atomic file writes."""

from orion_common.errors import OrionError

__all__ = ["OrionError"]
