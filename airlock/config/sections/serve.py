"""[serve]: `airlock serve`, the console and API on the controller (airlock/serve/).

A leaf like the other sections: the listen address is checked here (the same rule the service
enforces at start), the token files are read by the service itself."""

from __future__ import annotations

import ipaddress
import math

from airlock.config.sections import Section, is_loopback, setting

DEFAULT_LISTEN = "127.0.0.1:9642"


def parse_listen(text: str) -> tuple[str, int]:
    """("host", port) from "HOST:PORT" or "[v6]:PORT"; ValueError with the problem. The host is
    an IP address or "localhost": a name that resolves elsewhere must not decide what listens."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"listen {text!r}: expected HOST:PORT, e.g. {DEFAULT_LISTEN}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    number = int(port)
    if not 1 <= number <= 65535:
        raise ValueError(f"listen {text!r}: port must be 1-65535")
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"listen {text!r}: the host must be an IP address or "
                             "localhost") from None
    return host, number


class ServeSection(Section):
    listen: str = setting(
        DEFAULT_LISTEN,
        'HOST:PORT the service listens on (`airlock serve --listen` overrides). Beyond loopback it'
        ' needs tls_cert and tls_key and a token_file, unless allow_insecure')
    token_file: str = setting(
        "",
        'bearer token for the read endpoints, console data and /metrics (first line; root-owned, '
        '0600); "" = reads are open (loopback only)')
    check_token_file: str = setting(
        "",
        'bearer token that POST /api/v1/checks requires (first line; root-owned, 0600); "" = '
        'on-demand checks through the API are off. May be the same file as token_file')
    tls_cert: str = setting("", 'PEM certificate (chain) for HTTPS; with tls_key')
    tls_key: str = setting("", 'PEM private key for HTTPS (root-owned, 0600)')
    allow_insecure: bool = setting(
        False,
        'accept a listen address beyond loopback without TLS or without a read token, and token '
        'files that others may read; for a lab, never for production')
    allowed_hosts: list[str] = setting(
        factory=list,
        doc='Host header values accepted while reads are open (no token_file), besides loopback '
            'names and the listen host: a defence against DNS rebinding from a browser')
    refresh: float = setting(
        10.0,
        'seconds between two reads of Slurm and the results store (the console and GET '
        '/api/v1/nodes serve the last read)')
    checks_per_hour: int = setting(
        12,
        'most on-demand checks POST /api/v1/checks starts per hour (429 beyond)')
    keep_checks: int = setting(50, 'finished on-demand checks kept in memory for GET')
    max_body: int = setting(16384, 'largest request body accepted, bytes (413 beyond)')

    def validate(self) -> None:
        host, _port = parse_listen(self.listen)
        if not (math.isfinite(self.refresh) and self.refresh >= 0.2):
            raise ValueError("refresh: must be a finite number >= 0.2 seconds")
        if self.checks_per_hour < 1:
            raise ValueError("checks_per_hour: must be >= 1")
        if self.keep_checks < 1:
            raise ValueError("keep_checks: must be >= 1")
        if not 1024 <= self.max_body <= 1 << 20:
            raise ValueError("max_body: must be between 1024 and 1048576 bytes")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key: set both or neither")
        for problem in self.exposure(host):
            raise ValueError(f"{problem}; or set allow_insecure = true")

    def exposure(self, host: str) -> list[str]:
        """What lets someone on the network read or steer the service through this listen
        address ([] on loopback, or with TLS and a read token). allow_insecure lets it pass."""
        if self.allow_insecure or is_loopback(host):
            return []
        out = []
        if not self.tls_cert:
            out.append(f"listen {host}: beyond loopback without TLS sends tokens and node data "
                       "in clear text; set tls_cert and tls_key")
        if not self.token_file:
            out.append(f"listen {host}: beyond loopback the reads need a token; set token_file")
        return out
