"""pandas loaded only by the work that uses it, where pyarrow would load it for every command.

The first time pyarrow converts a Python value (`pa.array`, `pa.scalar`, a compute function given
a number, `Schema.empty_table`), its lazy pandas shim imports pandas, when it is installed, to
tell whether the value is a pandas object. pandas costs about as much to import as duckdb and
pyarrow together, and `evaluate` writing Parquet never holds a pandas object.

`defer_pandas()` lets that first look find no pandas: pyarrow's optional checks ("is this a
Series?") then answer no, which is true while the process has not imported pandas. The moment
anything imports pandas, pyarrow is told (its shim imports pandas for real), so a Series or a
DataFrame given to pyarrow afterwards is converted exactly as it always is; the calls that need
pandas (`to_pandas()`) import it as they always do. Nothing changes where pandas is loaded
already or is not installed. `tests/test_pandas_deferred.py` holds both halves.

pyarrow's conversions to numpy (`to_numpy()`) import pandas from C++, and so do its guesses of
a Python value's type (`pa.scalar(0)`): the code `evaluate` runs gives types, and takes numbers
as `numbers()` gives them.

This reads pyarrow's private shim (`pyarrow.lib._pandas_api`); where a pyarrow has none, the
function does nothing and pandas is imported as before.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

PANDAS = "pandas"


def defer_pandas() -> bool:
    """Keep pyarrow from importing pandas until something imports it; True if deferred (False:
    pandas is loaded already, or pyarrow has looked for it already, or has no shim)."""
    if PANDAS in sys.modules:
        return False
    shim = getattr(pa.lib, "_pandas_api", None)
    if shim is None or any(isinstance(f, _PandasFinder) for f in sys.meta_path):
        return False
    finder = _PandasFinder(shim)
    sys.meta_path.insert(0, finder)
    try:
        found = shim.have_pandas  # the shim's first look, once per process: none found
    finally:
        finder.blocking = False
    if found:  # it had looked before (pandas imported and unloaded): nothing to defer
        finder.done = True
    return not found


class _PandasFinder(MetaPathFinder):
    """First on `sys.meta_path`, for good (it is never removed: a finder taken out of the list
    while another thread walks it would make that thread skip the next one). While `blocking`,
    an import of pandas fails (pyarrow's first look catches it). Then, at the first import of
    pandas, it finds pandas as the finders after it do, with a loader that tells pyarrow's shim
    once pandas has loaded; after that it finds nothing."""

    def __init__(self, shim: Any) -> None:
        self.shim = shim
        self.blocking = True
        self.done = False

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != PANDAS or self.done:
            return None
        if self.blocking:
            raise ModuleNotFoundError(f"No module named {PANDAS!r} (deferred)", name=PANDAS)
        self.done = True
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenTell(spec.loader, self.shim)
                return spec
        return None


class _ThenTell(Loader):
    """Loads pandas with its own loader, puts that loader back on the module, then has pyarrow's
    shim import pandas (now loaded), so that its checks know pandas objects again."""

    def __init__(self, loader: Loader, shim: Any) -> None:
        self.loader = loader
        self.shim = shim

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        module.__loader__ = self.loader
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.shim.pd  # noqa: B018 - the shim's own import of pandas (loaded: no cost)


def numbers(values: pa.Array | pa.ChunkedArray, fill: float = 0) -> np.ndarray:
    """An Arrow array of integers or floats as a read-only numpy array over its own buffer (one
    copy where it has several chunks), a null as `fill`. `to_numpy()` would run pyarrow's pandas
    conversion, which imports pandas."""
    if not (pa.types.is_integer(values.type) or pa.types.is_floating(values.type)):
        raise TypeError(f"numbers() takes integers or floats, not {values.type}")
    if isinstance(values, pa.ChunkedArray):
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    dtype = np.dtype(values.type.to_pandas_dtype())
    if len(values) == 0:
        return np.empty(0, dtype)
    if values.null_count:
        values = pc.fill_null(values, pa.scalar(fill, values.type))
    data = values.buffers()[1]
    return np.frombuffer(data, dtype, len(values), values.offset * dtype.itemsize)
