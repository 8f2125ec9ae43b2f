"""The checks of a run's configuration that need the disk or another layer, run once before the run.

``config.py`` checks each field on its own and imports nothing but data; what it cannot check
without reading a file or asking another layer lives here: request bodies that JSON cannot carry, a
record that cannot be written, prompt files, datasets and traces, Ray, the GPU source, the
simulator's options, the ``--baseline`` and ``--schedule-from`` records. ``preflight(config)``
returns the config to run (--schedule-from's schedule read, so its plan is resolved) or raises a
one-line ``ConfigError``: a bad file is a usage error before the server starts, not after an hour of
load. The CLI calls it; code that builds a config and runs it calls it too.
"""

from __future__ import annotations

import dataclasses

from specload.config import DEFAULT_DEMO_SIM, ConfigError, RunConfig
from specload.plan import Lengths


def preflight(cfg: RunConfig) -> RunConfig:
    """``cfg`` checked against the world, with what it refers to read (see the module docstring)."""
    _check_request(cfg)
    if cfg.record.path:
        from specload.record.writer import RecordError, check_writable

        try:
            check_writable(cfg.record.path)
        except RecordError as e:
            raise ConfigError(str(e)) from None
    if cfg.ray is not None:
        from specload.engine.ray_workers import RAY_MISSING, ray_available

        if not ray_available():
            raise ConfigError(f"--ray needs Ray, which is not installed: {RAY_MISSING.split(': ', 1)[1]}")
    from specload.watch.gpu import parse_gpu_metrics

    try:
        parse_gpu_metrics(cfg.watch.gpu_metrics)
    except ValueError as e:
        raise ConfigError(f"--gpu-metrics {e}") from None
    if cfg.target.url is None and cfg.sim_args != DEFAULT_DEMO_SIM:
        check_sim_args(cfg.sim_args)
    c = cfg.compare
    if c.baseline is not None:
        from specload.record.runs import RunReadError, load_run

        try:
            load_run(c.baseline)
        except RunReadError as e:
            raise ConfigError(str(e)) from None
    if c.schedule_from is not None and c.schedule is None:
        from specload.record.reader import RecordReadError, read_record
        from specload.record.schedule import ScheduleError, schedule_from_record

        try:
            schedule = schedule_from_record(read_record(c.schedule_from))
        except RecordReadError as e:
            raise ConfigError(str(e)) from None
        except ScheduleError as e:
            raise ConfigError(f"--schedule-from {c.schedule_from}: {e}") from None
        cfg = dataclasses.replace(cfg, compare=dataclasses.replace(c, schedule=schedule))
    return cfg


def _check_request(cfg: RunConfig) -> None:
    """Every request body must be writable as JSON, or each request would fail the same way; a prompt
    file, dataset or trace must be readable."""
    from specload.engine.api import check_body, json_problem
    from specload.engine.prompts import PromptError, PromptSource

    r = cfg.request
    if r.extra_body and (problem := json_problem(dict(r.extra_body))):
        raise ConfigError(f"--extra-body: {problem}")
    if problem := check_body(r, None):
        raise ConfigError(f"--max-tokens {r.max_tokens}: {problem}")
    if r.max_tokens_dist and (problem := json_problem({"max_tokens": Lengths.parse(r.max_tokens_dist).high})):
        raise ConfigError(f"--max-tokens {r.max_tokens_dist}: {problem}")
    if r.dataset or r.prompt_file or r.trace:
        try:
            PromptSource.from_options(prompt_file=r.prompt_file, dataset=r.dataset, dataset_format=r.dataset_format,
                                      trace=r.trace, trace_block_tokens=r.trace_block_tokens, multi_turn=r.multi_turn)
        except PromptError as e:
            raise ConfigError(str(e)) from None


def check_sim_args(args: tuple[str, ...]) -> None:
    """Parse the simulator's options here, so a typo is a one-line usage error before anything starts
    (not a server that dies on start-up). The session adds ``--host``/``--port`` the same way."""
    import click

    from specload.sim.cli import sim_command
    from specload.sim.config import SimConfig

    if "--help" in args or "-h" in args:
        raise ConfigError("--sim-args: see 'specload sim --help' for the simulator's options")
    try:
        ctx = sim_command.make_context("specload sim", ["--host", "127.0.0.1", "--port", "0", *args])
        SimConfig(**ctx.params)
    except click.ClickException as e:
        raise ConfigError(f"--sim-args: {e.format_message()}") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"--sim-args: {e}") from None
