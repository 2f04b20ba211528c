"""pandas deferred (retrieval_pipeline.pandas_deferred): pyarrow loads no pandas for the work that
needs none, and knows pandas objects again the moment pandas is imported."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from retrieval_pipeline.pandas_deferred import defer_pandas, numbers
from tests.processes import default_signals


def _run(code: str) -> str:
    """`code` in a fresh interpreter (pandas not loaded); its standard output."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        preexec_fn=default_signals,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_arrow_work_with_types_loads_no_pandas() -> None:
    out = _run(
        "import sys\n"
        "from retrieval_pipeline.pandas_deferred import defer_pandas, numbers\n"
        "import pyarrow as pa, pyarrow.compute as pc\n"
        "assert defer_pandas()\n"
        "a = pa.array([1.5, None], pa.float64())\n"
        "pc.add(a, pa.scalar(1.0, pa.float64()))\n"
        "pa.schema([('a', pa.int64())]).empty_table()\n"
        "print(numbers(a, fill=-1.0).tolist(), 'pandas' in sys.modules)\n"
    )
    assert out.split() == ["[1.5,", "-1.0]", "False"]


def test_without_the_deferral_the_same_work_loads_pandas() -> None:
    """The test above can fail: pyarrow's own conversion to numpy imports pandas."""
    out = _run(
        "import sys\n"
        "import pyarrow as pa\n"
        "pa.array([1.5, None], pa.float64()).to_numpy(zero_copy_only=False)\n"
        "print('pandas' in sys.modules)\n"
    )
    assert out.split() == ["True"]


def test_pandas_imported_later_is_known_to_pyarrow() -> None:
    """After the deferral, an `import pandas` anywhere makes pyarrow convert pandas objects as it
    always does: a categorical becomes a dictionary, a NaN of a Series becomes null."""
    out = _run(
        "import sys\n"
        "from retrieval_pipeline.pandas_deferred import defer_pandas\n"
        "import pyarrow as pa\n"
        "assert defer_pandas()\n"
        "pa.array([1], pa.int64())\n"
        "import pandas as pd\n"
        "print(pa.array(pd.Series(pd.Categorical(['x', 'y']))).type.id == pa.dictionary("
        "pa.int8(), pa.string()).id)\n"
        "print(pa.array(pd.Series([1.0, float('nan')])).null_count)\n"
        "print(pa.Table.from_pandas(pd.DataFrame({'c': [1, 2]})).num_rows)\n"
        "print(type(pd.__loader__).__name__, type(pd.__spec__.loader).__name__)\n"
        "print([f.done for f in sys.meta_path if 'pandas_deferred' in type(f).__module__])\n"
    )
    assert out.split() == ["True", "1", "2", "SourceFileLoader", "SourceFileLoader", "[True]"]


def test_a_second_deferral_does_nothing_and_pandas_still_loads() -> None:
    out = _run(
        "from retrieval_pipeline.pandas_deferred import defer_pandas\n"
        "print(defer_pandas(), defer_pandas())\n"
        "import pandas\n"
        "print(pandas.DataFrame({'a': [1]}).shape)\n"
    )
    assert out.split() == ["True", "False", "(1,", "1)"]


def test_nothing_is_deferred_where_pandas_is_loaded() -> None:
    assert "pandas" in sys.modules  # the test process has it
    assert defer_pandas() is False


def test_numbers_refuse_what_is_not_a_number() -> None:
    with pytest.raises(TypeError, match="integers or floats, not bool"):
        numbers(pa.array([True, False], pa.bool_()))


@pytest.mark.parametrize(
    "values",
    [
        pa.array([3, None, 5], pa.int64()),
        pa.array([7, 8, 9, 10], pa.int32()).slice(1, 2),
        pa.chunked_array([pa.array([1.5, None]), pa.array([2.5])], pa.float64()),
        pa.chunked_array([pa.array([4], pa.int64())]),
        pa.chunked_array([], pa.float64()),
        pa.array([], pa.int32()),
    ],
)
def test_numbers_are_pyarrows_own(values: pa.Array | pa.ChunkedArray) -> None:
    """`numbers` gives what pyarrow's `to_numpy` gives once the nulls are filled."""
    fill = -1
    expected = values.fill_null(fill).to_numpy()
    got = numbers(values, fill=fill)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
