"""Run a training entry point with the Hugging Face Hub replaced by a recorder (no network).

    python tests/hub_stub.py RECORD.json finetune/grpo.py RECIPE --push_to_hub true --hub_model_id me/model ...

``transformers.trainer.hf_api()`` (what ``Trainer.init_hf_repo`` and ``Trainer.push_to_hub`` call) returns
a recorder: each ``create_repo`` and ``upload_folder`` call is appended to RECORD.json, the upload with
the files it would send and the model card's text, and nothing leaves the machine.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import runpy
import sys
from pathlib import Path
from types import SimpleNamespace

from huggingface_hub import get_token


def _digest(token: str | None) -> str | None:
    """The token a Hub call would send, as its SHA-256 (the record holds no token)."""
    return hashlib.sha256(token.encode()).hexdigest() if token else None


class RecordingHubApi:
    def __init__(self, record: Path) -> None:
        self.record = record

    def _append(self, entry: dict) -> None:
        calls = json.loads(self.record.read_text()) if self.record.is_file() else []
        self.record.write_text(json.dumps([*calls, entry], indent=1))

    def create_repo(self, repo_id: str, **kwargs) -> SimpleNamespace:
        self._append({"call": "create_repo", "repo_id": repo_id})
        return SimpleNamespace(repo_id=repo_id)

    def upload_folder(
        self, *, repo_id: str, folder_path: str, ignore_patterns: list[str] = (), **kwargs
    ) -> SimpleNamespace:
        root = Path(folder_path)
        files = sorted(
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file()
            and not any(
                fnmatch.fnmatch(part, pattern) for part in p.relative_to(root).parts for pattern in ignore_patterns
            )
        )
        card = (root / "README.md").read_text() if (root / "README.md").is_file() else None
        self._append(
            {
                "call": "upload_folder",
                "repo_id": repo_id,
                "files": files,
                "readme": card,
                "commit_message": kwargs.get("commit_message"),
                "token_sha256": _digest(kwargs.get("token") or get_token()),
            }
        )
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/recorded")


if __name__ == "__main__":
    record, script, *args = sys.argv[1:]
    import transformers.trainer

    api = RecordingHubApi(Path(record))
    transformers.trainer.hf_api = lambda: api
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent.parent))
    runpy.run_path(script, run_name="__main__")
