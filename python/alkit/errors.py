"""The exceptions alkit raises.

Every error of the Rust library arrives as one of these, with the library's own message
(which says what was being done, and which file, line or setting is wrong) and, as
attributes, the setting (``field``), the file (``path``) and its line (``row``) it names.
Settings and data errors are also ``ValueError``s and file errors ``OSError``s, so code
that catches those keeps working. Ctrl-C during a call that reads files or trains (a
checkpoint scored by path, a session's steps) stops the work and raises
``KeyboardInterrupt``.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "AlkitError",
    "SettingsError",
    "DataError",
    "StateError",
    "FileError",
    "HubError",
]


class AlkitError(Exception):
    """Base class of alkit's errors."""

    #: The setting the error is about (a keyword argument's name), if any.
    field: Optional[str] = None
    #: The file or folder the error is about, if any.
    path: Optional[str] = None
    #: The 1-based line of ``path`` (a CSV row), if any.
    row: Optional[int] = None

    def __init__(
        self,
        message: str,
        field: Optional[str] = None,
        path: Optional[str] = None,
        row: Optional[int] = None,
    ) -> None:
        super().__init__(message)
        self.field = field
        self.path = path
        self.row = row


class SettingsError(AlkitError, ValueError):
    """A setting is out of range, unknown or inconsistent with another (or with the arrays)."""


class DataError(AlkitError, ValueError):
    """The data is malformed: a shape, a probability row, a label, a file's contents."""


class StateError(AlkitError):
    """A session folder or checkpoint does not hold what it must (or is locked by another)."""


class FileError(AlkitError, OSError):
    """A file could not be read or written."""


class HubError(AlkitError, OSError):
    """A Hugging Face Hub repository could not be listed or a file fetched."""
