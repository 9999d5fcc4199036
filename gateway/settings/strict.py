"""The base of every config section."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A config section: unknown keys are errors (a typo must not pass as a default), values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
