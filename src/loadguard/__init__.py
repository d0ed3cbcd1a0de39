"""loadguard: prove a model came out of loading exactly as its checkpoint and its code define it."""

from .poison import poison

__all__ = ["poison"]
__version__ = "0.1.0"
