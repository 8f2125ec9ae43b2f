"""``python -m specload.sim``: the same command as ``specload sim``."""

from __future__ import annotations

from specload.sim.cli import sim_command

if __name__ == "__main__":
    sim_command(prog_name="specload sim")
