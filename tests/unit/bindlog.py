"""Every address a process and everything it starts bind()s, recorded where it happens.

A tiny shared object, built with the machine's C compiler and preloaded (LD_PRELOAD) into the
process under test, wraps libc's bind(): each IPv4/IPv6 address is appended to $BIND_LOG before
the real call. Children inherit the environment, forked ranks the mapping, and C++ libraries
(gloo, the TCPStore, libuv) call bind() through libc like Python does, so no listener can be
opened unseen, however briefly it lives or however busy the machine is (a /proc poll could miss
one: a sampling assertion)."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static int (*real)(int, const struct sockaddr *, socklen_t);
    if (!real) real = (int (*)(int, const struct sockaddr *, socklen_t))dlsym(RTLD_NEXT, "bind");
    const char *log = getenv("BIND_LOG");
    char line[160] = "", ip[INET6_ADDRSTRLEN] = "";
    if (log && addr && addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(line, sizeof line, "%s %d\n", ip, ntohs(a->sin_port));
    } else if (log && addr && addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(line, sizeof line, "%s %d\n", ip, ntohs(a->sin6_port));
    }
    if (line[0]) {
        int f = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (f >= 0) { ssize_t n = write(f, line, strlen(line)); (void)n; close(f); }
    }
    return real(fd, addr, len);
}
"""


def build(folder: Path) -> Path:
    """The preload library, compiled into folder; AssertionError naming what is missing."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler (scripts/setup.sh installs gcc): the bind log cannot be built"
    src, lib = folder / "bindlog.c", folder / "bindlog.so"
    src.write_text(SOURCE)
    out = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return lib


def read(log: Path) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        ip, _, port = line.partition(" ")
        out.append((ip, int(port)))
    return out


def exposed(binds: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """Binds to anything but loopback (0.0.0.0 and :: listen on every address)."""
    return [(ip, port) for ip, port in binds if not ipaddress.ip_address(ip).is_loopback]
