"""[ondemand]: `airlock check --nodes/--partition/--feature` (airlock/ondemand/)."""

from __future__ import annotations

import math

from airlock.config.sections import Section, setting


class OndemandSection(Section):
    reservation: str = setting(
        "airlock_ondemand",
        'name of the maintenance reservation that isolates on-demand targets')
    python: str = setting("", 'interpreter on the nodes; "" = the one running this command')
    level_timeout: float = setting(1800.0, 'the whole per-node level, seconds')
    group: bool = setting(True, 'run the multi-node all-reduce after the local checks')
    group_timeout: float = setting(300.0, 'one group all-reduce, seconds')
    group_busbw_floor_gbps: float = setting(
        0.0,
        "0 = the profile's group_busbw_floor_gbps, else none")
    group_sizes_mb: list[float] = setting(
        factory=lambda: [1.0, 8.0],
        doc='message sizes of the group all-reduce, MB')
    port_range: list[int] = setting(
        factory=lambda: [29500, 29999],
        doc="[low, high] TCP ports for the group's rendezvous")
    max_group_tests: int = setting(
        32,
        'most group all-reduce runs per group of one on-demand check (the culprit search '
        'included)')
    poll_interval: float = setting(2.0, 'seconds between polls of the targets while they run')
    group_max: int = setting(
        32,
        'most nodes in one group all-reduce; more targets are cut into groups of at most this '
        'many, along the leaf switches or blocks when Slurm has a topology (0 = one group)')
    group_concurrency: int = setting(
        0, "how many groups run their all-reduce at once (0 = all)")

    def validate(self) -> None:
        for name in ("level_timeout", "group_timeout", "poll_interval"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: must be a finite number > 0")
        if not (math.isfinite(self.group_busbw_floor_gbps) and self.group_busbw_floor_gbps >= 0):
            raise ValueError("group_busbw_floor_gbps: must be a finite number >= 0")
        if not self.group_sizes_mb:
            raise ValueError("group_sizes_mb: needs at least one message size")
        if not all(math.isfinite(mb) and mb > 0 for mb in self.group_sizes_mb):
            raise ValueError("group_sizes_mb: every size must be a finite number of MB > 0")
        if self.group_max < 0 or self.group_max == 1:
            raise ValueError("group_max: must be 0 (one group) or at least 2")
        if self.group_concurrency < 0:
            raise ValueError("group_concurrency: must be >= 0 (0 = all at once)")
        if self.max_group_tests < 1:
            raise ValueError("max_group_tests: must be >= 1")
        if len(self.port_range) != 2 or not 1024 <= self.port_range[0] <= self.port_range[1] \
                or self.port_range[1] > 65535:
            raise ValueError("port_range: must be [low, high] with 1024 <= low <= high <= 65535")
