"""Every number option rejects NaN, infinities and absurd magnitudes with a one-line error (one rule
in ``specload.options``, for every option), and the option parser never raises anything else and
never hangs, whatever it is given (a property test over the real option list)."""

from __future__ import annotations

import random

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specload.cli import error_text
from specload.cli_run import build_config, run_command
from specload.config import ConfigError, RunConfig
from specload.engine.load import Arrivals
from specload.engine.prompts import PromptError, PromptSource
from specload.options import option_fields
from specload.plan import PlanError


def config(*args: str) -> RunConfig:
    return build_config(dict(run_command.make_context("run", list(args)).params), ui=False)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--burstiness", "nan"), "--burstiness must be a number, not NaN"),  # gammavariate looped forever
        (("-d", "nan"), "--duration-per-level must be a number, not NaN"),  # the level never ended
        (("--rate", "nan"), "--rate must be a number"),
        (("--rate", "inf"), "--rate must be finite"),
        (("--rate", "1e-300"), "--rate is too small"),
        (("--burstiness", "inf"), "--burstiness must be finite"),
        (("--stall-timeout", "nan"), "--stall-timeout must be a number"),
        (("--request-timeout", "inf"), "--request-timeout must be finite"),
        (("--max-duration", "1e308"), "--max-duration must be at most"),
        (("--max-tokens", "99999999999999999999999"), "--max-tokens must be at most"),
        (("--prompt-tokens", "1000000000"), "--prompt-tokens must be at most 1,000,000"),  # built in the loop
        (("-c", "1,2000000"), "--concurrency must be at most 100,000"),
        (("--temperature", "-1"), "--temperature must not be negative"),
        (("--workers", "100"), "--workers must be at most"),
        (("--header", "X-A: b\r\nX-Evil: 1"), "line break"),
        (("--expect-log", "ok", "--expect-log", "(unclosed"), "'(unclosed' is not a regular expression"),
    ],
)
def test_bad_numbers_and_values_are_one_line_errors(args: tuple[str, ...], needle: str) -> None:
    with pytest.raises(ConfigError) as e:
        config(*args)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_ordinary_values_still_pass() -> None:
    cfg = config("--rate", "0.5", "--burstiness", "0.3", "-d", "2.5", "--temperature", "0.7", "--seed",
                 str(2**40), "--workers", "2", "-c", "1,64", "--request-timeout", "0")
    assert cfg.load.rate == 0.5 and cfg.target.request_timeout_s is None and cfg.seed == 2**40


FLAGS = sorted({opt.flags[0] for _, opt, _ in option_fields(RunConfig) if opt.flags and not opt.path}
               - {"--launch", "--server-log-cmd", "--sim-args"})
VALUES = st.sampled_from(["nan", "inf", "-inf", "-1", "0", "1", "2", "0.5", "1e308", "1e-300", "-0",
                          "99999999999999999999999", "1,,4", "", "abc", "1,2", "\x00", "a\r\nb: c", "{}",
                          '{"a":1}', "[1]", "X: y", "1e9", "off", "chat", "stop", "http://[::1"]) | st.text(max_size=8)


@given(argv=st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), max_size=6))
def test_any_options_give_a_config_or_a_one_line_error_and_never_hang(argv) -> None:
    args = [x for pair in argv for x in pair]
    try:
        cfg = config(*args)
    except click.exceptions.Exit as e:  # a --help among the values: the help was printed, status 0
        assert e.exit_code == 0 and "--help" in args
        return
    except (click.ClickException, ConfigError, PlanError, PromptError) as e:
        # click's own messages quote the argument as typed (a line break in it too): the CLI prints
        # them through error_text; specload's own messages must be one line as they are
        message = error_text(e) if isinstance(e, click.ClickException) else str(e)
        assert message and "\n" not in message.strip() and "\r" not in message
        return
    # a config that is accepted can be run: its first arrivals, prompt and plan come at once
    plan = cfg.plan
    if plan.rate:
        gaps = Arrivals(plan.rate, plan.burstiness, random.Random(0).randrange(100)).next_gap_s(), 0.0
        assert all(g == g and g < float("inf") for g in gaps)
    if not (cfg.request.prompt_file or cfg.request.dataset):
        PromptSource.from_options(prompt=cfg.request.prompt, prompt_tokens=cfg.request.prompt_tokens).next()
    for level in plan.levels:
        assert level.duration_s is None or 0 < level.duration_s < float("inf")
