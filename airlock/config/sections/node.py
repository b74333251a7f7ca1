"""What every node's hooks read: [slurm] [registration] [healthcheck] [nvml] [checks] [prolog]
[epilog] [metrics]. Cheap to import: the HealthCheckProgram's quick path loads this module."""

from __future__ import annotations

from airlock.config.sections import LEVELS, Section, choice, in_range, positive, setting

ADOPT = ("when-idle", "next-reboot")


class SlurmSection(Section):
    bin_dir: str = setting("", 'where scontrol/sinfo live; "" = $PATH then the usual places')
    conf: str = setting("", 'exported as SLURM_CONF to every Slurm command when set')
    timeout: float = setting(15.0, 'seconds for one scontrol/sinfo call')

    def validate(self) -> None:
        positive(self.timeout, "timeout")


class RegistrationSection(Section):
    enabled: bool = setting(
        True,
        'quarantine new and rebooted nodes at slurmd start until their registration suite passes')
    level: str = setting("standard", 'level of the registration suite: quick, standard or deep')
    suite_timeout: float = setting(1800.0, 'hard limit on the whole detached suite, seconds')
    adopt: str = setting(
        "when-idle",
        'a node first seen while it runs jobs (Airlock installed on a live cluster) is adopted, '
        'not drained: the quick level runs at once, and the registration level when it is next '
        'idle ("when-idle": new jobs are refused until it has passed) or at its next reboot '
        '("next-reboot": the adopted boot counts as proven until then)')
    slurm_retry: float = setting(
        30.0,
        'how long the suite keeps retrying its final Slurm update (resume or drain) before it '
        'leaves the update to the next hook run, seconds')
    group_window: float = setting(
        0.0,
        'Nodes whose local suites pass within this many seconds of each other run a multi-node '
        'all-reduce together (coordinated through shared_dir). 0 = off.')
    group_timeout: float = setting(120.0, 'one batch all-reduce round, seconds')
    group_max: int = setting(
        32,
        'most nodes in one batch group; a window with more is cut into groups of at most this '
        'many, along the leaf switches or blocks when Slurm has a topology (0 = one group)')
    group_concurrency: int = setting(
        0,
        "how many of a window's groups run their rounds at once (0 = all); each member runs one "
        'all-reduce launcher per round')

    def validate(self) -> None:
        choice(self.level, LEVELS, "level")
        choice(self.adopt, ADOPT, "adopt")
        positive(self.suite_timeout, "suite_timeout")
        positive(self.group_timeout, "group_timeout")
        in_range(self.slurm_retry, "slurm_retry", 0, 600)
        if self.group_window < 0:
            raise ValueError("group_window: must be >= 0 (0 = off)")
        if self.group_max < 0 or self.group_max == 1:
            raise ValueError("group_max: must be 0 (one group) or at least 2")
        if self.group_concurrency < 0:
            raise ValueError("group_concurrency: must be >= 0 (0 = all at once)")


class HealthcheckSection(Section):
    level: str = setting(
        "quick",
        'level of the periodic HealthCheckProgram run; only quick (never torch)')
    budget: float = setting(
        30.0, 'whole hook budget; within the time Slurm gives the hook (HealthCheckTimeout, '
        '60 s before 26.05), less a second kept for a drain')

    def validate(self) -> None:
        choice(self.level, ("quick",), "level")
        positive(self.budget, "budget")
        if self.budget >= 55:
            raise ValueError("budget: must stay below Slurm's 60 s HealthCheckProgram kill")


class NvmlSection(Section):
    simulate: str = setting(
        "",
        'A JSON file describing simulated GPUs per node (tests, demos). "" = real NVML.')
    timeout: float = setting(5.0, 'watchdog on the whole NVML gather')

    def validate(self) -> None:
        positive(self.timeout, "timeout")


class CheckDefaults(Section):
    timeout: float = setting(300.0, 'per check, seconds')
    confirm_runs: int = setting(1, 're-runs of a failing check before it counts as a failure')
    fork_server: bool = setting(
        True,
        'fork the isolated checks (the torch ones) from one process that imported torch once '
        'per suite, instead of starting each as a program of its own (which imports torch '
        'again: 3.4 s of CPU each on a 2-core machine)')
    observe: list[str] = setting(
        factory=list,
        doc='checks in observe mode: they run, record and show their verdict (status, metrics, '
            'history) but never drain a node nor keep a boot closed; the per-check kill switch '
            'while a threshold is tuned. Added to the profile\'s own `observe` list.')
    enforce: list[str] = setting(
        factory=list,
        doc="checks that drain here although the node's profile ships them in observe mode "
            '(a floor without a public figure, which this site has measured)')

    def validate(self) -> None:
        positive(self.timeout, "timeout")
        if self.confirm_runs < 0:
            raise ValueError("confirm_runs: must be >= 0")
        both = sorted(set(self.observe) & set(self.enforce))
        if both:
            raise ValueError(f"check {both[0]!r} is in both observe and enforce")


class PrologSection(Section):
    enabled: bool = setting(True, 'run the quick level before every job')
    budget: float = setting(
        10.0,
        "The whole quick level's time budget before the job starts; keep it well below "
        "slurm.conf's PrologEpilogTimeout, or Slurm kills the prolog and drains with its own "
        '"Prolog error".')

    def validate(self) -> None:
        if not self.budget > 0:
            raise ValueError(f"budget: must be > 0, got {self.budget}")


class EpilogSection(Section):
    enabled: bool = setting(True, "check the job's GPUs after every job")
    process_grace: float = setting(
        5.0,
        "Seconds to wait for a job's processes to release the GPUs before calling them leftovers.")
    memory_used_max_mib: int = setting(
        1024,
        "MiB of device memory a job's GPU may still show in use after process_grace. An idle GPU "
        "already reports a few hundred MiB (driver and context reservations, counted in NVML's "
        '"used"); a leaked allocation or an orphaned context is usually far above 1024.')
    fatal_xids: list[int] = setting(
        factory=list,
        doc='XIDs during a job that drain the node; [] = the fatal set of the XID policy ([xid] '
            'policy_file, policy "default"), so the epilog and the periodic check agree.')

    def validate(self) -> None:
        if self.process_grace < 0:
            raise ValueError(f"process_grace: must be >= 0, got {self.process_grace}")
        if self.memory_used_max_mib < 0:
            raise ValueError(f"memory_used_max_mib: must be >= 0, got {self.memory_used_max_mib}")


class MetricsSection(Section):
    textfile_dir: str = setting(
        "",
        'node_exporter\'s --collector.textfile.directory; "" = no textfile is written. May hold '
        '{node} (several nodes on one host, as in the dev cluster).')
