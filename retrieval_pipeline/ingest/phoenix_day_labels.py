"""A Phoenix day's document annotations as its RETRIEVER spans' labels (issue 35, item 1).

Read a page of spans at a time (`ingest.phoenix.read_day`), so a day's memory stays a page's:
the page's RETRIEVER spans' document annotations are read (`phoenix_annotations`), chosen per
span (`phoenix_labels.choose_labels`: HUMAN over LLM over CODE, the configured names and kinds),
and written into the span's metadata as `relevance_scores` by document id (the id at the
annotation's `document_position`) with `label_source` naming the kinds that gave them
(`phoenix:human`, `phoenix:llm`, or `phoenix:human+llm` when both did), before the span becomes
a record. The project's one precedence rule (docs/conformance.md) then holds as for any trace:
labels in the span's own metadata win (the annotations of such a span are counted, not used);
a span with neither takes its query's judgments; with none it is unannotated.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any

from retrieval_pipeline.config import PhoenixConfig, TraceFormatConfig
from retrieval_pipeline.ingest.otlp import SpanView
from retrieval_pipeline.ingest.phoenix import PhoenixStore
from retrieval_pipeline.ingest.phoenix_annotations import read_document_annotations
from retrieval_pipeline.ingest.phoenix_labels import KIND_ORDER, LabelTally, choose_labels
from retrieval_pipeline.ingest.span_documents import SpanError, json_value, ranked_ids
from retrieval_pipeline.ingest.span_records import RETRIEVER_KIND, SPAN_KIND_ATTRIBUTE

UNKNOWN_SEGMENT = "unknown"  # a record's segment when its metadata names none


class DayLabeller:
    """Labels the RETRIEVER spans of each page from their Phoenix document annotations."""

    def __init__(
        self,
        store: PhoenixStore,
        config: PhoenixConfig,
        trace_format: TraceFormatConfig,
        tally: LabelTally,
    ) -> None:
        self.store, self.config, self.format, self.tally = store, config, trace_format, tally

    def label(self, views: list[SpanView]) -> list[SpanView]:
        """`views` with the RETRIEVER spans' metadata labelled from their annotations."""
        wanted = [v.span_id for v in views if _is_retriever(v) and v.span_id]
        if not wanted:
            return views
        by_span: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for note in read_document_annotations(self.store, wanted):
            by_span[note["span_id"]].append(note)
        return [self._labelled(v, by_span.get(v.span_id, [])) for v in views]

    def _labelled(self, view: SpanView, notes: list[dict[str, Any]]) -> SpanView:
        if not notes or not _is_retriever(view):
            return view
        chosen = choose_labels(notes, name=self.config.label_names(), kinds=self.config.label_kinds)
        self.tally.skipped += chosen.skipped
        for span_id, position, reason in chosen.quarantined:
            self.tally.refuse(span_id, position, reason)
        if not chosen.labels:
            return view
        fmt = self.format
        try:
            metadata = json_value(view.attributes.get(fmt.metadata_attribute), "metadata") or {}
            ids = ranked_ids(
                view.attributes,
                fmt.document_id_attribute,
                fmt.document_metadata_attribute,
                fmt.document_metadata_id_key,
            )
        except SpanError:
            return view  # the span is quarantined with its reason when it is converted
        if not isinstance(metadata, dict):
            return view
        segment = metadata.get(fmt.segment_key)
        segment = segment if isinstance(segment, str) and segment else UNKNOWN_SEGMENT
        for human, llm in chosen.overlaps:  # the raters' agreement, whichever labels score
            self.tally.pairs[(segment, human, llm)] += 1
        if fmt.relevant_ids_key in metadata or fmt.relevance_scores_key in metadata:
            self.tally.spans_with_own_labels += 1  # its own labels win (docs/conformance.md)
            return view
        ids = ids or []
        grades: dict[str, float] = {}
        kinds: set[str] = set()
        for label in chosen.labels:  # by position: a repeated id keeps its first position's
            if label.position >= len(ids):
                reason = f"the span has {len(ids)} documents, so no document at that position"
                self.tally.refuse(view.span_id, label.position, reason)
                continue
            doc_id = str(ids[label.position])
            if doc_id not in grades:
                grades[doc_id] = label.grade
                kinds.add(label.source.removeprefix("phoenix:").upper())
                self.tally.labels[label.source] += 1
        if not grades:
            return view
        self.tally.spans_labelled += 1
        ordered = [k.lower() for k in KIND_ORDER if k in kinds]
        metadata = {
            **metadata,
            fmt.relevance_scores_key: grades,
            fmt.label_source_key: "phoenix:" + "+".join(ordered),
        }
        return dataclasses.replace(
            view, attributes={**view.attributes, fmt.metadata_attribute: metadata}
        )


def _is_retriever(view: SpanView) -> bool:
    kind = view.attributes.get(SPAN_KIND_ATTRIBUTE)
    return isinstance(kind, str) and kind.upper() == RETRIEVER_KIND
