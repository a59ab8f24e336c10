"""Whether W&B can log here, checked before any model loads: a run whose ``report_to`` names wandb, without
credentials and without ``WANDB_MODE=offline``, would otherwise load its model and then end in wandb's
``UsageError: No API key configured`` traceback.

The check asks wandb where it looks itself, without a network call: its settings (``WANDB_MODE`` and the
``mode`` written by ``wandb offline`` or ``wandb disabled`` into its settings files, an ``api_key`` there), the
environment (``WANDB_API_KEY``, ``WANDB_IDENTITY_TOKEN_FILE``) and the netrc entry ``wandb login`` writes
for its server (``wandb.sdk.lib.wbauth.read_netrc_auth``). Whether a key found there is valid is left to wandb.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from core.errors import UserError

NOT_ONLINE_MODES = ("offline", "dryrun", "disabled")
LOGIN_HINT = (
    "run `wandb login` (or set WANDB_API_KEY), or log offline with WANDB_MODE=offline (sync later with `wandb sync`)"
)


def names_wandb(report_to: str | Iterable[str] | None) -> bool:
    """Whether a ``report_to`` value (TRL's list, or one string) sends logs to W&B (``all`` included)."""
    if report_to is None:
        return False
    names = [report_to] if isinstance(report_to, str) else list(report_to)
    return any(str(name).strip().lower() in ("wandb", "all") for name in names)


def _wandb_settings() -> object | None:
    """wandb's settings as it would load them (system settings file, workspace settings, environment), built
    here without starting wandb; None when wandb is not installed."""
    try:
        import wandb
    except ImportError:
        return None
    settings = wandb.Settings(quiet=True)  # no "Loading settings from" line
    config_dir = os.environ.get("WANDB_CONFIG_DIR")
    system = Path(config_dir).expanduser() / "settings" if config_dir else Path("~/.config/wandb/settings").expanduser()
    try:
        settings.settings_system = str(system)
        settings.update_from_system_settings()
        settings.update_from_env_vars(dict(os.environ))
    except Exception:  # noqa: BLE001 - an unreadable settings file: wandb itself will say so
        return settings
    return settings


def wandb_can_log() -> bool:
    """Whether wandb would start a run without asking for a key: not online (offline, disabled), or online with
    credentials from the environment, the settings or the netrc file."""
    mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if mode in NOT_ONLINE_MODES or os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    settings = _wandb_settings()
    if settings is None:
        return True  # without wandb the trainer refuses report_to: wandb itself, with its own line
    if getattr(settings, "mode", None) in NOT_ONLINE_MODES or getattr(settings, "api_key", None):
        return True
    try:
        from wandb.sdk.lib.wbauth import read_netrc_auth

        return bool(read_netrc_auth(host=settings.base_url))
    except Exception:  # noqa: BLE001 - a malformed netrc entry: wandb reports it when the run starts
        return True


def require_wandb_login(
    report_to: str | Iterable[str] | None,
    source: str = "report_to names wandb",
    alternative: str = "set report_to: none",
) -> None:
    """Stop with one line when ``report_to`` names wandb and wandb could not log (:func:`wandb_can_log`).

    Raises:
        UserError: ``"<source>, but W&B has no credentials here: run `wandb login` ..., or <alternative>"``.
    """
    if names_wandb(report_to) and not wandb_can_log():
        raise UserError(f"{source}, but W&B has no credentials here: {LOGIN_HINT}, or {alternative}")
