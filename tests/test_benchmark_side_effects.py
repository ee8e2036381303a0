"""benchmarks/side_effects.py's analysis and its input checks (running it needs a GPU)."""

from __future__ import annotations

import pandas as pd
import pytest
from benchmark_scripts import load_benchmark


@pytest.fixture(scope="module")
def side_effects():
    return load_benchmark("side_effects")


def requests(services_ms: list[float], every_s: float = 0.1) -> pd.DataFrame:
    starts = [100.0 + i * every_s for i in range(len(services_ms))]
    return pd.DataFrame(
        {
            "start_unix_s": starts,
            "end_unix_s": [s + ms / 1e3 for s, ms in zip(starts, services_ms, strict=True)],
        }
    )


def test_slow_requests_are_counted_in_the_action_that_overlapped_them(side_effects) -> None:
    # 40 requests 0.1 s apart (100.0-103.9 s), 2 ms each, but 10 ms at 101.0-101.2 s: the first
    # action (101.0-101.15 s, counted to 101.45) holds them; the second (103.0-103.05) none.
    services = [2.0] * 40
    services[10:13] = [10.0, 12.0, 10.0]
    actions = pd.DataFrame({"action": ["numpy", "numpy1"], "start_unix_s": [101.0, 103.0],
                            "end_unix_s": [101.15, 103.05]})  # fmt: skip
    table, median = side_effects.affected(requests(services), actions)
    rows = {row.action: row for row in table.itertuples()}
    assert median == pytest.approx(2.0)
    assert rows["numpy"].slow == 3 and rows["numpy"].longest_ms == pytest.approx(12.0)
    assert rows["numpy"].requests == 5  # 101.0 .. 101.4
    assert rows["numpy1"].slow == 0 and rows["numpy1"].requests == 4  # 103.0 .. 103.3
    assert rows["(quiet stretches)"].slow == 0
    assert rows["(quiet stretches)"].requests == 40 - 5 - 4
    page = side_effects.summary_markdown(
        table,
        {"service": "s.py", "be": None, "orion": False, "actions": "a", "quiet_median_ms": median},
    )
    assert "| numpy | 0.15 | 5 | 3 | 12.00 |" in page


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--out", "x", "--action", "a=true"], "the service to run is missing"),
        (["--out", "x", "--", "s.py"], "--action: at least one"),
        (["--out", "x", "--action", "nocommand", "--", "s.py"], "--action: NAME=COMMAND"),
        (["--out", "x", "--action", "a=true", "--gap-s", "0", "--", "s.py"], "--gap-s"),
    ],
)
def test_bad_arguments_are_refused_before_anything_runs(side_effects, arguments, message, capsys):
    with pytest.raises(SystemExit):
        side_effects.parse_args(arguments)
    assert message in capsys.readouterr().err
