"""The unit every reader returns and every writer takes: one document of aligned sentences."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Document:
    """A document: its id, source sentences and (optionally) target sentences.

    ``tgt`` is ``None`` for source-only input (translation); otherwise it has exactly as many
    sentences as ``src`` (readers check this and raise :class:`docnmt.errors.DataError`).
    """

    docid: str
    src: list[str]
    tgt: list[str] | None = None
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.src)
