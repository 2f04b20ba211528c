"""A retrieval span's document ids, in rank order: by position, from each document's metadata,
or from the GenAI convention's list (`docs/spans.md`).

OpenInference writes documents as indexed attributes (`retrieval.documents.{i}.document.id`);
the ids are taken in order of position, never re-sorted by score. Some frameworks keep the
user's id only in each document's metadata JSON (`document_metadata_id_key`). A span with no
document attribute at all has no documents (None): what that means is the converter's choice.
Pure: json and the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

# the record rules' own id test and words, so that a span's reasons read like a record's
from retrieval_pipeline.records import _is_id
from retrieval_pipeline.records import _words as json_type_in_words

# A document's position in an attribute name: ASCII digits only (a regular expression, as
# `str.isdigit` and `int` also take superscript, Arabic-Indic and full-width digits),
# without a leading zero.
POSITION = "(?:0|[1-9][0-9]*)"
_POSITION = re.compile(POSITION)


class SpanError(ValueError):
    """A span that cannot become a record; the message is the reason, in words."""


def words(value: object) -> str:
    """A JSON value's type in the record rules' words."""
    return "an empty string" if value == "" else json_type_in_words(value)


def document_id(value: object, name: str) -> str | int:
    if _is_id(value):
        return value  # type: ignore[return-value]  # a str or an int, as _is_id says
    raise SpanError(f"{name} is {words(value)}; ids must be non-empty strings or integers")


def indexed_ids(attributes: Mapping[str, object], pattern: str) -> list[str | int] | None:
    """The ids of `pattern` (`retrieval.documents.{i}.document.id`) in order of i; None when
    the span has none. A missing position is an error: the ranks after it would be wrong."""
    found = positions(attributes, pattern, True)
    if not found:
        return None
    missing = next((i for i in range(len(found)) if i not in found), None)
    if missing is not None:
        raise SpanError(
            f"{pattern.format(i=missing)} is missing, yet the span has ids up to position "
            f"{max(found)}: the ranks after it are unknown"
        )
    ids = [found[i] for i in range(len(found))]
    for i, value in enumerate(ids):
        if not _is_id(value):
            document_id(value, pattern.format(i=i))  # raises, naming the attribute
    return ids  # type: ignore[return-value]  # checked above


def position_regex(pattern: str) -> str:
    """The regular expression of `pattern`'s keys, `{i}` a position (`POSITION`)."""
    return re.escape(pattern).replace(re.escape("{i}"), POSITION)


def _position(key: str, prefix: str, suffix: str) -> tuple[int, str] | None:
    """A key under a pattern's `prefix` (`retrieval.documents.`; `suffix` is what follows
    `{i}`) as (its position, the rest of the key after it); None for a key with no digit
    where the position goes. One
    whose position holds a digit yet is not ASCII digits without a leading zero
    (`documents.²`, an Arabic-Indic zero, `documents.01`) raises SpanError naming it: `str.isdigit`
    and `int` take such digits, so it would be read as another position, or shadow it."""
    rest = key[len(prefix) :]
    cut = rest.find(suffix[0]) if suffix else -1
    index, after = (rest, "") if cut < 0 else (rest[:cut], rest[cut:])
    if not _POSITION.fullmatch(index):
        if not any(character.isnumeric() for character in index):
            return None  # another attribute that shares the prefix, not a document's
        raise SpanError(
            f"the attribute {json.dumps(key, ensure_ascii=False)} is under {prefix}, yet "
            f"{json.dumps(index, ensure_ascii=False)} is not a document position: positions "
            f"are ASCII digits without a leading zero ({prefix}0{suffix}, {prefix}1{suffix}, ...)"
        )
    return int(index), after


def check_positions(attributes: Mapping[str, object], patterns: Sequence[str]) -> None:
    """SpanError naming the first attribute under one of `patterns` whose position is not a
    position (`_position`): the span's ranking cannot be trusted."""
    # a key's position reads the same for every pattern with its prefix and separator
    parts: dict[tuple[str, str], str] = {}
    for pattern in patterns:
        prefix, suffix = pattern.split("{i}")
        parts.setdefault((prefix, suffix[:1]), suffix)
    prefixes = tuple(prefix for prefix, _ in parts)
    for key in attributes:
        if key.startswith(prefixes):  # one test for most keys
            for (prefix, _), suffix in parts.items():
                if key.startswith(prefix):
                    _position(key, prefix, suffix)


def positions(attributes: Mapping[str, object], pattern: str, exact: bool) -> dict[int, object]:
    """Position -> value of the attributes of `pattern` (exact: the key itself, with `{i}` a
    position); not exact: any attribute under the pattern's prefix and a position (the
    document's content, score, metadata, ...), its first value. A key whose position is not
    one raises SpanError (`_position`)."""
    prefix, suffix = pattern.split("{i}")
    found: dict[int, object] = {}
    for key, value in attributes.items():
        placed = _position(key, prefix, suffix) if key.startswith(prefix) else None
        if placed is None:
            continue
        index, after = placed
        if (after == suffix) if exact else (not after or after[0] == suffix[:1]):
            found.setdefault(index, value)
    return found


def shortened(text: str, limit: int = 60) -> str:
    return json.dumps(text if len(text) <= limit else text[:limit] + "...", ensure_ascii=False)


def metadata_ids(
    attributes: Mapping[str, object], id_pattern: str, metadata_pattern: str, key: str
) -> list[str | int] | None:
    """Each document's id as the `key` of its metadata JSON, in order of position; None when
    the span has no documents."""
    found = {**positions(attributes, id_pattern, False)}
    found.update(positions(attributes, metadata_pattern, False))
    if not found:
        return None
    metadata = positions(attributes, metadata_pattern, True)
    ids: list[str | int] = []
    for i in range(max(found) + 1):
        name = metadata_pattern.format(i=i)
        document = json_value(metadata.get(i), name)
        if not isinstance(document, dict) or key not in document:
            got = "is not set" if document is None else f"has no key {key!r}"
            if document is not None and not isinstance(document, dict):
                got = f"is {words(document)}, not a JSON object"
            raise SpanError(
                f"{name} {got}, so document {i} has no id ([trace_format] "
                f"document_metadata_id_key = {key!r})"
            )
        ids.append(document_id(document[key], f"{name}[{key!r}]"))
    return ids


def ranked_ids(
    attributes: Mapping[str, object], id_pattern: str, metadata_pattern: str, key: str | None
) -> list[str | int] | None:
    """The documents' ids in order of position, from `id_pattern` or, with `key`, from each
    document's metadata; None when the span has no document attribute at all. Documents
    without ids are an error naming the fix."""
    if key is not None:
        return metadata_ids(attributes, id_pattern, metadata_pattern, key)
    ids = indexed_ids(attributes, id_pattern)
    if ids is not None or not positions(attributes, id_pattern, False):
        return ids
    if positions(attributes, metadata_pattern, True):
        raise SpanError(
            f"the documents have no {id_pattern}, only {metadata_pattern}: set [trace_format] "
            "document_metadata_id_key to the metadata key holding your document ids"
        )
    raise SpanError(f"the documents have no {id_pattern}: their ranks cannot be scored")


def json_value(value: object, name: str) -> object:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        raise SpanError(f"{name} is a string that is not valid JSON") from None
    except RecursionError:
        raise SpanError(f"{name} is JSON nested too deeply to read") from None


def genai_ids(value: object, name: str) -> list[str | int]:
    """The ids of `gen_ai.retrieval.documents`: a list of {id, score} objects (or its JSON text,
    or a list of their JSON texts), in list order."""
    documents = json_value(value, name)
    if not isinstance(documents, list):
        raise SpanError(f"{name} must be a list of {{id, score}} objects (got {words(documents)})")
    ids: list[str | int] = []
    for position, item in enumerate(documents):
        document = json_value(item, f"{name}[{position}]")
        if not isinstance(document, dict) or "id" not in document:
            raise SpanError(f"{name}[{position}] is not an object with an id")
        ids.append(document_id(document["id"], f"{name}[{position}].id"))
    return ids
