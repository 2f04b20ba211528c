"""Why judgments label nothing: the keys of traces and judgments side by side, in words.

Frameworks' spans carry the query's text where the judgments carry the team's query ids, and
generated document ids (node UUIDs) where the judgments carry the team's document ids; both make
every metric a silent 0 or leave every trace unannotated. `evaluate` tells it (docs/spans.md,
docs/conformance.md) with what each side's keys look like and the setting that maps them. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from retrieval_pipeline.text import printable

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)
TOPICS_HINT = (
    "map query texts to query ids with --topics FILE (TREC topics qid<TAB>text, or .csv/.jsonl "
    "with query_id and text; [trace_format] topics_file in the config)"
)
DOCUMENT_ID_HINT = (
    "if your documents carry your ids in their metadata, name that key as [trace_format] "
    "document_metadata_id_key (docs/spans.md)"
)


@dataclass(frozen=True)
class JudgmentJoin:
    """How traces and judgments meet: queries shared, distinct retrieved ids judged for any
    query out of all distinct retrieved ids, and up to three keys of each side."""

    shared_queries: int
    judged_retrieved_ids: int
    retrieved_ids: int
    trace_queries: tuple[str, ...]
    judged_queries: tuple[str, ...]
    retrieved: tuple[str, ...]
    judged_docs: tuple[str, ...]

    @property
    def no_shared_query(self) -> bool:
        return bool(self.trace_queries and self.judged_queries) and self.shared_queries == 0

    @property
    def no_judged_document(self) -> bool:
        return self.retrieved_ids > 0 and self.judged_retrieved_ids == 0 and bool(self.judged_docs)

    def problems(self) -> list[str]:
        """One line per way the two sides fail to meet (none when they do)."""
        lines = []
        if self.no_shared_query:
            lines.append(
                "The judgments and the traces share no query id: the traces' look like "
                f"{looks_like(self.trace_queries)}, the judgments' like "
                f"{looks_like(self.judged_queries)}; "
                + (TOPICS_HINT if _kind(self.trace_queries) == "texts" else "check both sides")
                + "."
            )
        if self.no_judged_document:
            lines.append(
                f"None of the {self.retrieved_ids} retrieved document ids is in the judgments: "
                f"retrieved ids look like {looks_like(self.retrieved)}, judged ids like "
                f"{looks_like(self.judged_docs)}; {DOCUMENT_ID_HINT}."
            )
        return lines


def _kind(keys: Sequence[str]) -> str:
    if keys and all(_UUID.match(key) for key in keys):
        return "UUIDs"
    if keys and all(len(key.split()) >= 3 for key in keys):
        return "texts"
    return "ids"


_KIND_WORDS = {
    "UUIDs": "generated UUIDs (a framework's node ids?)",
    "texts": "query texts",
    "ids": "ids",
}


def looks_like(keys: Sequence[str]) -> str:
    """What a few keys look like, with the keys: `query texts ("what is bm25 ...", ...)`."""
    shown = ", ".join(f'"{printable(key, 40)}"' for key in keys)
    return f"{_KIND_WORDS[_kind(keys)]} ({shown})"
