"""The session's podman Docker API (engine_rig.py), for every engine test."""

from engine_rig import podman

__all__ = ["podman"]
