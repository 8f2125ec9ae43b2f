"""Options declared once: the dataclass fields make the CLI, the TUI defaults, the checks and the record."""

from __future__ import annotations

import dataclasses

import pytest

from specload.cli_run import build_config, run_command, tui_command
from specload.config import (
    CapacityConfig,
    CompareConfig,
    ConfigError,
    LoadConfig,
    RecordConfig,
    RequestConfig,
    RunConfig,
    TargetConfig,
    WatchConfig,
)
from specload.options import from_dict, option_fields, to_dict
from tests.conftest import make_config


def params(command, *args: str) -> dict:
    return dict(command.make_context(command.name, list(args)).params)


def test_every_option_of_run_is_a_config_field_and_back() -> None:
    fields = {f.name for f, _, _ in option_fields(RunConfig)}
    cli = {p.name for p in run_command.params} - {"as_json", "no_record"}  # OutputOptions
    assert cli == fields
    assert len(fields) == len(option_fields(RunConfig))  # one namespace: no two options share a name


@pytest.mark.parametrize(
    ("args", "ui", "drain", "duration", "on_crash"),
    [
        ((), False, True, None, "stop"),
        ((), True, False, 20.0, "pause"),  # the dashboard ramps in real time: 20 s levels
        (("-n", "7"), True, False, None, "pause"),  # a request count given: no TUI duration
        (("--drain", "-d", "3", "--on-crash", "continue"), True, True, 3.0, "continue"),  # given wins
    ],
)
def test_tui_defaults_apply_only_to_what_was_not_given(args, ui, drain, duration, on_crash) -> None:
    cfg = build_config(params(tui_command, *args), ui=ui)
    assert (cfg.load.drain, cfg.load.duration_per_level_s, cfg.watch.on_crash) == (drain, duration, on_crash)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: RequestConfig(max_tokens=0), "--max-tokens must be at least 1"),
        (lambda: WatchConfig(metrics_interval_s=0.01), "--metrics-interval must be at least 0.1 s"),
        (lambda: WatchConfig(on_crash="explode"), "--on-crash must be one of pause, stop, continue"),
        (lambda: LoadConfig(concurrency=(4, 0)), "--concurrency levels must be whole numbers of at least 1"),
        (lambda: LoadConfig(rate=-1.0), "--rate must be positive"),
        (lambda: TargetConfig(url="ftp://x"), "bad URL"),
        (lambda: make_config(None, launch="vllm serve m"), "--launch needs the server's URL"),
        (lambda: make_config(None, workers=0), "--workers must be at least 1"),
    ],
)
def test_a_config_built_in_code_is_checked_like_one_from_the_command_line(build, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build()


def test_the_url_is_normalised_and_its_password_becomes_a_header_in_code_too() -> None:
    t = TargetConfig(url="http://u:pw@127.0.0.1:8000/v1", request_timeout_s=0)
    assert t.url == "http://127.0.0.1:8000"
    assert [k for k, _ in t.headers] == ["Authorization"]
    assert t.request_timeout_s is None  # 0: no limit


def test_describe_has_every_field_and_masks_secrets(tmp_path) -> None:
    cfg = make_config("http://127.0.0.1:9", headers=(("X-Api-Secret", "s3cr3t-value"),), path=str(tmp_path / "r"),
                      launch="vllm serve m --api-key sk-123456")
    d = cfg.describe()
    for section in (TargetConfig, LoadConfig, RequestConfig, WatchConfig, RecordConfig, CapacityConfig, CompareConfig,
                    RunConfig):
        sections = {"target", "load", "request", "watch", "record", "capacity", "compare"}
        # what the config resolves (the plan, a replayed schedule) is recorded as "levels" below
        resolved = {"_plan", "schedule"}
        assert {f.name for f in dataclasses.fields(section)} - sections - resolved <= set(d)
    assert d["headers"] == [["X-Api-Secret", "***"]]
    assert d["launch"] == "vllm serve m --api-key ***"
    assert d["levels"][0]["concurrency"] == 1 and "s3cr3t" not in str(d)


def test_configs_travel_to_worker_processes_whole() -> None:
    cfg = make_config("http://127.0.0.1:9", headers=(("A", "b"),), extra_body=(("stop", ["x", "y"]),),
                      request_timeout_s=0)
    assert from_dict(TargetConfig, to_dict(cfg.target)) == cfg.target
    back = from_dict(RequestConfig, to_dict(cfg.request))
    assert back.extra_body == (("stop", ("x", "y")),) and back.max_tokens == cfg.request.max_tokens


def test_help_shows_each_fields_default() -> None:
    text = run_command.get_help(run_command.make_context("run", []))
    assert "[default: 256]" in text and "[default: 1,2,4,8,16]" in text and "--no-keepalive" in text
