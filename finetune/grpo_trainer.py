"""TRL's ``GRPOTrainer`` with rollout tables that W&B can store for vision-language prompts.

With ``log_completions: true``, TRL 1.16 logs each rollout's prompt and completion as chat messages. A VLM
prompt's content mixes an ``{"type": "image"}`` part with ``{"type": "text", "text": ...}`` parts, and W&B's
table type inference rejects such a column ("Data row contained incompatible types"), which stops training
at the first logging step. Here each logged conversation becomes its plain text (an image part as
``<image>``) just before TRL builds the table; the ``completions/*.parquet`` files and the console sample
get the same text. Everything else, the per-reward columns and the advantage included, is TRL's.
"""

from __future__ import annotations

from typing import Any

from trl import GRPOTrainer

IMAGE_PLACEHOLDER = "<image>"


def conversation_text(messages: Any) -> str:
    """A logged prompt or completion as plain text: one ``role: text`` line per message.

    >>> conversation_text(
    ...     [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Is there a cat?"}]}]
    ... )
    'user: <image> Is there a cat?'
    >>> conversation_text("already text")
    'already text'
    """
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return str(messages)
    lines = []
    for message in messages:
        if not isinstance(message, dict):
            lines.append(str(message))
            continue
        content = message.get("content")
        if isinstance(content, list):
            parts = [
                str(part.get("text", "")) if part.get("type") == "text" else IMAGE_PLACEHOLDER
                for part in content
                if isinstance(part, dict)
            ]
            content = " ".join(part for part in parts if part)
        lines.append(f"{message.get('role', '')}: {content if content is not None else ''}")
    return "\n".join(lines)


class VerituneGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose completion tables hold text (see the module docstring)."""

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if self.log_completions:
            for key in ("prompt", "completion"):
                column = self._logs[key]
                if any(not isinstance(entry, str) for entry in column):
                    texts = [conversation_text(entry) for entry in column]
                    column.clear()
                    column.extend(texts)
        super().log(logs, start_time)
