"""The [recovery] config section and its provider sub-tables.

Provider names use hyphens (`provider = "aws-hyperpod"`), their sub-tables underscores
(`[recovery.aws_hyperpod]`), because TOML keys become Python attributes here.
"""

from __future__ import annotations

import math
from urllib.parse import urlparse

from airlock.config.sections import Section, is_loopback, setting

PROVIDERS = ("http", "command", "aws-hyperpod", "hyperpod-slurm", "slurm-power", "none")
REBOOT_VIA = ("slurm", "provider")


class HttpSettings(Section):
    url: str = setting("", 'base URL of the REST service, see docs/recovery-http.md')
    token_file: str = setting(
        "",
        'bearer token read from this file (first line; root-owned, 0600) ...')
    token_env: str = setting("", '... or from this environment variable; never logged')
    verify: bool = setting(True, 'TLS certificate verification')
    ca_bundle: str = setting("", 'a CA file for a private PKI ("" = the system\'s)')
    timeout: float = setting(10.0, 'seconds per request (connect and read)')
    retries: int = setting(4, 'extra attempts after a 429, 5xx, timeout or connection error')
    backoff: float = setting(1.0, 'first wait, doubled per retry')
    backoff_max: float = setting(30.0, 'cap on one wait (Retry-After included)')
    allow_insecure: bool = setting(
        False,
        'accept http:// to another host, verify = false and a token file others may read (each one'
        ' is a WARN in `airlock doctor`); for a lab, never for production')

    def validate(self) -> None:
        if self.url:
            u = urlparse(self.url)
            if u.scheme not in ("http", "https") or not u.netloc:
                raise ValueError(f"http.url: must be an http(s) URL, got {self.url!r}")
        if self.timeout <= 0 or self.backoff < 0 or self.backoff_max < 0 or self.retries < 0:
            raise ValueError("http: timeout must be > 0; retries, backoff, backoff_max >= 0")
        if self.token_file and self.token_env:
            raise ValueError("http: set token_file or token_env, not both")
        if not self.allow_insecure:
            for problem in self.insecure_transport():
                raise ValueError(f"http.{problem}; or set allow_insecure = true")

    def insecure_transport(self) -> list[str]:
        """What in the URL and TLS settings lets a network attacker read or replace the
        requests (and the bearer token they carry); [] when nothing does."""
        out = []
        u = urlparse(self.url)
        if u.scheme == "http" and not is_loopback(u.hostname or ""):
            out.append(f"url: http:// to {u.hostname} sends the token and the node names in "
                       "clear text; use https://")
        if not self.verify:
            out.append("verify = false: any server can pose as the recovery API; use ca_bundle "
                       "for a private CA")
        return out


class CommandSettings(Section):
    path: str = setting("", 'an executable: `path reboot|replace|status NODE --request-id ID`')
    timeout: float = setting(120.0, 'seconds for one call of the command')

    def validate(self) -> None:
        if self.timeout <= 0:
            raise ValueError("command.timeout: must be > 0")


class HyperpodSettings(Section):
    cluster: str = setting("", 'HyperPod cluster name or ARN')
    region: str = setting("", '"" = boto3\'s default chain')
    node_ids: dict[str, str] = setting(
        factory=dict,
        doc='Slurm node name -> HyperPod instance id, for names the cluster API cannot map itself.')


class RecoverySection(Section):
    enabled: bool = setting(True, '`airlock recover` acts at all (false: it only watches)')
    provider: str = setting(
        "none",
        'who replaces nodes (and reboots them when reboot_via = "provider")')
    reboot_via: str = setting("slurm", '"slurm": scontrol reboot + RebootProgram; "provider"')
    db: str = setting(
        "/var/lib/airlock/recovery.db",
        "the recovery service's SQLite database (cases, actions, history, breaker); status and "
        'metrics read it')
    policy: str = setting(
        "",
        'escalation policy TOML; "" = the shipped airlock/recovery/policy.toml')
    poll_interval: float = setting(30.0, 'seconds between polls (one Slurm call each)')
    dry_run: bool = setting(False, 'record what would be done, do nothing')
    detect_grace: float = setting(
        60.0,
        'A new failure waits this long before its first action, so that a mass failure shows up '
        'whole (and trips the breaker) before anything is rebooted.')
    max_actions_per_hour: int = setting(10, 'rate limit on reboot/replace actions per rate_window')
    rate_window: float = setting(3600.0, 'the "hour" of max_actions_per_hour, seconds')
    max_in_flight: int = setting(4, 'nodes between an action and its verdict')
    cooldown: float = setting(900.0, 'minimum seconds between two actions on one node')
    breaker_window: float = setting(
        600.0,
        'seconds over which failures count toward the circuit breaker')
    breaker_share: float = setting(
        0.2,
        'trip when this share of the fleet fails within the window ...')
    breaker_min_nodes: int = setting(3, '... counting at least this many nodes ...')
    breaker_same_check: int = setting(5, '... or when this many nodes fail the same check')
    reboot_timeout: float = setting(1200.0, "from the reboot request to the node's new boot")
    replace_timeout: float = setting(3600.0, "from the replace request to the new instance's boot")
    verdict_timeout: float = setting(7200.0, "from a new boot to the registration suite's verdict")
    refail_window: float = setting(86400.0, 'a failure within this long after recovery escalates')
    boot_shift_min: float = setting(
        5.0,
        'A new BootTime proves a reboot only when it moved by more than this many seconds (a '
        'slurmd restart or `scontrol reconfigure` recomputes it and moves it by a second or so) '
        '...')
    boot_skew: float = setting(
        10.0,
        '... and is no older than the request minus this (clock skew between here and the node).')
    stuck_grace: float = setting(
        300.0,
        'A node pending/checking longer than [registration] suite_timeout plus this is reported as'
        ' stuck (an event and `airlock recover --show`); the service does not act on it.')
    http: HttpSettings = setting(factory=HttpSettings, doc='the [recovery.http] table')
    command: CommandSettings = setting(factory=CommandSettings,
                                       doc='the [recovery.command] table')
    aws_hyperpod: HyperpodSettings = setting(factory=HyperpodSettings,
                                            doc='the [recovery.aws_hyperpod] table')

    def validate(self) -> None:
        if self.provider not in PROVIDERS:
            raise ValueError(f"provider: must be one of {', '.join(PROVIDERS)}, "
                             f"got {self.provider!r}")
        if self.reboot_via not in REBOOT_VIA:
            raise ValueError(f"reboot_via: must be one of {', '.join(REBOOT_VIA)}")
        if self.reboot_via == "provider" and self.provider in ("none", "slurm-power"):
            raise ValueError(f"reboot_via = \"provider\" needs a provider that reboots, "
                             f"not {self.provider!r}")
        for name in ("poll_interval", "rate_window", "breaker_window", "reboot_timeout",
                     "replace_timeout", "verdict_timeout", "detect_grace", "cooldown",
                     "refail_window", "boot_shift_min", "boot_skew", "stuck_grace",
                     "breaker_share"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name}: must be a finite number")
        for name in ("poll_interval", "rate_window", "breaker_window", "reboot_timeout",
                     "replace_timeout", "verdict_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0")
        for name in ("detect_grace", "cooldown", "refail_window", "boot_shift_min", "boot_skew",
                     "stuck_grace"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        for name in ("max_actions_per_hour", "max_in_flight", "breaker_min_nodes",
                     "breaker_same_check"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1")
        if not 0 < self.breaker_share <= 1:
            raise ValueError("breaker_share: must be in (0, 1]")
        if self.provider == "http" and not self.http.url:
            raise ValueError("provider = \"http\" needs [recovery.http] url")
        if self.provider == "command" and not self.command.path:
            raise ValueError("provider = \"command\" needs [recovery.command] path")
        if self.provider == "aws-hyperpod" and not self.aws_hyperpod.cluster:
            raise ValueError("provider = \"aws-hyperpod\" needs [recovery.aws_hyperpod] cluster")
        self.http.validate()
        self.command.validate()

