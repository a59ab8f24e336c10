"""Which folders a command may replace or remove: one that is missing or empty, or one that holds veritune's own
record of having made it (a directory build's ``.veritune_build.json``, the demo's ``stages/``, a tiny model's
``veritune_tiny.json``, a training run's ``veritune_run.json``, ...). Any other folder is refused in one line
naming it. The root folder, the home folder, the working folder and the repository root (and every folder above
one of them) are never a target, whatever they hold."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.errors import UserError

REPO_ROOT = Path(__file__).resolve().parent.parent


def protected_folders() -> dict[str, Path]:
    """The folders no command replaces or removes, by what they are (resolved now: ``HOME`` and the working
    folder are the process's)."""
    folders = {"the root folder": Path("/"), "the working folder": Path.cwd(), "the repository root": REPO_ROOT}
    try:
        folders["the home folder"] = Path.home()
    except RuntimeError:  # no HOME and no password entry
        pass
    return {what: path.resolve() for what, path in folders.items()}


def check_not_protected(folder: str | os.PathLike[str], flag: str) -> None:
    """Refuse ``folder`` as a folder to replace or remove when it is, or lies above, a protected folder.

    Raises:
        UserError: ``"<flag> <folder>: is the home folder (or above it); ..."``.
    """
    target = Path(folder).resolve()
    for what, protected in protected_folders().items():
        if protected == target or protected.is_relative_to(target):
            where = what if protected == target else f"above {what}"
            raise UserError(
                f"{flag} {folder}: is {where}, which veritune never replaces or removes; choose a folder of its own"
            )


def is_empty_or_missing(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder`` does not exist or is an empty directory."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return True
    return folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir())


def holds_record(folder: str | os.PathLike[str], records: Iterable[str]) -> bool:
    """Whether ``folder`` holds one of ``records`` (names inside it)."""
    folder = Path(folder)
    return folder.is_dir() and any(os.path.lexists(folder / name) for name in records)


def check_replaceable(folder: str | os.PathLike[str], flag: str, records: tuple[str, ...], made_by: str) -> None:
    """Check that ``folder`` may be replaced or removed by a command whose output holds one of ``records``
    (``made_by`` names that command): not protected (:func:`check_not_protected`), and missing, empty or
    holding a record.

    Raises:
        UserError: one line naming the folder and the record it lacks.
    """
    check_not_protected(folder, flag)
    if is_empty_or_missing(folder) or holds_record(folder, records):
        return
    names = " or ".join(records)
    what = "is a file" if not Path(folder).is_dir() else f"holds files not made by {made_by} (no {names})"
    raise UserError(
        f"{flag} {folder}: {what}; veritune replaces only a folder it made: choose another {flag}, or an empty folder"
    )
