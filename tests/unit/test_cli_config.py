"""Options -> RunConfig defaults that depend on the target."""

from __future__ import annotations

import pytest

from specload.cli_run import build_config, run_command
from specload.config import ConfigError
from specload.plan import PlanError


def config(*args: str):
    return build_config(dict(run_command.make_context("run", list(args)).params), ui=False)


@pytest.mark.parametrize(
    ("args", "continuous"),
    [
        ((), True),  # the built-in simulator supports per-chunk usage: exact live counts
        (("--no-continuous-usage",), False),
        (("http://127.0.0.1:8000",), False),  # a real server might reject the field
        (("http://127.0.0.1:8000", "--continuous-usage"), True),
    ],
)
def test_continuous_usage_defaults_on_only_for_the_builtin_simulator(args, continuous) -> None:
    assert config(*args).request.continuous_usage is continuous


def test_metrics_interval_reaches_the_watch_config() -> None:
    assert config("--metrics-interval", "0.25").watch.metrics_interval_s == 0.25
    assert config().watch.metrics_interval_s == 1.0


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--extra-body", '{"a":' * 300 + "1" + "}" * 300), "--extra-body"),
    ],
)
def test_a_request_body_that_cannot_be_written_is_a_usage_error(args, needle) -> None:
    # before: each request's task died on orjson.dumps, unrecorded, and a drained run hung
    with pytest.raises(ConfigError, match="JSON") as e:
        config(*args)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("levels", ["1,,4", ",4", "4,", "1, ,4"])
def test_an_empty_concurrency_entry_is_an_error(levels: str) -> None:
    # before: "1,,4" ran levels 1 and 4 without a word
    with pytest.raises(PlanError, match="empty entry"):
        config("-c", levels)
