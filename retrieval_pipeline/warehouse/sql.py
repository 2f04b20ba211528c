"""The one place that knows where the `sql/` statement files live.

From a checkout they sit at the repository's top level; an installed wheel carries them inside the
package (see `[tool.hatch.build.targets.wheel.force-include]` in pyproject.toml).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

# the package (`retrieval_pipeline`), which holds this module's folder
_PACKAGE_DIR = Path(__file__).resolve().parents[1]


@cache
def sql_dir() -> Path:
    """The directory holding the statement files, installed copy first."""
    for candidate in (_PACKAGE_DIR / "sql", _PACKAGE_DIR.parent / "sql"):
        if (candidate / "schema.sql").is_file():
            return candidate
    raise FileNotFoundError(
        f"cannot find the sql/ statement files next to {_PACKAGE_DIR}; reinstall the package"
    )


@cache
def load_sql(name: str) -> str:
    """Text of `sql/<name>.sql`; `name` is a file stem such as `fct_query_metrics`."""
    path = sql_dir() / f"{name}.sql"
    if not path.is_file():
        raise FileNotFoundError(f"no SQL statement file {path}")
    return path.read_text(encoding="utf-8")
