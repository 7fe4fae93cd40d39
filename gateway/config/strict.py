"""The base of every configuration model: unknown keys refused, values frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Strict"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
